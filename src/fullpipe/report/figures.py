"""The report's figures, drawn from each experiment's JSON (``table``, ``metrics``,
``params``), so the page can be rebuilt from a results.json on a machine without a GPU.

Each experiment has a purpose-made figure (:data:`FIGURES`) that shows the claim:
throughput against streams with the bound, bandwidth pinned vs pageable vs the
ring, allocator cost, the release-threshold trade-off, TFLOP/s against cuBLAS.
Timelines an experiment captured itself (CUPTI) are kept beside them. Anything
without a purpose-made figure, or whose numbers do not fit it (an older
results.json), gets a generic bar chart of its table (:data:`SPECS`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from pathlib import Path
from typing import Any, Callable

DPI = 100
WIDE = (11.0, 4.3)  # inches: 1100 px at DPI, the page's content width

# one colour per idea, used the same way in every figure
PINNED, PAGEABLE, RING, PLAIN = "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"
BOUND, GREY = "#333333", "#9aa0ad"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.spines.top": False,
                         "axes.spines.right": False, "legend.fontsize": 9, "legend.frameon": False})
    return plt


def _num(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _plain_log(ax, axis: str = "x") -> None:
    """A log axis labelled 0.1, 1, 10 rather than 10^-1, 10^0, 10^1."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def _rows(r: dict, **match: Any) -> list[dict]:
    return [x for x in r.get("table") or [] if all(x.get(k) == v for k, v in match.items())]


def _need(cond: Any, what: str) -> None:
    if not cond:
        raise KeyError(what)


def _label_bars(ax, bars, fmt: str = "{:.3g}", horizontal: bool = True, inside: bool = False) -> None:
    for b in bars:
        v = b.get_width() if horizontal else b.get_height()
        if not _num(v) or v == 0:
            continue
        if horizontal:
            ax.annotate(fmt.format(v), (v, b.get_y() + b.get_height() / 2), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8)
        else:
            ax.annotate(fmt.format(v), (b.get_x() + b.get_width() / 2, v), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)


# =========================================================================== level 1
def fig_overlap(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    workloads = [w for w in dict.fromkeys(x["workload"] for x in r.get("table") or [])
                 if _rows(r, workload=w, mode="serial")]
    _need(workloads, "table rows workload/mode='serial'")
    engines = (r.get("device") or {}).get("copy_engines") or 2
    limit = 3 if engines >= 2 else 2
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    all_n = set()
    bounds: list[tuple[float, list[str]]] = []
    for i, w in enumerate(workloads):
        c = f"C{i}"
        serial = _rows(r, workload=w, mode="serial")[0]
        pipe = sorted(_rows(r, workload=w, mode="pipeline"), key=lambda x: x["streams"])
        ns = [x["streams"] for x in pipe]
        all_n |= set(ns)
        bound_gbps = serial["GB/s"] * serial["wall_ms"] / serial["bound_ms"]
        a1.plot(ns, [x["GB/s"] for x in pipe], "o-", color=c, label=f"{w}: pipeline")
        cs = sorted(_rows(r, workload=w, mode="pipeline, copy streams"), key=lambda x: x["streams"])
        if cs:  # N compute streams + one H2D and one D2H stream
            a1.plot([x["streams"] for x in cs], [x["GB/s"] for x in cs], "^:", color=c,
                    label=f"{w}: + H2D and D2H copy streams")
            all_n |= {x["streams"] for x in cs}
        a1.axhline(bound_gbps, color=c, ls="--", lw=1.2)
        same = next((b for b in bounds if abs(b[0] - bound_gbps) <= 0.01 * b[0]), None)
        if same:
            same[1].append(w)
        else:
            bounds.append((bound_gbps, [w]))
        a1.plot([1], [serial["GB/s"]], marker="s", ms=8, mfc="none", mec=c, ls="none")
        a2.plot(ns, [x["speedup"] for x in pipe], "o-", color=c, label=w)
        if i == 0:
            perfect = serial["wall_ms"] / serial["bound_ms"]
            xs = sorted(all_n | {1})
            a2.plot(xs, [min(n, limit, perfect) for n in xs], ls="--", color=BOUND, lw=1.2,
                    label=f"{w}: linear to {limit} engines, capped at perfect overlap ({perfect:.2f}×)")
    from matplotlib.lines import Line2D

    handles, labels = a1.get_legend_handles_labels()
    handles += [Line2D([], [], color=BOUND, ls="--", lw=1.2),
                Line2D([], [], marker="s", mfc="none", mec=BOUND, ls="none")]
    labels += ["bound: slowest stage alone (same colour)", "serial (host waits per batch)"]
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_n), [str(n) for n in sorted(all_n)])
        ax.set_xlabel("streams")
        ax.grid(alpha=0.3)
    for value, ws in bounds:
        a1.annotate(f"bound {', '.join(ws)}: {value:.1f} GB/s", (1.0, value), xycoords=("axes fraction", "data"),
                    xytext=(-2, 2), textcoords="offset points", ha="right", va="bottom", fontsize=8)
    a1.set_ylabel("throughput (GB/s of input)")
    a1.set_ylim(0, max(b[0] for b in bounds) * 1.12)
    a1.set_title("pipeline throughput vs streams, against the bound")
    a1.legend(handles, labels, loc="center right", bbox_to_anchor=(1.0, 0.52), fontsize=8)
    a2.set_ylabel("speedup over serial (×)")
    a2.set_ylim(bottom=0)
    a2.set_title("scaling with streams")
    a2.legend(loc="lower right")
    out = [("throughput vs streams (dashed: bound measured in this run)", fig)]
    sweep = sorted((x for x in _rows(r, workload="balanced, chunk sweep")
                    if _num(x.get("chunk_MiB")) and _num(x.get("ratio"))), key=lambda x: x["chunk_MiB"])
    if sweep:
        out.append(("balanced workload on 3 streams: throughput against the bound by chunk size",
                    _fig_overlap_sweep(r, sweep)))
    return out


