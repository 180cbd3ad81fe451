"""The HTML report, rendered from a results.json recorded on an H200 (tests/data/report),
opened in headless Chromium: the claims table and every figure are there, the
figures decode, and the page logs no console errors. A screenshot is kept in
test-artifacts/ for a person to look at."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fullpipe.report.figures import add_table_figures
from fullpipe.report.html import claim_rows
from fullpipe.report.runner import write_html

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    shutil.copytree(DATA, out, dirs_exist_ok=True)
    doc = json.loads((out / "results.json").read_text())
    add_table_figures(doc["results"], out)  # what run_report does before writing the page
    page = write_html(out, doc)
    return page, doc


def chromium() -> str | None:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None and os.environ.get("CI"):
        pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium package")
    if path is None:
        pytest.skip("chromium is not installed here (apt-get install chromium)")
    return path


def run_chromium(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *extra, url],
                          capture_output=True, text=True, timeout=120)


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_page_is_self_contained_with_claims_and_figures(report):
    page, doc = report
    html = page.read_text()
    rows = claim_rows(doc["results"])
    assert len(rows) == len(doc["results"]) == 15
    table = html[html.index('id="claims-table"'):html.index("</table>", html.index('id="claims-table"'))]
    assert table.count("<tr>") == len(rows) + 1  # the header row, then one row per claim
    for r in doc["results"]:
        assert f'id="exp-{r["experiment"]}"' in html
    n_figures = sum(len(r.get("figures") or {}) for r in doc["results"])
    assert all(r.get("figures") for r in doc["results"]), "every experiment shows a figure"
    assert html.count('src="data:image/png;base64,') == n_figures
    # Nothing is fetched from anywhere: no external scripts, styles, fonts or images.
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_console_check_catches_errors(tmp_path):
    """The console check below is only worth something if it sees a real error."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("planted error");</script></body></html>')
    proc = run_chromium(tmp_path, bad.as_uri(), "--dump-dom")
    assert any("planted error" in m for m in console_messages(proc.stderr))


def test_report_in_headless_chromium(report, tmp_path):
    page, doc = report
    # Open the page as it is: it must log nothing on the console.
    proc = run_chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console_messages(proc.stderr) == []
    dom = proc.stdout
    assert 'id="claims-table"' in dom and "supported" in dom
    # A copy with a probe script reports whether every figure decoded.
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", """<script>
      window.addEventListener("load", () => {
        const imgs = [...document.images];
        const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
        console.log("FIGURES " + ok + "/" + imgs.length);
      });</script></body>"""))
    proc = run_chromium(tmp_path, probe.as_uri(), "--dump-dom")
    n_figures = sum(len(r.get("figures") or {}) for r in doc["results"])
    assert any(f"FIGURES {n_figures}/{n_figures}" in m for m in console_messages(proc.stderr)), proc.stderr[-2000:]
    # A screenshot for a person to look at.
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    run_chromium(tmp_path, page.as_uri(), "--window-size=1280,4000", f"--screenshot={shot}")
    assert shot.is_file() and shot.read_bytes()[:4] == b"\x89PNG"
