"""release-threshold: what the pool's release threshold trades, time against memory.

Batches separated by a stream synchronization (where the pool gives back what it
holds above its threshold). Each batch allocates a set of variable-size buffers,
writes them, frees them. Three pools that differ only in the threshold: 0, a
middle value (half of one batch's bytes) and "max". Per threshold:

- time per batch (host wall clock including the sync: a trip to the OS for the
  memory each time it went back),
- memory the pool holds between batches (reserved after the sync),
- what another consumer in the process can still get (cuMemGetInfo free),

and a figure of the trade-off.
"""

from __future__ import annotations

from pathlib import Path
import time

import numpy as np

from ..cuda import driver as drv
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from . import _alloc_common as common
from ..cuda.timing import median
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, both, rule, times, with_claims
from .figures import GREY, WIDE, need, pyplot, save

NAME = "release-threshold"
TITLE = "Release threshold 0 / middle / max: time per batch vs memory held between batches"
CLAIM = ('with release threshold "max" reserved memory stays constant after the first batch; '
         "with 0 it returns to the OS at each sync")
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "A memory pool keeps freed memory up to its release threshold and gives the rest back at each "
    "synchronization. Threshold 0 gives everything back (the next batch maps it again); \"max\" keeps "
    "everything (fast, but nobody else in the process can use it)."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): the one claim its CLAIM makes.
VERDICT_FROM = ("release-threshold",)


def _batch(dev, pool, stream, sizes, tag) -> float:
    t0 = time.perf_counter()
    bufs = [pool.allocate(n, stream) for n in sizes]
    for i, (buf, n) in enumerate(zip(bufs, sizes)):
        common.touch(dev, stream, int(buf.handle), n, tag + i)
    for buf in bufs:
        pool.free(buf, stream)
    with drv.translated("cuStreamSynchronize"):
        stream.sync()  # the pool releases memory above its threshold here
    return (time.perf_counter() - t0) * 1e3


def run(ctx) -> Result:
    dev = ctx.device
    batches = 8 if ctx.quick else 20
    per_batch = 16
    batch_target = (512 if ctx.quick else 2048) * common.MiB
    rng = np.random.default_rng(11)
    stream = create_stream(dev)
    common.kernels(dev)
    # Different sizes inside a batch, the same list every batch (so "max" can reuse).
    sizes = common.log_uniform_sizes(rng, per_batch, 4 * common.MiB, 128 * common.MiB, align=2 * common.MiB)
    scale = batch_target / sum(sizes)
    sizes = [max(2 * common.MiB, int(n * scale) // (2 * common.MiB) * 2 * common.MiB) for n in sizes]
    batch_bytes = sum(sizes)
    thresholds = [("0", 0), ("middle (half a batch)", batch_bytes // 2), ('"max"', "max")]

    free_at_start = dev.memory_info()[0]
    series, rows = {}, []
    for ti, (label, thr) in enumerate(thresholds):
        pool = DevicePool(dev, release_threshold=thr)
        ms, reserved, free = [], [], []
        for bi in range(batches):
            ctx.progress((ti * batches + bi) / (len(thresholds) * batches), f"threshold {label}")
            ms.append(_batch(dev, pool, stream, sizes, tag=bi))
            reserved.append(pool.stats().reserved_bytes)
            free.append(dev.memory_info()[0])
        st = pool.stats()
        steady = ms[1:] if len(ms) > 1 else ms
        held = median([float(r) for r in reserved[1:]]) / common.GiB
        series[label] = {"ms": ms, "reserved": reserved, "free": free, "steady_ms": median(steady), "held_gib": held,
                         "reserved_high": st.reserved_high_bytes}
        rows.append({
            "release threshold": label,
            "first batch ms": ms[0],
            "steady ms / batch": median(steady),
            "held between batches GiB": held,
            "reserved changed after batch 1": sum(1 for r in reserved[1:] if r != reserved[0]),
            "free for others GiB": median([float(f) for f in free[1:]]) / common.GiB,
            "free at start GiB": free_at_start / common.GiB,
            "reserved high GiB": st.reserved_high_bytes / common.GiB,
        })
        pool.trim(0)
        pool.close()

    max_s, zero_s = series['"max"'], series["0"]
    max_constant = all(r == max_s["reserved"][0] for r in max_s["reserved"]) and max_s["reserved"][0] > 0
    zero_returns = all(r == 0 for r in zero_s["reserved"])
    ratio = zero_s["steady_ms"] / max_s["steady_ms"] if max_s["steady_ms"] > 0 else float("nan")
    notes = [
        f'"max": reserved after each batch {"stayed at" if max_constant else "did not stay at"} '
        f'{max_s["reserved"][0] / common.GiB:.2f} GiB (no driver allocations in steady state).',
        f"0: reserved after each sync {'was 0 every time' if zero_returns else 'was not always 0'} "
        f"(values: {sorted(set(zero_s['reserved']))}).",
        f"Threshold 0 costs {ratio:.2f}x the time per batch of \"max\" "
        f"({zero_s['steady_ms']:.2f} vs {max_s['steady_ms']:.2f} ms) and leaves "
        f"{(max_s['held_gib']):.2f} GiB more for other consumers.",
    ]
    return with_claims(Result(
        experiment=NAME,
        claim=CLAIM,
        verdict=UNJUDGED,
        device=common.device_info(dev),
        params={"batches": batches, "allocations_per_batch": per_batch, "batch_bytes": batch_bytes,
                "sizes": sizes, "thresholds": dict(thresholds),
                "quick": ctx.quick},
        metrics={"series": series, "max_reserved_constant": max_constant, "zero_returns_at_each_sync": zero_returns,
                 "free_at_start": free_at_start},
        bound=Bound('steady time per batch with threshold "max"', max_s["steady_ms"], "ms"),
        ratio=ratio,
        table=rows,
        notes=notes,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
@rule(NAME, "release-threshold",
      'release threshold "max" keeps reserved memory constant after the first batch; 0 returns it to the OS at each sync')
def _release(d: Data) -> Judged:
    s = d.m("series")
    mx, zero = s['"max"'], s["0"]
    const, returns = bool(d.m("max_reserved_constant")), bool(d.m("zero_returns_at_each_sync"))
    mid = next((v for k, v in s.items() if k not in ('"max"', "0")), None)
    return Judged(
        measured=(f'"max": holds {mx["held_gib"]:.2f} GiB, {mx["steady_ms"]:.2f} ms/batch; 0: holds '
                  f'{zero["held_gib"]:.2f} GiB, {zero["steady_ms"]:.2f} ms/batch '
                  f'({times(zero["steady_ms"] / mx["steady_ms"])} slower)'
                  + (f"; middle: {mid['held_gib']:.2f} GiB, {mid['steady_ms']:.2f} ms" if mid else "")),
        bound=f'steady time per batch with "max" = {mx["steady_ms"]:.2f} ms',
        ratio=zero["steady_ms"] / mx["steady_ms"], verdict=both(const, returns),
        target='supported: "max" reserved constant and 0 back to zero after every sync')


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    series = (r.get("metrics") or {}).get("series") or {}
    rows = r.get("table") or []
    need(series or rows, "metrics.series")
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
    return {"release threshold: time per batch vs memory held": save(fig, out / f"{NAME}.png")}