def _fig_overlap_sweep(r: dict, sweep: list[dict]):
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    mib = [x["chunk_MiB"] for x in sweep]
    a1.plot(mib, [x["GB/s"] for x in sweep], "o-", color="C0", label="pipeline, 3 streams")
    a1.plot(mib, [x["GB/s"] / x["ratio"] for x in sweep], ls="--", color=BOUND, lw=1.2,
            label="bound: slowest stage alone, same chunks")
    a2.plot(mib, [x["ratio"] for x in sweep], "o-", color="C0", label="throughput / bound")
    a2.axhline(1.0, color=BOUND, ls="--", lw=1.2, label="bound")
    a2.axhline(0.95, color=GREY, ls=":", lw=1, label="0.95 (fullpipe's target)")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(mib, [f"{m:g}" for m in mib])
        ax.set_xlabel("chunk (batch) size, MiB")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    a1.set_ylabel("GB/s of input")
    a1.set_ylim(bottom=0)
    a1.set_title("throughput vs chunk size")
    a2.set_ylabel("throughput / bound")
    a2.set_ylim(min(0.8, min(x["ratio"] for x in sweep) - 0.05), 1.05)
    a2.set_title("fraction of the bound by chunk size")
    return fig


def fig_pinned(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    raw = {(x["memory"], x["what"]): x["GB/s"] for x in _rows(r, test="raw copy")}
    ex = {x["what"]: x["GB/s"] for x in _rows(r, test="executor")}
    chunks = [x for x in _rows(r, test="executor H2D stage") if _num(x.get("GB/s"))]
    _need(raw, "raw copy rows")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE, gridspec_kw={"width_ratios": [1.5, 1]})
    groups = [("h2d", "H2D"), ("d2h", "D2H"), ("both_each_way", "both ways at once\n(each way)")]
    series = [
        ("pinned (raw copy)", PINNED, lambda g: raw.get(("pinned", g))),
        ("pageable (raw copy)", PAGEABLE, lambda g: raw.get(("pageable", g))),
        ("pageable via fullpipe's pinned ring", RING,
         lambda g: {"h2d": ex.get("ring, H2D only"), "both_each_way": ex.get("ring, both ways")}.get(g)),
        ("pageable, plain cuMemcpyAsync in the pipeline", PLAIN,
         lambda g: ex.get("plain pageable cuMemcpyAsync, both ways") if g == "both_each_way" else None),
        ("pinned, through the pipeline", "#9ecae1",
         lambda g: ex.get("pinned direct, both ways") if g == "both_each_way" else None),
    ]
    width = 0.16
    for j, (label, color, get) in enumerate(series):
        xs, vs = [], []
        for i, (g, _) in enumerate(groups):
            v = get(g)
            if _num(v):
                xs.append(i + (j - (len(series) - 1) / 2) * width)
                vs.append(v)
        if vs:
            _label_bars(a1, a1.bar(xs, vs, width=width, color=color, label=label), "{:.1f}", horizontal=False)
    host = (r.get("metrics") or {}).get("host_memmove_bound") or {}
    ring_j = 2  # the ring's series index
    for i, key in ((0, "in_gbps"), (2, "both_gbps_each_way")):
        v = host.get(key)
        if _num(v):
            x = i + (ring_j - (len(series) - 1) / 2) * width
            a1.hlines(v, x - width / 2, x + width / 2, colors=BOUND, linestyles="--", lw=1.5,
                      label="host memmove bound of the ring (staging threads)" if i == 0 else None)
    a1.set_xticks(range(len(groups)), [g[1] for g in groups])
    a1.set_ylabel("GB/s")
    a1.set_title("host ↔ device bandwidth: pinned vs pageable")
    a1.legend(loc="upper right", fontsize=8)
    a1.set_ylim(0, max(v for v in raw.values() if _num(v)) * 1.6)
    a1.grid(axis="y", alpha=0.3)
    if chunks:
        mib = [float(str(x["what"]).split()[1]) for x in chunks]
        a2.plot(mib, [x["GB/s"] for x in chunks], "o-", color=PINNED, label="pipeline H2D stage (pinned input)")
        peak = raw.get(("pinned", "h2d"))
        if _num(peak):
            a2.axhline(peak, color=BOUND, ls="--", lw=1.2, label=f"bound: pinned H2D peak {peak:.1f} GB/s")
            a2.axhline(0.95 * peak, color=GREY, ls=":", lw=1, label="0.95 × peak (target)")
        a2.set_xscale("log", base=2)
        a2.set_xticks(mib, [f"{m:g}" for m in mib])
        a2.set_xlabel("chunk size (MiB)")
        a2.set_ylabel("GB/s")
        a2.set_ylim(0, (peak if _num(peak) else max(x["GB/s"] for x in chunks)) * 1.15)
        a2.set_title("bandwidth vs chunk size")
        a2.legend(loc="lower right", fontsize=8)
        a2.grid(alpha=0.3)
    else:
        a2.set_visible(False)
    return [("bandwidth: pinned, pageable and the pinned ring; and vs chunk size", fig)]


