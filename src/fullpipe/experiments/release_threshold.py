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

import time

import numpy as np

from ..cuda import driver as drv
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from . import _alloc_common as common
from ..cuda.timing import median
from .result import Bound, Result
from ..report.claims import with_claims

NAME = "release-threshold"
TITLE = "Release threshold 0 / middle / max: time per batch vs memory held between batches"
CLAIM = ('with release threshold "max" reserved memory stays constant after the first batch; '
         "with 0 it returns to the OS at each sync")


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


def _figure(path, series, labels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label in labels:
        s = series[label]
        ax1.plot(range(1, len(s["ms"]) + 1), s["ms"], marker="o", label=label)
    ax1.set_xlabel("batch")
    ax1.set_ylabel("time per batch (ms)")
    ax1.set_yscale("log")
    ax1.set_title("time per batch (incl. sync)")
    ax1.legend()
    for label in labels:
        s = series[label]
        ax2.scatter([s["held_gib"]], [s["steady_ms"]], s=60)
        ax2.annotate(label, (s["held_gib"], s["steady_ms"]), textcoords="offset points", xytext=(6, 4))
    ax2.set_xlabel("memory held by the pool between batches (GiB)")
    ax2.set_ylabel("steady-state time per batch (ms)")
    ax2.set_title("the trade-off")
    from ._alloc_common import save_figure

    return save_figure(fig, path)


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
    verdict = "supported" if (max_constant and zero_returns) else "partly supported" if (
        max_constant or zero_returns) else "not supported"
    figures = {"tradeoff": _figure(ctx.out_dir / "release-threshold.png", series, [t[0] for t in thresholds])}
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
        verdict=verdict,
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
        figures=figures,
    ))
