"""Render experiment results as one self-contained HTML page.

Self-contained: CSS inline, figures embedded as base64 PNG, no scripts, fonts or
images from the network, so the page opens anywhere and can be mailed as one file.

Top to bottom: the device and the software, a summary line, the claims table
(every canonical claim with the number measured here, its bound, the ratio and a
verdict; then the experiments' own targets), an index of the experiments with
their run times, and one section per experiment: the technique, its claims, the
figures, the table, notes and how it was measured.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import re
from pathlib import Path
from typing import Any

from ..experiments.claims import NOT_MEASURED, NOT_RUN, claims_table, failure_reason

VERDICT_CLASS = {
    "supported": "ok",
    "partly supported": "partly",
    "not supported": "no",
    "skipped": "skip",
    "failed": "fail",
    NOT_MEASURED: "skip",
    NOT_RUN: "skip",
}

CSS = """
:root { --ink: #1d2330; --muted: #5b6275; --line: #d8dce6; --soft: #f3f5f9; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5rem auto;
       max-width: 1180px; color: var(--ink); line-height: 1.45; padding: 0 1.2rem; }
h1 { margin: 0 0 .2rem 0; font-size: 1.7rem; }
h2 { margin-top: 2.4rem; border-bottom: 2px solid #e3e6ee; padding-bottom: .25rem; }
h3 { margin: 1.4rem 0 .4rem 0; font-size: 1.05rem; }
a { color: #1a56a8; text-decoration: none; } a:hover { text-decoration: underline; }
.sub { color: var(--muted); margin: 0; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .88rem; }
th, td { border: 1px solid var(--line); padding: .28rem .5rem; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.verdict { font-weight: 600; padding: .08rem .45rem; border-radius: .3rem; white-space: nowrap; font-size: .85rem; }
.ok { background: #d9f2df; color: #145c2a; } .partly { background: #fff1c9; color: #6b4e00; }
.no { background: #fbdada; color: #7d1d1d; } .skip { background: #eceef3; color: #4a5063; }
.fail { background: #7d1d1d; color: #fff; }
tr.v-ok td.vcell { border-left: 4px solid #2e9e4f; } tr.v-partly td.vcell { border-left: 4px solid #d9a400; }
tr.v-no td.vcell { border-left: 4px solid #c62828; } tr.v-fail td.vcell { border-left: 4px solid #7d1d1d; }
tr.v-skip td.vcell { border-left: 4px solid #9aa0ad; }
.rule { color: var(--muted); font-size: .75rem; margin-top: .2rem; max-width: 15rem; }
table.claims { width: 100%; } table.claims td:first-child { font-weight: 600; min-width: 12rem; }
table.claims td.measured { min-width: 16rem; }
.summary { font-size: 1rem; margin: .8rem 0; display: flex; flex-wrap: wrap; gap: .4rem .6rem; align-items: center; }
.grid { display: grid; grid-template-columns: 3fr 2fr; gap: 1.2rem; align-items: start; }
.facts td:first-child, .facts td:nth-child(3) { color: var(--muted); }
.facts { width: 100%; }
ul.impl { font-size: .86rem; color: #3b4254; margin: .3rem 0 0 0; padding-left: 1.2rem; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #e3e6ee; display: block; }
figcaption { color: var(--muted); font-size: .86rem; margin-top: .2rem; }
.notes { color: #3b4254; font-size: .9rem; } .notes li { margin: .15rem 0; }
pre { white-space: pre-wrap; font-size: .78rem; background: #f6f7fa; padding: .5rem; border-radius: .3rem;
      max-height: 24rem; overflow: auto; }
details { margin: .5rem 0; } summary { cursor: pointer; color: #1a56a8; }
.title { color: var(--muted); margin: .1rem 0 .6rem 0; font-style: italic; }
.time { color: var(--muted); font-size: .85rem; font-weight: 400; margin-left: .4rem; }
.scroll { overflow-x: auto; }
code { background: var(--soft); padding: 0 .2rem; border-radius: .2rem; font-size: .9em; }
"""

FACT_LABELS = [
    ("name", "GPU"), ("compute_capability", "compute capability"), ("arch", "arch"), ("sm_count", "SMs"),
    ("copy_engines", "copy engines"), ("max_resident_grids", "max resident grids"),
    ("concurrent_kernels", "concurrent kernels"), ("shared_memory_per_sm", "shared memory / SM"),
    ("shared_memory_per_block_optin", "shared memory / block (opt-in)"), ("l2_cache", "L2 cache"),
    ("global_memory", "global memory"), ("memory_bus_width_bits", "memory bus (bits)"),
    ("memory_pools_supported", "memory pools"), ("cluster_launch", "cluster launch"),
    ("pcie_generation", "PCIe gen"), ("pcie_width", "PCIe width"),
]
BYTES_FACTS = {"shared_memory_per_sm", "shared_memory_per_block_optin", "l2_cache", "global_memory"}


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ".".join(str(x) for x in v) if all(isinstance(x, int) for x in v) and len(v) == 2 else str(v)
    return "" if v is None else str(v)


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return _fmt(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _duration(s: Any) -> str:
    if not isinstance(s, (int, float)):
        return "not recorded"
    if s < 60:
        return f"{s:.1f} s"
    return f"{int(s // 60)} min {s % 60:02.0f} s"


def _badge(verdict: str) -> str:
    return f'<span class="verdict {VERDICT_CLASS.get(verdict, "skip")}">{_e(verdict)}</span>'


def _table(rows: list[dict], cls: str = "") -> str:
    if not rows:
        return ""
    cols: list[str] = []
    for row in rows:
        cols += [c for c in row if c not in cols]
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = []
    for row in rows:
        cells = []
        for c in cols:
            v = row.get(c)
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            cells.append(f'<td class="num">{_e(_fmt(v))}</td>' if num else f"<td>{_e(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _claims_html(rows: list[dict], table_id: str, with_experiment: bool = True) -> str:
    head = ("<tr><th>claim</th><th>measured here</th><th>bound</th><th>ratio</th><th>verdict</th>"
            + ("<th>experiment</th>" if with_experiment else "") + "</tr>")
    body = []
    for r in rows:
        v = r.get("verdict", "failed")
        ratio = f"{r['ratio']:.3g}" if isinstance(r.get("ratio"), (int, float)) else ""
        rule = f'<div class="rule">{_e(r["target"])}</div>' if r.get("target") else ""
        exp = (f'<td><a href="#exp-{_e(r["experiment"])}">{_e(r["experiment"])}</a></td>'
               if with_experiment else "")
        body.append(f'<tr class="v-{VERDICT_CLASS.get(v, "skip")}"><td>{_e(r.get("claim"))}</td>'
                    f'<td class="measured">{_e(r.get("measured"))}</td><td>{_e(r.get("bound"))}</td>'
                    f'<td class="num">{ratio}</td><td class="vcell">{_badge(v)}{rule}</td>{exp}</tr>')
    return f'<table class="claims" id="{table_id}"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _counts(rows: list[dict]) -> str:
    order = ["supported", "partly supported", "not supported", "failed", "skipped", NOT_MEASURED, NOT_RUN]
    n = {v: sum(1 for r in rows if r.get("verdict") == v) for v in order}
    return " ".join(f"{_badge(v)}&nbsp;{n[v]}" for v in order if n[v])


def _img(path: Path, caption: str) -> str:
    try:
        data = base64.b64encode(path.read_bytes()).decode()
    except OSError:
        return f'<p class="notes">figure "{_e(caption)}" missing ({_e(path.name)})</p>'
    return (f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _doc_html(text: str) -> str:
    """A docstring's paragraphs: '- ' and '1. ' lines become list items; ``x`` is code."""
    out = []
    for para in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in para.splitlines() if ln.strip()]
        items: list[str] = []
        lead: list[str] = []
        for ln in lines:
            if re.match(r"^(-|\d+\.)\s", ln):
                items.append(re.sub(r"^(-|\d+\.)\s+", "", ln))
            elif items:
                items[-1] += " " + ln
            else:
                lead.append(ln)

        def fmt(s: str) -> str:
            return re.sub(r"``(.+?)``", r"<code>\1</code>", _e(s))

        if lead:
            out.append(f"<p>{fmt(' '.join(lead))}</p>")
        if items:
            out.append("<ul>" + "".join(f"<li>{fmt(i)}</li>" for i in items) + "</ul>")
    return "".join(out)


def _device_html(facts: dict | None, versions: dict) -> str:
    parts = ['<h2 id="device">Device and software</h2><div class="grid"><div>']
    if facts:
        cells = []
        for key, label in FACT_LABELS:
            if key not in facts:
                continue
            v = facts[key]
            cells.append((label, _bytes(v) if key in BYTES_FACTS else _fmt(v)))
        rows = []
        for i in range(0, len(cells), 2):
            pair = cells[i:i + 2] + [("", "")] * (2 - len(cells[i:i + 2]))
            rows.append("<tr>" + "".join(f"<td>{_e(a)}</td><td>{_e(b)}</td>" for a, b in pair) + "</tr>")
        parts.append(f'<table class="facts"><tbody>{"".join(rows)}</tbody></table>')
        if facts.get("implications"):
            parts.append('<ul class="impl">' + "".join(f"<li>{_e(x)}</li>" for x in facts["implications"]) + "</ul>")
    else:
        parts.append("<p>No device facts recorded.</p>")
    parts.append("</div><div>")
    soft = dict(versions)
    if facts:
        for key, label in (("driver_version", "CUDA driver"), ("runtime_version", "CUDA runtime"),
                           ("nvrtc_version", "NVRTC")):
            if facts.get(key) and label not in soft:
                soft[label] = facts[key]
    vrows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in soft.items())
    parts.append(f'<table class="facts" id="versions"><thead><tr><th>software</th><th>version</th></tr></thead>'
                 f"<tbody>{vrows}</tbody></table></div></div>")
    return "".join(parts)


def _section(r: dict, base_dir: Path, info: dict[str, str], claims: list[dict]) -> str:
    name = r.get("experiment", "?")
    verdict = r.get("verdict", "failed")
    p = [f'<section id="exp-{_e(name)}"><h2>{_e(name)} {_badge(verdict)}'
         f'<span class="time">{_e(_duration(r.get("wall_s")))}</span></h2>']
    if info.get("title"):
        p.append(f'<p class="title">{_e(info["title"])}</p>')
    if info.get("technique"):
        p.append(f"<p>{_e(info['technique'])}</p>")
    if info.get("question"):
        p.append(f"<p><b>This experiment:</b> {_e(info['question'])}</p>")
    if verdict in ("failed", "skipped"):
        notes = r.get("notes") or []
        p.append(f'<p><b>{_e(verdict.capitalize())}:</b> {_e(failure_reason(r))}</p>')
        rest = [n for n in notes if n.strip()]
        if rest:
            p.append("<details><summary>details (log, traceback)</summary>"
                     + "".join(f"<pre>{_e(n)}</pre>" for n in rest) + "</details>")
    if claims:
        p.append("<h3>Claims</h3>" + _claims_html(claims, f"claims-{name}", with_experiment=False))
    b = r.get("bound")
    if b and verdict not in ("failed", "skipped"):
        ratio = r.get("ratio")
        p.append(f'<p class="notes"><b>Bound:</b> {_e(b["name"])} = {_e(_fmt(b["value"]))} {_e(b["unit"])}'
                 + (f" · <b>ratio</b> {ratio:.3g}" if isinstance(ratio, (int, float)) else "") + "</p>")
    for fig_name, rel in (r.get("figures") or {}).items():
        p.append(_img((base_dir / rel) if not Path(rel).is_absolute() else Path(rel), fig_name))
    for n in r.get("figure_notes") or []:
        p.append(f'<p class="notes">{_e(n)}</p>')
    if r.get("table"):
        p.append("<h3>Numbers</h3>" + _table(r["table"]))
    if verdict not in ("failed", "skipped"):
        notes = r.get("notes") or []
        text_notes = [n for n in notes if "\n" not in n]
        blocks = [n for n in notes if "\n" in n]
        if text_notes:
            p.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in text_notes) + "</ul>")
        for blk in blocks:
            p.append(f"<pre>{_e(blk)}</pre>")
    for tname, rel in (r.get("traces") or {}).items():
        p.append(f'<p class="notes">Perfetto trace: <a href="{_e(rel)}">{_e(tname)}</a> '
                 "(a file beside this page; open it at ui.perfetto.dev)</p>")
    if info.get("method") or r.get("params"):
        p.append("<details><summary>How it is measured</summary>" + _doc_html(info.get("method", ""))
                 + (f"<p><b>Parameters:</b> <code>{_e(_params(r.get('params')))}</code></p>" if r.get("params") else "")
                 + "</details>")
    p.append("</section>")
    return "".join(p)


def _params(params: Any) -> str:
    text = ", ".join(f"{k}={v}" for k, v in (params or {}).items())
    return text if len(text) < 600 else text[:600] + " …"


def render(results: list[dict], *, facts: dict | None, versions: dict, base_dir: Path,
           descriptions: dict[str, Any] | None = None, title: str = "fullpipe report",
           meta: dict | None = None) -> str:
    """The whole page. ``base_dir`` resolves relative figure paths in the results;
    ``descriptions`` maps an experiment to {"title", "technique", "question", "method"}
    (or a plain string); ``meta`` has the run's mode, start time and total seconds."""
    meta = meta or {}
    descriptions = descriptions or {}
    infos = {k: (v if isinstance(v, dict) else {"question": str(v)}) for k, v in descriptions.items()}
    canonical, further = claims_table(results)
    by_exp: dict[str, list[dict]] = {}
    for row in canonical + further:
        by_exp.setdefault(row["experiment"], []).append(row)

    when = meta.get("started") or _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    dev = (facts or {}).get("name", "no device recorded")
    mode = "quick mode" if meta.get("quick") else "full sizes" if meta.get("quick") is False else ""
    total = meta.get("wall_s")
    if not isinstance(total, (int, float)):
        times = [r.get("wall_s") for r in results]
        total = sum(times) if times and all(isinstance(t, (int, float)) for t in times) else None
    took = f"in {_duration(total)}" if isinstance(total, (int, float)) else "(run time not recorded)"
    sub = " · ".join(x for x in (dev, mode, when, f"{len(results)} experiments {took}") if x)

    parts = [f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}: {_e(dev)}</title>',
             f"<style>{CSS}</style></head><body>",
             f'<header><h1>{_e(title)}</h1><p class="sub">{_e(sub)}</p></header>']
    parts.append(_device_html(facts, versions))

    failed = [r["experiment"] for r in results if r.get("verdict") == "failed"]
    skipped = [r["experiment"] for r in results if r.get("verdict") == "skipped"]
    parts.append('<h2 id="claims">Claims</h2>')
    parts.append(f'<div class="summary" id="summary"><b>{len(canonical)} claims:</b> {_counts(canonical)}'
                 f"<span>· <b>experiments:</b> {len(results)} run, {len(failed)} failed, {len(skipped)} skipped"
                 f" · total time {_e(_duration(total))}</span></div>")
    parts.append('<p class="notes">Each number was measured on this GPU in this run, beside the bound it is compared '
                 "to (measured in the same run where it is a measurement). Ratio = measured / bound. The rule under "
                 "each verdict says how the number was judged.</p>")
    parts.append(_claims_html(canonical, "claims-table"))
    if further:
        parts.append(f'<h3 id="further">fullpipe\'s own targets and further claims ({len(further)}): '
                     f"{_counts(further)}</h3>")
        parts.append(_claims_html(further, "further-claims-table"))

    # An index of the experiments, with run times.
    idx = ["<tr><th>experiment</th><th>what it measures</th><th>verdict</th><th>claims</th><th>time</th></tr>"]
    for r in results:
        name = r.get("experiment", "?")
        rows = by_exp.get(name, [])
        idx.append(f'<tr><td><a href="#exp-{_e(name)}">{_e(name)}</a></td><td>{_e(infos.get(name, {}).get("title", ""))}</td>'
                   f'<td>{_badge(r.get("verdict", "failed"))}</td><td>{_counts(rows)}</td>'
                   f'<td class="num">{_e(_duration(r.get("wall_s")))}</td></tr>')
    parts.append('<h2 id="experiments">Experiments</h2><table id="experiments-table"><tbody>'
                 + "".join(idx) + "</tbody></table>")

    for r in results:
        parts.append(_section(r, base_dir, infos.get(r.get("experiment", ""), {}), by_exp.get(r.get("experiment"), [])))
    parts.append(f'<p class="sub" style="margin-top:2rem">fullpipe {_e(versions.get("fullpipe", ""))} · '
                 "numbers and raw results: results.json beside this page</p></body></html>")
    return "\n".join(parts)