def fig_host_ring(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    modes = list(dict.fromkeys(x["recycle"] for x in r.get("table") or []))
    _need(modes, "table.recycle")
    bound = (r.get("metrics") or {}).get("pinned_bound_gbps")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    names = {"hostfn": "native host function", "pyhostfn": "Python host function", "event": "event wait (staging thread)"}
    slots_all: set[int] = set()
    for i, m in enumerate(modes):
        rows = sorted(_rows(r, recycle=m), key=lambda x: x["slots"])
        ks = [x["slots"] for x in rows]
        slots_all |= set(ks)
        a1.plot(ks, [x["GB/s"] for x in rows], "o-", color=f"C{i}", label=names.get(m, m))
        a2.plot(ks, [x["ratio_to_8_slots"] for x in rows], "o-", color=f"C{i}", label=names.get(m, m))
    if _num(bound):
        a1.axhline(bound, color=BOUND, ls="--", lw=1.2, label=f"bound: pinned input, no ring ({bound:.1f} GB/s)")
    a2.axhline(0.95, color=BOUND, ls="--", lw=1.2, label="0.95 × 8 slots (target)")
    for ax in (a1, a2):
        ax.axvspan(2.8, 4.2, color="#fff1c9", alpha=0.6, lw=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(slots_all), [str(k) for k in sorted(slots_all)])
        ax.set_xlabel("pinned slots in the ring (each way)")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    a1.legend(loc="center right", bbox_to_anchor=(1.0, 0.6), fontsize=8)
    a2.legend(loc="lower right", fontsize=8)
    a1.set_ylabel("throughput (GB/s, pageable in and out)")
    a1.set_title(f"{r.get('params', {}).get('batches', '')} batches through the ring")
    a2.set_ylabel("throughput / throughput with 8 slots")
    a2.set_title("how many slots are enough (3-4 shaded)")
    return [("throughput vs pinned slots, by how slots are recycled", fig)]


def fig_default_stream(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("concurrency"))]
    _need(rows, "table.concurrency")
    alone = (r.get("metrics") or {}).get("alone_ms") or {}
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.4))
    colors = [PAGEABLE if x.get("serialized") else RING for x in rows]
    bars = ax.barh([x["case"] for x in rows], [x["concurrency"] for x in rows], color=colors)
    _label_bars(ax, bars, "{:.2f}")
    ax.invert_yaxis()
    ax.axvline(1.0, color=GREY, ls=":", lw=1)
    if alone:
        ideal = sum(alone.values()) / max(alone.values())
        ax.axvline(ideal, color=BOUND, ls="--", lw=1.2)
        ax.annotate(f"bound: all at once ({ideal:.2f})", (ideal, 0.0), xycoords=("data", "axes fraction"),
                    xytext=(4, 4), textcoords="offset points", ha="left", va="bottom", fontsize=8)
        ax.set_xlim(0, ideal * 1.28)
    from matplotlib.patches import Patch

    ax.legend([Patch(color=PAGEABLE), Patch(color=RING)], ["K1 and K2 serialized (globaltimer)", "ran concurrently"],
              loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2)
    ax.set_xlabel("concurrency = (K1 + copy + K2, each alone) / all three together   (1 = serial)")
    ax.set_title("which streams serialize", loc="left")
    ax.grid(axis="x", alpha=0.3)
    return [("concurrency by kind of stream", fig)]


