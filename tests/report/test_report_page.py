"""The HTML report, rendered from results recorded on an H200 (tests/data/report, read by
tests/report/recorded.py), opened in headless Chromium: the claims table (every canonical
claim, with the number measured, its bound and a verdict) and every figure are there, the
figures decode, and the page logs no console errors. Screenshots are kept in test-artifacts/ for a
person to look at."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fullpipe import experiments
from fullpipe.experiments.claims import CANONICAL, NOT_MEASURED, STATUSES, claims_table
from fullpipe.report.figures import add_figures
from fullpipe.report.runner import write_html
from tests.report.recorded import AWAITING_RECORD, DATA, load_doc

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0"]


def build(out: Path, doc: dict) -> Path:
    """What run_report does after the experiments: figures, then the page."""
    shutil.copytree(DATA / "figures", out / "figures", dirs_exist_ok=True)
    add_figures(doc["results"], out)
    return write_html(out, doc)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    doc = load_doc()
    return build(out, doc), doc


def section(html: str, start_marker: str) -> str:
    i = html.index(start_marker)
    return html[i:html.index("</table>", i)]


# --------------------------------------------------------------------------- the page
def test_claims_table_lists_every_canonical_claim_with_number_bound_verdict(report):
    page, doc = report
    html = page.read_text()
    table = section(html, 'id="claims-table"')
    assert table.count("<tr") == len(CANONICAL) + 1  # header, then one row per canonical claim
    canonical, further = claims_table(doc["results"])
    assert [r["key"] for r in canonical] == [c.key for c in CANONICAL]
    for c, row in zip(CANONICAL, canonical):
        assert c.claim.replace("'", "&#x27;") in table
        # every experiment of the recorded run is there, so each claim was judged from a number
        assert row["verdict"] in ("supported", "partly supported", "not supported"), row
        assert row["measured"] and row["bound"], row
        assert isinstance(row["ratio"], (int, float)), row
    assert further, "the experiments' own targets are listed too"
    assert 'id="further-claims-table"' in html
    assert all(r["verdict"] in STATUSES for r in further)


def test_claims_carry_the_recorded_numbers(report):
    """The numbers in the claims table are the recorded ones (tests/data/report/results.json)."""
    _, doc = report
    rows = {r["key"]: r for r in claims_table(doc["results"])[0]}
    assert "2.69× serial" in rows["overlap-throughput"]["measured"]
    assert rows["overlap-throughput"]["verdict"] == "supported"
    assert "2: 1.92×" in rows["stream-scaling"]["measured"]
    assert "94.4 %" in rows["alloc-overhead-reduction"]["measured"]
    assert "345.5 µs" in rows["alloc-overhead-reduction"]["bound"]
    assert "7/7 rounds" in rows["malloc-stalls-streams"]["measured"]
    assert "1.11× tiled" in rows["double-buffer-beats-tiled"]["measured"]
    assert rows["double-buffer-beats-tiled"]["verdict"] == "supported"
    assert rows["warp-specialization-beats-double-buffer"]["ratio"] == pytest.approx(0.760, abs=1e-3)
    assert rows["warp-specialization-beats-double-buffer"]["verdict"] == "not supported"
    assert rows["pinned-slots"]["ratio"] == pytest.approx(0.9268, abs=1e-3)
    assert "4.00x fewer A-load instructions" in rows["clusters-remove-duplicate-loads"]["measured"]
    assert rows["clusters-remove-duplicate-loads"]["verdict"] == "partly supported"


def test_hopper_and_attention_claims_carry_their_recorded_numbers(report):
    """The later H200 runs (tests/data/report/results-2026-11-23*.json): the Hopper ladder's
    three canonical rows and both attention experiments' targets, judged by the rules from
    the recorded numbers."""
    _, doc = report
    canonical, further = claims_table(doc["results"])
    rows = {r["key"]: r for r in canonical + further}
    ws = rows["warp-specialization-beats-double-buffer-hopper"]
    assert ws["experiment"] == "gemm-hopper" and ws["verdict"] == "not supported"
    assert ws["ratio"] == pytest.approx(1.612 / 1.727, abs=1e-3)  # 8192³ fp16, the worst of the four
    reach = rows["tma-wgmma-reaches-cublas"]
    assert "8192³ bf16 persistent 0.91× (target 0.95×)" in reach["measured"]
    assert "4096³ bf16 persistent 0.98× (target 0.9×)" in reach["measured"]
    assert reach["verdict"] == "partly supported" and "cuBLAS bf16 806" in reach["bound"]
    mc = rows["clusters-remove-duplicate-loads-hopper"]
    assert mc["ratio"] == pytest.approx(1043.22 / 1073.74, abs=1e-4) and mc["verdict"] == "supported"
    assert "1.015× faster with multicast at 8192³ bf16" in mc["measured"]
    # attention and attention-hopper: session 9's run on an H100 (results-2026-11-24-attention.json)
    assert rows["attention-d128-full"]["ratio"] == pytest.approx(0.940, abs=1e-3)
    assert rows["attention-d128-full"]["verdict"] == "supported"
    assert rows["attention-d64-causal"]["verdict"] == "supported"
    assert "2.58× faster" in rows["attention-varlen-causal"]["measured"]
    assert rows["attention-memory"]["verdict"] == "supported"
    assert "1.85 (materialized)" in rows["attention-memory"]["measured"]
    assert rows["attention-hopper-d128-full"]["ratio"] == pytest.approx(0.986, abs=1e-3)
    assert rows["attention-hopper-d128-full"]["verdict"] == "supported"
    assert rows["attention-hopper-d64-causal"]["ratio"] == pytest.approx(0.959, abs=1e-3)
    assert rows["attention-hopper-vs-mma-sync-d128-full"]["verdict"] == "supported"
    assert rows["attention-hopper-tensor-pipe"]["ratio"] == pytest.approx(1.375, abs=1e-3)
    # multi-gpu: session 10's run on four H100s (results-2026-11-26-multi-gpu.json)
    assert rows["peer-copy-link-bound"]["verdict"] == "partly supported"
    assert rows["peer-copy-link-bound"]["ratio"] == pytest.approx(0.825, abs=1e-3)
    assert rows["peer-copy-overlap"]["verdict"] == "supported"  # 92 %
    stack = rows["multi-gpu-stack-scaling"]  # judged by the worse of 2 and 4 GPUs: 4, host-bound
    assert stack["verdict"] == "not supported" and stack["ratio"] == pytest.approx(0.268, abs=1e-3)
    assert "2 GPUs, SM pull: 637887 tokens/s = 1.63× one GPU" in stack["measured"]
    assert "8 GPUs not measured (4 GPUs here)" in stack["measured"] and stack["bound"].endswith("N = 2, 4")
    # workloads: session 16's last run on an H100 (results-2026-11-26-workloads.json)
    assert rows["workload-compute-bound"]["verdict"] == "supported"
    assert rows["workload-variable-length"]["ratio"] == pytest.approx(0.949, abs=1e-3)
    assert rows["workload-variable-length"]["verdict"] == "partly supported"  # nearly host-bound on that host
    assert "variable-length: 1.24× hand-written pipeline" in rows["workload-vs-peers"]["measured"]
    assert rows["workload-vs-peers"]["verdict"] == "supported"  # compute-bound: 1.00x the hand-written
    assert "auto 28.0 MiB 25.1 ms" in rows["workload-auto-chunk"]["measured"]  # timed in the sweep's rounds
    assert rows["workload-auto-chunk"]["verdict"] == "supported"  # copy-heavy 0.99x, compute-bound 1.00x
    heavy = rows["workload-copy-heavy"]
    assert heavy["verdict"] == "supported" and "pinned in place at the second run" in heavy["measured"]
    assert rows["workload-copy-heavy-2x"]["verdict"] == "supported"


def test_hopper_multicast_without_ncu_is_not_measured_or_skipped():
    """No ncu rows in an old results.json: "not measured", not a guess; a run that says why
    ncu did not run (not installed, FULLPIPE_NO_NCU): "skipped", and the experiment's
    verdict comes from its other two claims."""
    from fullpipe.experiments.claims import with_claims
    from fullpipe.experiments.gemm_hopper import VERDICT_FROM
    from fullpipe.experiments.result import Result

    doc = load_doc()
    gh = next(r for r in doc["results"] if r["experiment"] == "gemm-hopper")
    gh["metrics"]["ncu"] = []

    def row():
        return next(r for r in claims_table(doc["results"])[0] if r["key"] == "clusters-remove-duplicate-loads-hopper")

    assert row()["verdict"] == NOT_MEASURED and "needs metrics.ncu rows" in row()["measured"]
    gh["metrics"]["ncu_skipped"] = "ncu not found"
    assert row()["verdict"] == "skipped" and "ncu not found" in row()["measured"]
    res = with_claims(Result.from_dict(gh), VERDICT_FROM)
    assert res.verdict == "partly supported"  # not supported, partly supported, skipped


def test_page_is_self_contained_with_every_figure(report):
    page, doc = report
    html = page.read_text()
    for r in doc["results"]:
        assert f'id="exp-{r["experiment"]}"' in html
        assert r.get("figures"), f"{r['experiment']} shows a figure"
        assert not r.get("figure_notes"), (r["experiment"], r.get("figure_notes"))
    # every experiment has its purpose-made figure; the CUPTI timeline is kept beside overlap's
    for name in experiments.names():
        if name in AWAITING_RECORD:
            continue
        r = next(x for x in doc["results"] if x["experiment"] == name)
        assert any(Path(v).name == f"{name}.png" for v in r["figures"].values()), (name, r["figures"])
    overlap = next(x for x in doc["results"] if x["experiment"] == "overlap")
    assert any("timeline" in k for k in overlap["figures"])
    assert "throughput" not in overlap["figures"]  # the experiment's own plot, replaced by the page's
    n_figures = sum(len(r.get("figures") or {}) for r in doc["results"])
    assert html.count('src="data:image/png;base64,') == n_figures
    # Nothing is fetched from anywhere: no external scripts, styles, fonts or images; no scripts at all.
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html
    # device facts and software versions at the top, before the claims
    assert html.index('id="device"') < html.index('id="claims-table"')
    assert "NVIDIA H200" in html and 'id="versions"' in html
    for soft in ("fullpipe", "python", "CUDA driver", "NVRTC", "torch"):
        assert f"<td>{soft}</td>" in section(html, 'id="versions"')


# --------------------------------------------------------------------------- old and partial data
def test_a_missing_metric_shows_not_measured_instead_of_a_number(tmp_path):
    doc = load_doc()
    ao = next(r for r in doc["results"] if r["experiment"] == "alloc-overhead")
    del ao["metrics"]["pool_cost_reduction_vs_cumemalloc"]
    ov = next(r for r in doc["results"] if r["experiment"] == "overlap")
    ov["table"] = [r for r in ov["table"] if r["mode"] != "serial"]  # no serial baseline
    for r in (ao, ov):  # an older results.json: no claims recorded by the experiments themselves
        r["claims"] = []
    rows = {r["key"]: r for r in claims_table(doc["results"])[0]}
    for key in ("alloc-overhead-reduction", "overlap-throughput", "stream-scaling"):
        assert rows[key]["verdict"] == NOT_MEASURED
        assert rows[key]["measured"].startswith("not measured in this results.json"), rows[key]
        assert rows[key]["ratio"] is None
    doc["results"] = [ao, ov]  # the page of these two is enough (the others only take time to draw)
    page = build(tmp_path, doc)
    assert "not measured in this results.json" in page.read_text()


def test_not_run_failed_and_skipped_experiments_keep_their_claims(tmp_path):
    doc = load_doc()
    keep = {"overlap", "alloc-stall"}
    doc["results"] = [r for r in doc["results"] if r["experiment"] in keep] + [
        {"experiment": "gemm", "claim": "", "verdict": "failed", "device": {}, "params": {}, "metrics": {},
         "table": [], "notes": ["RuntimeError: cuBLAS went away", "Traceback (most recent call last):\n  ..."]},
        {"experiment": "cluster", "claim": "", "verdict": "skipped", "device": {}, "params": {}, "metrics": {},
         "table": [], "notes": ["skipped: missing optional dependency: No module named 'torch'"]},
    ]
    rows = {r["key"]: r for r in claims_table(doc["results"])[0]}
    assert len(rows) == len(CANONICAL)
    assert rows["double-buffer-beats-tiled"]["verdict"] == "failed"
    assert "cuBLAS went away" in rows["double-buffer-beats-tiled"]["measured"]
    assert rows["clusters-remove-duplicate-loads"]["verdict"] == "skipped"
    assert "torch" in rows["clusters-remove-duplicate-loads"]["measured"]
    assert rows["pageable-kills-overlap"]["verdict"] == "not run"
    assert rows["overlap-throughput"]["verdict"] == "supported"
    html = build(tmp_path, doc).read_text()
    assert html.count("<tr", html.index('id="claims-table"'), html.index("</table>", html.index('id="claims-table"'))) \
        == len(CANONICAL) + 1
    assert "cuBLAS went away" in html and "not run" in html


def test_claims_an_experiment_recorded_take_precedence(tmp_path):
    doc = load_doc()
    cl = next(r for r in doc["results"] if r["experiment"] == "cluster")
    cl["claims"] = [{"key": "clusters-remove-duplicate-loads", "claim": "clusters remove duplicate loads",
                     "measured": "A from L2 3.90× fewer bytes (ncu)", "bound": "cluster of 4", "ratio": 0.975,
                     "verdict": "partly supported", "target": "rule"},
                    {"key": "cluster-extra", "claim": "an extra claim", "measured": "x", "bound": "y",
                     "ratio": None, "verdict": "supported"}]
    canonical, further = claims_table(doc["results"])
    row = next(r for r in canonical if r["key"] == "clusters-remove-duplicate-loads")
    assert row["measured"] == "A from L2 3.90× fewer bytes (ncu)"
    assert any(r["key"] == "cluster-extra" for r in further)


def test_cluster_rule_reads_the_a_load_ratio_under_its_old_and_new_names():
    """The recorded results.json comes from when both cluster kernels copied A with
    cp.async: its A-load ratio is ``ncu_a_ldgsts_own_over_shared``. Since shared_a loads
    its quarter with LDG, the experiment records ``ncu_a_loads_own_over_shared``. The
    rule (used for a result that recorded no claim of its own) reads either, and falls
    back to the A bytes attributed from L2 reads, then to the construction."""
    doc = load_doc()
    cl = next(r for r in doc["results"] if r["experiment"] == "cluster")
    cl["claims"] = []
    m = cl["metrics"]

    def row():
        return next(r for r in claims_table(doc["results"])[0] if r["key"] == "clusters-remove-duplicate-loads")

    old = row()  # the recorded (old) name
    assert "4.00× fewer A-load instructions (ncu, 2048³)" in old["measured"]
    assert old["ratio"] == pytest.approx(1.0) and old["verdict"] == "partly supported"
    m["ncu_a_loads_own_over_shared"] = m.pop("ncu_a_ldgsts_own_over_shared")  # the new name
    assert row() == old
    del m["ncu_a_loads_own_over_shared"]
    assert "A from L2 6.86× fewer bytes" in row()["measured"]
    del m["ncu_a_bytes_own_over_shared"]
    assert "4.0× fewer loads (by the kernels' construction, not measured)" in row()["measured"]


def test_newer_result_shapes_render(tmp_path):
    """Shapes the experiments produce since the data was recorded (an overlap chunk sweep,
    the pinned ring's host bound, persistent's chain workload, cluster's ncu rows). The
    numbers added here are placeholders for the drawing code only; they are not shown
    as measurements anywhere."""
    doc = load_doc()
    by = {r["experiment"]: r for r in doc["results"]}
    bal = next(r for r in by["overlap"]["table"] if r["workload"] == "balanced" and r["streams"] == 3)
    for mib, ratio in ((2, 0.85), (4, 0.9), (8, 0.93), (16, 0.96)):
        by["overlap"]["table"].append({**bal, "workload": "balanced, chunk sweep", "chunk_MiB": mib,
                                       "ratio": ratio, "speedup": 2.9 * ratio, "GB/s": 48.0 * ratio})
    by["pinned"]["metrics"]["host_memmove_bound"] = {"threads": 4, "in_gbps": 20.0, "both_gbps_each_way": 15.0}
    by["pinned"]["metrics"]["ring_ratio_to_host_bound"] = {"h2d": 0.9, "both": 0.9}
    for r in by["persistent"]["table"]:
        r["workload"] = "gemm tiles" if r.get("TFLOP/s") else "grid barrier"
    by["persistent"]["table"].append({"workload": "chain", "shape": "B=4", "kernel": "persistent", "ms": 1.0,
                                      "us/step": 5.0})
    by["cluster"]["table"].append({"kernel": "cluster_gemm_own_a", "measurement": "ncu 2048^3"})
    doc["results"] = [by[name] for name in ("overlap", "pinned", "persistent", "cluster")]  # only these changed
    out = tmp_path / "r"
    out.mkdir()
    html = build(out, doc).read_text()
    for name in ("overlap", "pinned", "persistent", "cluster"):
        assert not by[name].get("figure_notes"), by[name]["figure_notes"]
    assert len(by["overlap"]["figures"]) == 3  # streams, chunk sweep, timeline
    rows = {r["key"]: r for r in claims_table(doc["results"])[0] + claims_table(doc["results"])[1]}
    assert "memmove bound" in rows["pinned-ring"]["bound"]
    assert html.count('src="data:image/png;base64,') == sum(len(r["figures"]) for r in doc["results"])


# --------------------------------------------------------------------------- headless Chromium
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
    # A copy with a probe script reports whether every figure decoded, and the page's height.
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", """<script>
      window.addEventListener("load", () => {
        const imgs = [...document.images];
        const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
        console.log("FIGURES " + ok + "/" + imgs.length);
        console.log("HEIGHT " + document.documentElement.scrollHeight);
      });</script></body>"""))
    proc = run_chromium(tmp_path, probe.as_uri(), "--dump-dom", "--window-size=1280,1000")
    n_figures = sum(len(r.get("figures") or {}) for r in doc["results"])
    msgs = console_messages(proc.stderr)
    assert any(f"FIGURES {n_figures}/{n_figures}" in m for m in msgs), proc.stderr[-2000:]
    height = next((int(re.search(r"HEIGHT (\d+)", m).group(1)) for m in msgs if "HEIGHT " in m), 16000)
    # Screenshots for a person to look at: the top (device, claims) and the whole page.
    ARTIFACTS.mkdir(exist_ok=True)
    top = ARTIFACTS / "report-top.png"
    run_chromium(tmp_path, page.as_uri(), "--window-size=1280,2600", f"--screenshot={top}")
    assert top.is_file() and top.read_bytes()[:4] == b"\x89PNG"
    shot = ARTIFACTS / "report.png"
    run_chromium(tmp_path, page.as_uri(), f"--window-size=1280,{min(height + 40, 30000)}", f"--screenshot={shot}")
    assert shot.is_file() and shot.read_bytes()[:4] == b"\x89PNG"
    shutil.copy(page, ARTIFACTS / "report.html")


def test_experiments_fill_their_claims_from_the_recorded_numbers():
    """What the end of each experiment's run() does (with_claims), on the recorded results:
    every rule finds its numbers, so no claim is 'failed' for a missing metric. An
    experiment's own (non-canonical) claim may be 'skipped' when the experiment says it
    does not measure it yet and why (two-level's decode claims)."""
    from fullpipe.experiments.result import Result
    from fullpipe.experiments.claims import CANONICAL_KEYS, with_claims

    for d in load_doc()["results"]:
        res = with_claims(Result.from_dict(d))
        assert res.claims, d["experiment"]
        for c in res.claims:
            if c["verdict"] == "skipped" and c["key"] not in CANONICAL_KEYS:
                assert c["measured"].startswith("not measured: ") and len(c["measured"]) > 40, c
                continue
            assert c["verdict"] in ("supported", "partly supported", "not supported"), (d["experiment"], c)
            assert c["key"] and c["measured"] and c["bound"], c
        Result.from_dict(res.as_dict())  # and it round-trips through JSON
