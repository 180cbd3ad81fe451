"""Render experiment results as one self-contained HTML page.

Self-contained: CSS inline, figures embedded as base64 PNG, no scripts or fonts
from the network, so the page opens anywhere and can be mailed as one file.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
from pathlib import Path
from typing import Any, Iterable

VERDICT_CLASS = {
    "supported": "ok",
    "partly supported": "partly",
    "not supported": "no",
    "skipped": "skip",
    "failed": "fail",
}

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto;
       max-width: 1150px; color: #1d2330; line-height: 1.45; padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2.4rem; border-bottom: 2px solid #e3e6ee; padding-bottom: .2rem; }
.sub { color: #5b6275; margin-top: 0; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.92rem; }
th, td { border: 1px solid #d8dce6; padding: 0.3rem 0.55rem; text-align: left; vertical-align: top; }
th { background: #f3f5f9; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.verdict { font-weight: 600; padding: 0.1rem 0.45rem; border-radius: 0.3rem; white-space: nowrap; }
.ok { background: #d9f2df; color: #145c2a; } .partly { background: #fff1c9; color: #6b4e00; }
.no { background: #fbdada; color: #7d1d1d; } .skip { background: #eceef3; color: #4a5063; }
.fail { background: #7d1d1d; color: #fff; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #e3e6ee; }
figcaption { color: #5b6275; font-size: 0.88rem; }
.notes { color: #3b4254; font-size: 0.92rem; } pre { white-space: pre-wrap; font-size: 0.8rem;
       background: #f6f7fa; padding: 0.5rem; border-radius: 0.3rem; }
.facts td:first-child { color: #5b6275; }
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return "" if v is None else str(v)


def _badge(verdict: str) -> str:
    return f'<span class="verdict {VERDICT_CLASS.get(verdict, "skip")}">{_e(verdict)}</span>'


def claim_rows(results: Iterable[dict]) -> list[dict]:
    """One row per claim: an experiment's `claims` list, or its single claim."""
    rows = []
    for r in results:
        if r.get("claims"):
            for c in r["claims"]:
                rows.append({"experiment": r["experiment"], **c})
            continue
        b = r.get("bound")
        rows.append({
            "experiment": r["experiment"],
            "claim": r.get("claim", ""),
            "measured": r.get("metrics", {}).get("headline", ""),
            "bound": f"{b['name']} = {b['value']:.4g} {b['unit']}" if b else "",
            "ratio": r.get("ratio"),
            "verdict": r.get("verdict", "failed"),
        })
    return rows


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
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _img(path: Path, caption: str) -> str:
    try:
        data = base64.b64encode(path.read_bytes()).decode()
    except OSError:
        return f'<p class="notes">figure {_e(caption)} missing ({_e(path.name)})</p>'
    return (f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def render(results: list[dict], *, facts: dict | None, versions: dict, base_dir: Path,
           descriptions: dict[str, str] | None = None, title: str = "fullpipe report") -> str:
    """The whole page. ``base_dir`` resolves relative figure paths in the results."""
    descriptions = descriptions or {}
    parts = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>",
             f"<style>{CSS}</style></head><body>"]
    when = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    dev = facts.get("name", "no device") if facts else "no device"
    parts.append(f"<h1>{_e(title)}</h1><p class=\"sub\">{_e(dev)} · {when}</p>")

    rows = claim_rows(results)
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICT_CLASS}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    parts.append(f'<h2 id="claims">Claims</h2><p>{_e(summary)}</p>')
    parts.append('<table id="claims-table"><thead><tr><th>claim</th><th>measured here</th><th>bound</th>'
                 "<th>ratio</th><th>verdict</th><th>experiment</th></tr></thead><tbody>")
    for r in rows:
        ratio = f"{r['ratio']:.3g}" if isinstance(r.get("ratio"), (int, float)) else ""
        parts.append(f"<tr><td>{_e(r['claim'])}</td><td>{_e(r.get('measured'))}</td><td>{_e(r.get('bound'))}</td>"
                     f'<td class="num">{ratio}</td><td>{_badge(r["verdict"])}</td>'
                     f'<td><a href="#exp-{_e(r["experiment"])}">{_e(r["experiment"])}</a></td></tr>')
    parts.append("</tbody></table>")

    if facts:
        keep = ["name", "compute_capability", "sm_count", "copy_engines", "max_resident_grids",
                "shared_memory_per_sm", "shared_memory_per_block_optin", "l2_cache", "global_memory",
                "memory_pools_supported", "pcie_generation", "pcie_width", "driver_version",
                "runtime_version", "nvrtc_version"]
        frows = [{"fact": k, "value": _fmt(facts.get(k))} for k in keep if k in facts]
        parts.append('<h2 id="device">Device and software</h2>' + _table(frows, "facts"))
        if facts.get("implications"):
            parts.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in facts["implications"]) + "</ul>")
    parts.append(_table([{"software": k, "version": v} for k, v in versions.items()], "facts"))

    for r in results:
        name = r["experiment"]
        parts.append(f'<h2 id="exp-{_e(name)}">{_e(name)} {_badge(r.get("verdict", "failed"))}</h2>')
        if descriptions.get(name):
            parts.append(f"<p>{_e(descriptions[name])}</p>")
        parts.append(f"<p><b>Claim:</b> {_e(r.get('claim'))}</p>")
        b = r.get("bound")
        if b:
            ratio = r.get("ratio")
            parts.append(f"<p><b>Bound:</b> {_e(b['name'])} = {b['value']:.4g} {_e(b['unit'])}"
                         + (f" · <b>ratio</b> {ratio:.3g}" if isinstance(ratio, (int, float)) else "") + "</p>")
        parts.append(_table(r.get("table") or []))
        for fig_name, rel in (r.get("figures") or {}).items():
            parts.append(_img((base_dir / rel) if not Path(rel).is_absolute() else Path(rel), fig_name))
        for tname, rel in (r.get("traces") or {}).items():
            parts.append(f'<p class="notes">Perfetto trace: <a href="{_e(rel)}">{_e(tname)}</a> '
                         "(open in ui.perfetto.dev)</p>")
        notes = r.get("notes") or []
        if notes:
            text_notes = [n for n in notes if "\n" not in n]
            blocks = [n for n in notes if "\n" in n]
            if text_notes:
                parts.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in text_notes) + "</ul>")
            for blk in blocks:
                parts.append(f"<pre>{_e(blk)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)