def fig_sync(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = r.get("table") or []
    sizes = sorted({x["kernel_us"] for x in rows})
    modes = list(dict.fromkeys(x["mode"] for x in rows))
    _need(sizes and modes, "table.kernel_us/mode")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    width = 0.8 / len(modes)
    colors = {"event": RING, "stream sync": PLAIN, "device sync": PAGEABLE}
    for j, m in enumerate(modes):
        xs = [i + (j - (len(modes) - 1) / 2) * width for i in range(len(sizes))]
        by = {x["kernel_us"]: x for x in rows if x["mode"] == m}
        idle = [100 * (by[k].get("gpu_idle_fraction") or 0) for k in sizes]
        ratio = [by[k].get("ratio") or 0 for k in sizes]
        _label_bars(a1, a1.bar(xs, idle, width=width, color=colors.get(m, f"C{j}"), label=m), "{:.1f}", False)
        _label_bars(a2, a2.bar(xs, ratio, width=width, color=colors.get(m, f"C{j}"), label=m), "{:.2f}", False)
    for ax in (a1, a2):
        ax.set_xticks(range(len(sizes)), [f"{k} µs kernels" for k in sizes])
        ax.grid(axis="y", alpha=0.3)
    a1.set_ylabel("GPU idle (% of the span)")
    a1.set_title("idle time between dependent kernels")
    a1.legend()
    a2.axhline(1.0, color=BOUND, ls="--", lw=1.2)
    a2.annotate("bound: items × kernel time (producer i+1 ‖ consumer i)", (0.5, 1.0),
                xycoords=("axes fraction", "data"), xytext=(0, 12), textcoords="offset points", ha="center",
                fontsize=8)
    a2.set_ylabel("throughput / bound")
    a2.set_ylim(0, 1.2)
    a2.set_title("producer → consumer throughput against the bound")
    return [("event join vs host synchronization", fig)]


def fig_concurrency(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("grids")) and _num(x.get("ran_at_once"))]
    _need(rows, "table.grids/ran_at_once")
    limit = (r.get("params") or {}).get("limit_from_spec")
    fig, ax = plt.subplots(figsize=(11, 3.8))
    labels = [f"{x['test']}\n{x['grids']} kernels" for x in rows]
    xs = range(len(rows))
    b1 = ax.bar([i - 0.2 for i in xs], [x["grids"] for x in rows], width=0.4, color=GREY, label="kernels launched")
    b2 = ax.bar([i + 0.2 for i in xs], [x["ran_at_once"] for x in rows], width=0.4, color=PINNED,
                label="ran at once (on one SM for SM sharing; on the GPU for resident grids)")
    _label_bars(ax, b1, "{:.0f}", False)
    _label_bars(ax, b2, "{:.0f}", False)
    if _num(limit):
        ax.axhline(limit, color=BOUND, ls="--", lw=1.2, label=f"bound: max resident grids = {limit}")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("kernels (grids)")
    ax.set_title("kernels from many streams: SM sharing and the resident-grid limit")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return [("kernels launched vs kernels running at once", fig)]


