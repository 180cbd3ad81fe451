"""copy-engines: H2D, D2H and a kernel at the same time vs each alone.

One pinned H2D copy, one pinned D2H copy (same size) and one compute kernel
calibrated to last as long as the H2D copy, each on its own non-blocking stream.
Timed alone, in pairs and all three together (events on a timing stream that
every working stream waits for and joins back into). With ``asyncEngineCount``
>= 2 there is a copy engine each way, so all three should take about as long as
the longest one alone; with one engine, H2D and D2H take turns.

Ratio = (longest alone) / (together): 1.0 is perfect overlap. PCIe carries a
little less each way when both directions are busy, which shows in the pairs.
"""

from __future__ import annotations

from pathlib import Path
import numpy as np

from ..cuda.memory import copy_d2h, copy_h2d, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..cuda.device import device_info
from ..cuda.timing import gbps, time_streams
from ..pipeline.workload import MixKernel, calibrate_rounds
from ..cuda.timing import median
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, at_least, is_num, rule, with_claims
from .figures import BOUND, GREY, PINNED, label_bars, need, pyplot, save

NAME = "copy-engines"
TITLE = "H2D, D2H and compute at once vs alone: what asyncEngineCount buys"
CLAIM = "With two or more copy engines, H2D, D2H and a kernel run at the same time (together ~ the longest alone)"
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "asyncEngineCount says how many copy engines the GPU has. With two or more, an upload, a download and"
    " a kernel can all run at once; with one, uploads and downloads take turns."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): the one claim its CLAIM makes.
VERDICT_FROM = ("copy-engines",)

MiB = 1 << 20


def run(ctx) -> Result:
    dev = ctx.device
    size = (128 if ctx.quick else 512) * MiB
    repeat = 5 if ctx.quick else 10
    n = size // 4
    pool = DevicePool(dev)
    t, s_h, s_d, s_k = (create_stream(dev) for _ in range(4))
    d_a, d_b, d_c, d_e = (pool.empty(n, np.uint32, t) for _ in range(4))
    h_src, h_dst = pinned_empty(n, np.uint32), pinned_empty(n, np.uint32)
    h_src[:] = np.random.default_rng(3).integers(0, 2**32, n, dtype=np.uint32)
    t.sync()
    kernel = MixKernel(dev)
    ops = {
        "H2D": (s_h, lambda: copy_h2d(d_a.ptr, h_src, s_h)),
        "D2H": (s_d, lambda: copy_d2h(h_dst, d_b.ptr, s_d)),
        "compute": (s_k, lambda: kernel(s_k, d_c, d_e)),
    }
    ctx.progress(0.0, "alone")
    alone = {}
    alone["H2D"] = median(time_streams(dev, t, [ops["H2D"]], repeat=repeat))
    calibrate_rounds(kernel, s_k, d_c, d_e, alone["H2D"])
    alone["D2H"] = median(time_streams(dev, t, [ops["D2H"]], repeat=repeat))
    alone["compute"] = median(time_streams(dev, t, [ops["compute"]], repeat=repeat))
    rows = [{"work": k, "ms": v, "sum_alone_ms": v, "max_alone_ms": v, "ratio": 1.0,
             "speedup_vs_serial": 1.0, "GB/s": gbps(size, v) if k != "compute" else None}
            for k, v in alone.items()]
    combos = [("H2D", "D2H"), ("H2D", "compute"), ("D2H", "compute"), ("H2D", "D2H", "compute")]
    results = {}
    for i, combo in enumerate(combos):
        ctx.progress(0.2 + 0.8 * i / len(combos), " + ".join(combo))
        together = median(time_streams(dev, t, [ops[k] for k in combo], repeat=repeat))
        longest = max(alone[k] for k in combo)
        total = sum(alone[k] for k in combo)
        results[" + ".join(combo)] = longest / together
        rows.append({"work": " + ".join(combo), "ms": together, "sum_alone_ms": total, "max_alone_ms": longest,
                     "ratio": longest / together, "speedup_vs_serial": total / together, "GB/s": None})
    all3 = results["H2D + D2H + compute"]
    engines = dev.facts.copy_engines
    for a in (d_a, d_b, d_c, d_e):
        pool.free_array(a, t)
    t.sync()
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict=UNJUDGED, device=device_info(dev),
        params={"bytes": size, "repeat": repeat, "compute_rounds": kernel.rounds},
        metrics={"async_engine_count": engines, "alone_ms": alone, "overlap_ratio": results},
        bound=Bound("longest of H2D, D2H, compute alone (this run)", max(alone.values()), "ms"),
        ratio=all3, table=rows,
        notes=[
            f"asyncEngineCount = {engines}. All three together take {1 / all3:.2f}x the longest alone "
            f"and {rows[-1]['speedup_vs_serial']:.2f}x less than one after another.",
            "H2D + D2H at once share the PCIe link's two directions; the small loss there is the "
            "link, not the engines.",
        ],
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
@rule(NAME, "copy-engines",
      "with two or more copy engines, H2D, D2H and a kernel run at the same time (together ≈ the longest alone)")
def _copy_engines(d: Data) -> Judged:
    ov = d.m("overlap_ratio")
    alone = d.m("alone_ms")
    engines = int(d.m_or(d.dev("copy_engines", 2), "async_engine_count"))
    all3 = float(ov["H2D + D2H + compute"])
    row = d.row(work="H2D + D2H + compute")
    verdict = at_least(all3, 0.9, 0.7) if engines >= 2 else ("supported" if ov["H2D + D2H"] < 0.7 else "not supported")
    return Judged(measured=(f"all three together {d.num(row, 'ms'):.2f} ms = {1 / all3:.2f}× the longest alone, "
                            f"{d.num(row, 'speedup_vs_serial'):.2f}× faster than one after another; pairs: "
                            + ", ".join(f"{k} {v:.2f}" for k, v in ov.items() if k != "H2D + D2H + compute")),
                  bound=f"longest alone = {max(alone.values()):.2f} ms (asyncEngineCount {engines})", ratio=all3,
                  verdict=verdict, target="supported: longest alone / together ≥ 0.9, partly ≥ 0.7")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("ms"))]
    need(rows, "table.ms")
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 1.5))
    ys = range(len(rows))
    ax.barh([y + 0.2 for y in ys], [x["sum_alone_ms"] for x in rows], height=0.4, color=GREY,
            label="one after another (sum alone)")
    bars = ax.barh([y - 0.2 for y in ys], [x["ms"] for x in rows], height=0.4, color=PINNED,
                   label="enqueued together (measured)")
    label_bars(ax, bars, "{:.2f} ms")
    ax.scatter([x["max_alone_ms"] for x in rows], [y - 0.2 for y in ys], marker="|", s=300, color=BOUND,
               label="bound: longest alone", zorder=3)
    ax.set_yticks(list(ys), [x["work"] for x in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    engines = (r.get("metrics") or {}).get("async_engine_count")
    ax.set_title(f"H2D, D2H and compute at once (asyncEngineCount = {engines})")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return {"time together vs alone": save(fig, out / f"{NAME}.png")}