def fig_copy_engines(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("ms"))]
    _need(rows, "table.ms")
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 1.5))
    ys = range(len(rows))
    ax.barh([y + 0.2 for y in ys], [x["sum_alone_ms"] for x in rows], height=0.4, color=GREY,
            label="one after another (sum alone)")
    bars = ax.barh([y - 0.2 for y in ys], [x["ms"] for x in rows], height=0.4, color=PINNED,
                   label="enqueued together (measured)")
    _label_bars(ax, bars, "{:.2f} ms")
    ax.scatter([x["max_alone_ms"] for x in rows], [y - 0.2 for y in ys], marker="|", s=300, color=BOUND,
               label="bound: longest alone", zorder=3)
    ax.set_yticks(list(ys), [x["work"] for x in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    engines = (r.get("metrics") or {}).get("async_engine_count")
    ax.set_title(f"H2D, D2H and compute at once (asyncEngineCount = {engines})")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return [("time together vs alone", fig)]


# =========================================================================== memory
_ALLOC_COLORS = {"preallocated": GREY, "cuMemAlloc": PAGEABLE, "fullpipe": RING, "pool": RING}


def _alloc_color(name: str) -> str:
    for k, c in _ALLOC_COLORS.items():
        if k in name:
            return c
    return PINNED


def fig_alloc_stall(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("alloc+free host ms"))]
    _need(rows, "table['alloc+free host ms']")
    spin = (r.get("params") or {}).get("spin_ms")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    names = [x["allocator"] for x in rows]
    colors = [_alloc_color(n) for n in names]
    b = a1.barh(names, [x["alloc+free host ms"] for x in rows], color=colors)
    _label_bars(a1, b, "{:.3g} ms")
    a1.set_xlabel("host blocked in alloc + free (ms, log)")
    a1.set_title("what the host waits for")
    col = "B next kernel start (ms after A start)"
    b2 = a2.barh(names, [x.get(col) or 0 for x in rows], color=colors)
    for bar, x in zip(b2, rows):
        a2.annotate(f"{bar.get_width():.3g} ms · waited for A in {x.get('B waited for A', '?')}",
                    (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8)
    a2.set_xlabel("stream B's next kernel: start after A's start (ms, log)")
    a2.set_title("does another stream have to wait?")
    for ax in (a1, a2):
        ax.set_xscale("log")
        _plain_log(ax)
        if _num(spin):
            ax.axvline(spin, color=BOUND, ls="--", lw=1.2, label=f"stream A's kernel ({spin:g} ms)")
            ax.set_xlim(right=spin * 30)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    a2.set_yticks(range(len(names)), [""] * len(names))
    return [("allocation while another stream's kernel runs", fig)]


def fig_alloc_overhead(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("alloc+free us / batch"))]
    _need(rows, "table['alloc+free us / batch']")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    names = [x["allocator"] for x in rows]
    colors = [_alloc_color(n) for n in names]
    _label_bars(a1, a1.barh(names, [x["alloc+free us / batch"] for x in rows], color=colors), "{:.3g} µs")
    a1.set_xscale("log")
    _plain_log(a1)
    a1.set_xlabel("host time in alloc + free per batch (µs, log)")
    a1.set_title("allocation cost per batch")
    tput = [x.get("throughput GB/s") or 0 for x in rows]
    _label_bars(a2, a2.barh(names, tput, color=colors), "{:.1f}")
    pre = next((x for x in rows if "preallocated" in x["allocator"]), None)
    if pre and _num(pre.get("throughput GB/s")):
        a2.axvline(pre["throughput GB/s"], color=BOUND, ls="--", lw=1.2)
    a2.set_xlim(0, max(tput) * 1.15)
    a2.set_xlabel("pipeline throughput (GB/s; dashed: the bound, preallocated buffers)")
    a2.set_title("what it does to the pipeline")
    a2.set_yticks(range(len(names)), [""] * len(names))
    for ax in (a1, a2):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    return [("allocator cost per batch and pipeline throughput", fig)]


def fig_release_threshold(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    series = (r.get("metrics") or {}).get("series") or {}
    rows = r.get("table") or []
    _need(series or rows, "metrics.series")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    for i, (label, s) in enumerate(series.items()):
        ms = s.get("ms") or []
        a1.plot(range(1, len(ms) + 1), ms, "o-", color=f"C{i}", label=f"threshold {label}")
    a1.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    a1.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a1.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "235" else ""))
    a1.set_xlabel("batch (a stream sync after each)")
    a1.set_ylabel("time per batch (ms, log)")
    a1.set_title("time per batch")
    a1.legend()
    a1.grid(alpha=0.3)
    pts = [(lab, s["held_gib"], s["steady_ms"]) for lab, s in series.items() if "held_gib" in s and "steady_ms" in s]
    if not pts:
        pts = [(x["release threshold"], x["held between batches GiB"], x["steady ms / batch"]) for x in rows]
    for i, (lab, held, ms) in enumerate(pts):
        a2.scatter([held], [ms], s=80, color=f"C{i}", zorder=3)
        a2.annotate(f"threshold {lab}", (held, ms), xytext=(8, 4), textcoords="offset points", fontsize=9)
    if len(pts) > 1:
        srt = sorted(pts, key=lambda p: p[1])
        a2.plot([p[1] for p in srt], [p[2] for p in srt], color=GREY, ls=":", lw=1)
    a2.set_xlabel("memory the pool holds between batches (GiB)")
    a2.set_ylabel("steady time per batch (ms)")
    a2.set_ylim(bottom=0)
    a2.set_xlim(left=min(0, *(p[1] for p in pts)) - 0.05, right=max(p[1] for p in pts) * 1.35 + 0.05)
    a2.set_title("the trade-off: memory held vs time")
    a2.grid(alpha=0.3)
    return [("release threshold: time per batch vs memory held", fig)]


def fig_fragmentation(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("peak live MiB"))]
    _need(rows, "table['peak live MiB']")
    budget = (r.get("params") or {}).get("budget")
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(rows) + 1.6))
    ys = range(len(rows))
    ax.barh([y - 0.2 for y in ys], [x["peak live MiB"] for x in rows], height=0.4, color=GREY, label="peak live")
    _label_bars(ax, ax.barh([y + 0.2 for y in ys], [x.get("peak reserved MiB") or 0 for x in rows], height=0.4,
                            color=PINNED, label="peak reserved"), "{:.0f} MiB")
    for y, x in enumerate(rows):
        outcome = x.get("large request")
        ax.annotate(f"{x.get('large request MiB', 0):.0f} MiB request: {outcome}", (0, y - 0.2), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8,
                    color="#7d1d1d" if outcome != "ok" else "#145c2a", fontweight="bold")
    if _num(budget):
        ax.axvline(budget / 2**20, color=BOUND, ls="--", lw=1.2, label=f"budget ({budget / 2**20:.0f} MiB)")
    ax.set_yticks(list(ys), [x["allocator"] for x in rows])
    ax.invert_yaxis()
    ax.set_xlabel("MiB")
    ax.set_title("same workload under a capped budget: reserved vs live, and the large request")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return [("fragmentation: reserved vs live memory per allocator", fig)]


def fig_llm_scratch(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("sequences/s"))]
    _need(rows, "table['sequences/s']")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    names = [x["scratch"] for x in rows]
    colors = [_alloc_color(n) for n in names]
    _label_bars(a1, a1.barh(names, [x["sequences/s"] for x in rows], color=colors), "{:.0f}")
    _label_bars(a2, a2.barh(names, [x.get("peak scratch MiB") or 0 for x in rows], color=colors), "{:.0f} MiB")
    pre = next((x for x in rows if "preallocated" in x["scratch"]), None)
    if pre:
        a1.axvline(pre["sequences/s"], color=BOUND, ls="--", lw=1.2, label="bound: preallocated for max")
        a1.legend(loc="lower right", fontsize=8)
    a1.set_xlabel("sequences / s")
    a1.set_title("throughput")
    a2.set_xlabel("peak scratch memory (MiB)")
    a2.set_title("memory held")
    a2.set_yticks(range(len(names)), [""] * len(names))
    for ax in (a1, a2):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    return [("variable-length scratch: throughput and memory", fig)]


# =========================================================================== level 2
def fig_gemm(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("TFLOP/s")) and isinstance(x.get("size"), int)]
    _need(rows, "table TFLOP/s")
    sizes = sorted({x["size"] for x in rows})

    def label(x):
        return x["kernel"] + (f" s{x['stages']}" if x.get("stages") else "")

    def dtype(lab: str) -> str:
        parts = lab.split()
        return parts[1] if lab.startswith("wmma") and len(parts) > 1 else ""

    fp32 = list(dict.fromkeys(label(x) for x in rows
                              if x["kernel"].split(" @")[0] in ("tiled", "double_buffer", "warp_specialized",
                                                                "no-load ceiling")))
    tc = list(dict.fromkeys(label(x) for x in rows if x["kernel"].startswith("wmma")))
    panels = [(fp32, "fp32 SIMT kernels (cp.async pipelines) vs cuBLAS fp32", {"": "cuBLAS float32"})]
    if tc:
        panels.append((tc, "tensor cores (wmma) vs cuBLAS fp16 / bf16",
                       {"float16": "cuBLAS float16", "bfloat16": "cuBLAS bfloat16"}))
    fig, axes = plt.subplots(1, len(panels), figsize=(11, 4.6), squeeze=False,
                             gridspec_kw={"width_ratios": [len(p[0]) + 1 for p in panels]})
    width = 0.8 / len(sizes)
    shades = ["#9ecae1", "#6baed6", "#2171b5", "#08306b"]
    for ax, (labels, title, cublas) in zip(axes[0], panels):
        top = 0.0
        for j, n in enumerate(sizes):
            shade = shades[min(3, round(j * 3 / max(1, len(sizes) - 1)))] if len(sizes) > 1 else shades[1]
            by = {label(x): x["TFLOP/s"] for x in rows if x["size"] == n}
            xs = [i + (j - (len(sizes) - 1) / 2) * width for i in range(len(labels))]
            bars = ax.bar(xs, [by.get(lab, 0) for lab in labels], width=width, color=shade, label=f"{n}³")
            if n == sizes[-1]:
                _label_bars(ax, bars, "{:.0f}", horizontal=False)
            top = max(top, *(by.get(lab, 0) for lab in labels))
            for dt, name in cublas.items():
                cub = next((x["TFLOP/s"] for x in rows if x["size"] == n and x["kernel"] == name), None)
                idx = [i for i, lab in enumerate(labels) if dtype(lab) == dt]
                if not _num(cub) or not idx:
                    continue
                top = max(top, cub)
                ax.hlines(cub, min(idx) - 0.45, max(idx) + 0.45, colors=shade, linestyles="--", lw=1.6)
                below = j < len(sizes) - 1
                ax.annotate(f"{name.replace('cuBLAS ', 'cuBLAS ')} {n}³: {cub:.0f}", (max(idx) + 0.45, cub),
                            xytext=(0, -3 if below else 3), textcoords="offset points", ha="right",
                            va="top" if below else "bottom", fontsize=8)
        ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right")
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(0, top * 1.15)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labs = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, [f"{lab} (dashed line: cuBLAS at this size)" for lab in labs], loc="upper right",
               ncol=len(labs), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig._fullpipe_laid_out = True
    return [("TFLOP/s per kernel against cuBLAS (same run, same stream)", fig)]


def fig_cluster(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    rows = [x for x in r.get("table") or [] if _num(x.get("TFLOP/s"))]
    _need(rows, "table TFLOP/s")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    kern = [x for x in rows if not str(x["kernel"]).startswith("cuBLAS")]
    cub = next((x for x in rows if str(x["kernel"]).startswith("cuBLAS")), None)
    _label_bars(a1, a1.bar([x["kernel"] for x in kern], [x["TFLOP/s"] for x in kern], color=PINNED), "{:.1f}", False)
    if cub:
        a1.axhline(cub["TFLOP/s"], color=BOUND, ls="--", lw=1.2)
        a1.annotate(f"bound: {cub['kernel']} {cub['TFLOP/s']:.1f} TFLOP/s", (1.0, cub["TFLOP/s"]),
                    xycoords=("axes fraction", "data"), xytext=(-2, -3), textcoords="offset points",
                    ha="right", va="top", fontsize=8)
    a1.set_ylabel("TFLOP/s")
    a1.set_title("time: GEMM with and without sharing A in the cluster")
    loads = [x for x in kern if _num(x.get("A bytes from global"))]
    if loads:
        _label_bars(a2, a2.bar([x["kernel"] for x in loads], [x["A bytes from global"] / 2**20 for x in loads],
                               color=GREY), "{:.0f} MiB", False)
        a2.set_ylabel("A read from global memory (MiB, by construction)")
        a2.set_title("duplicate loads of A")
    else:
        a2.set_visible(False)
    for ax in (a1, a2):
        ax.grid(axis="y", alpha=0.3)
    return [("cluster GEMM: loads saved vs time", fig)]


def fig_persistent(r: dict) -> list[tuple[str, Any]]:
    plt = _plt()
    table = r.get("table") or []
    tiles = [x for x in table if _num(x.get("TFLOP/s")) and x.get("workload", "gemm tiles") == "gemm tiles"]
    chain = [x for x in table if x.get("workload") == "chain" and _num(x.get("us/step"))]
    _need(tiles or chain, "table TFLOP/s or chain us/step")
    panels = [p for p in (("chain", chain), ("tiles", tiles)) if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=WIDE if len(panels) > 1 else (11, 3.8), squeeze=False)
    for ax, (kind, rows) in zip(axes[0], panels):
        shapes = list(dict.fromkeys(x["shape"] for x in rows))
        kernels = [k for k in dict.fromkeys(x["kernel"] for x in rows) if not str(k).startswith("cuBLAS")]
        col = "us/step" if kind == "chain" else "TFLOP/s"
        width = 0.8 / max(1, len(kernels))
        for j, k in enumerate(kernels):
            by = {x["shape"]: x[col] for x in rows if x["kernel"] == k}
            xs = [i + (j - (len(kernels) - 1) / 2) * width for i in range(len(shapes))]
            bars = ax.bar(xs, [by.get(sh, 0) for sh in shapes], width=width, color=f"C{j}", label=k)
            _label_bars(ax, bars, "{:.1f}", False)
        for i, sh in enumerate(shapes):
            cub = next((x[col] for x in rows if x["shape"] == sh and str(x["kernel"]).startswith("cuBLAS")), None)
            if _num(cub):
                ax.hlines(cub, i - 0.45, i + 0.45, colors=BOUND, linestyles="--", lw=1.5,
                          label="cuBLAS fp32" if i == 0 else None)
        ax.set_xticks(range(len(shapes)), shapes)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        if kind == "chain":
            ax.set_ylabel("µs per step (lower is better)")
            ax.set_title("chain of small dependent steps")
        else:
            ax.set_ylabel("TFLOP/s")
            ax.set_xlabel("M×N×K (64×64 tiles)")
            ax.set_title("independent small tiles: persistent queue vs one block per tile")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
    return [("persistent kernels vs one launch / one block per tile", fig)]


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    draw: Callable[[dict], list[tuple[str, Any]]]
    # keys of figures the experiment drew itself that this one replaces (same data,
    # drawn for the page); timelines and anything else are kept
    replaces: tuple[str, ...] = ()


FIGURES: dict[str, FigureSpec] = {
    "overlap": FigureSpec(fig_overlap, ("throughput",)),
    "pinned": FigureSpec(fig_pinned),
    "default-stream": FigureSpec(fig_default_stream),
    "sync": FigureSpec(fig_sync),
    "host-ring": FigureSpec(fig_host_ring),
    "concurrency": FigureSpec(fig_concurrency),
    "copy-engines": FigureSpec(fig_copy_engines),
    "alloc-stall": FigureSpec(fig_alloc_stall),
    "alloc-overhead": FigureSpec(fig_alloc_overhead),
    "release-threshold": FigureSpec(fig_release_threshold, ("tradeoff",)),
    "fragmentation": FigureSpec(fig_fragmentation),
    "llm-scratch": FigureSpec(fig_llm_scratch),
    "gemm": FigureSpec(fig_gemm, ("gemm",)),
    "cluster": FigureSpec(fig_cluster),
    "persistent": FigureSpec(fig_persistent),
}


# =========================================================================== generic
@dataclasses.dataclass(frozen=True)
class BarSpec:
    labels: tuple[str, ...]
    values: tuple[str, ...]
    title: str
    log: bool = False


# The fallback for results whose numbers do not fit the purpose-made figure.
SPECS: dict[str, BarSpec] = {
    "overlap": BarSpec(("workload", "mode", "streams"), ("GB/s",), "GB/s"),
    "pinned": BarSpec(("test", "memory", "what"), ("GB/s",), "GB/s: pinned vs pageable, raw and through the executor"),
    "default-stream": BarSpec(("case",), ("concurrency",), "concurrency (1 = serialized, higher = ran together)"),
    "sync": BarSpec(("kernel_us", "mode"), ("ratio",), "throughput / bound, by kernel length (us) and how streams are joined"),
    "host-ring": BarSpec(("recycle", "slots"), ("GB/s",), "GB/s by recycle mode and pinned slots"),
    "concurrency": BarSpec(("test", "grids"), ("ran_at_once",), "grids resident at once"),
    "copy-engines": BarSpec(("work",), ("ms",), "ms: each alone, and together"),
    "alloc-stall": BarSpec(("allocator",), ("alloc+free host ms",), "host blocked in alloc+free (ms, log)", log=True),
    "alloc-overhead": BarSpec(("allocator",), ("alloc+free us / batch",), "allocation cost per batch (us, log)", log=True),
    "release-threshold": BarSpec(("release threshold",), ("steady ms / batch",), "steady ms per batch"),
    "fragmentation": BarSpec(("allocator",), ("peak live MiB", "peak reserved MiB"), "peak live vs reserved (MiB)"),
    "llm-scratch": BarSpec(("scratch",), ("throughput / bound", "memory / bound"), "throughput and memory vs preallocating for the maximum"),
    "gemm": BarSpec(("size", "kernel", "stages"), ("TFLOP/s",), "TFLOP/s"),
    "cluster": BarSpec(("kernel",), ("TFLOP/s",), "TFLOP/s"),
    "persistent": BarSpec(("shape", "kernel"), ("TFLOP/s",), "TFLOP/s on many small tiles"),
}


def _generic_spec(result: dict[str, Any]) -> BarSpec | None:
    rows = result.get("table") or []
    if not rows:
        return None
    cols = list(rows[0].keys())
    nums = [c for c in cols if any(_num(r.get(c)) for r in rows)]
    labels = [c for c in cols if c not in nums][:3]
    if not nums:
        return None
    return BarSpec(tuple(labels) or (cols[0],), (nums[0],), nums[0])


def bar_chart(result: dict[str, Any], spec: BarSpec, path: Path) -> Path | None:
    """Draw ``spec`` from ``result['table']`` into ``path``; None when nothing to draw."""
    rows = [r for r in result.get("table") or [] if any(_num(r.get(v)) for v in spec.values)]
    if not rows:
        return None
    plt = _plt()
    labels = [" · ".join(str(r.get(c)) for c in spec.labels if r.get(c) is not None) for r in rows]
    n, k = len(rows), len(spec.values)
    height = 0.8 / k
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.32 * n * max(1, k * 0.7)))
    for j, col in enumerate(spec.values):
        vals = [float(r[col]) if _num(r.get(col)) else 0.0 for r in rows]
        ys = [i + (j - (k - 1) / 2) * height for i in range(n)]
        ax.barh(ys, vals, height=height, label=col, color=f"C{j}")
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.invert_yaxis()
    if spec.log:
        ax.set_xscale("log")
        _plain_log(ax)
    ax.set_xlabel(spec.title)
    if k > 1:
        ax.legend(fontsize=8)
    ax.set_title(result.get("experiment", ""), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    _save(fig, path)
    return path


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    if not getattr(fig, "_fullpipe_laid_out", False):  # a figure that placed a legend itself
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# =========================================================================== entry points
def draw_figures(result: dict[str, Any], out_dir: Path) -> tuple[dict[str, str], list[str]]:
    """The purpose-made figures of one result, written under ``out_dir/figures``:
    ({caption: path relative to out_dir}, problems). Falls back to the generic bar
    chart when the numbers do not fit."""
    name = result.get("experiment", "")
    figs: dict[str, str] = {}
    problems: list[str] = []
    spec = FIGURES.get(name)
    if spec is not None:
        try:
            drawn = spec.draw(result)
            for i, (caption, fig) in enumerate(drawn):
                rel = Path("figures") / (f"{name}.png" if i == 0 else f"{name}-{i}.png")
                _save(fig, out_dir / rel)
                figs[caption] = rel.as_posix()
            return figs, problems
        except Exception as exc:  # old or partial numbers: say so, draw the generic chart
            problems.append(f"purpose-made figure not drawn ({type(exc).__name__}: {exc}); generic chart instead")
            try:
                import matplotlib.pyplot as plt

                plt.close("all")
            except Exception:
                pass
    bar = SPECS.get(name) or _generic_spec(result)
    if bar is not None:
        rel = Path("figures") / f"{name}-table.png"
        try:
            if bar_chart(result, bar, out_dir / rel) is not None:
                figs[bar.title] = rel.as_posix()
        except Exception as exc:
            problems.append(f"no figure: {type(exc).__name__}: {exc}")
    return figs, problems


def add_figures(results: list[dict[str, Any]], out_dir: Path) -> None:
    """Draw every result's figures for the page (into ``out_dir/figures``, recorded
    relative to ``out_dir``). Figures an experiment made itself are kept unless a
    purpose-made one replaces them; failed and skipped results get none."""
    for r in results:
        if r.get("verdict") in ("failed", "skipped") and not r.get("table"):
            continue
        figs, problems = draw_figures(r, out_dir)
        spec = FIGURES.get(r.get("experiment", ""))
        own = dict(r.get("figures") or {})
        if figs and spec is not None and not problems:
            own = {k: v for k, v in own.items() if k not in spec.replaces}
        # purpose-made first, then the experiment's own (timelines)
        r["figures"] = {**figs, **{k: v for k, v in own.items() if k not in figs}}
        if problems:
            r["figure_notes"] = problems


# The name the tests and older callers use.
add_table_figures = add_figures
