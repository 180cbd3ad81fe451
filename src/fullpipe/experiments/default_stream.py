"""default-stream: which combinations of streams serialize.

The same work in every case: kernel K1, a pinned H2D copy, kernel K2 (each a
few ms; the kernels use a few blocks, so both fit on the GPU at once), each
enqueued on its own stream of the kind under test:

- the legacy default stream (all three on it);
- three blocking explicit streams (``cudaStreamCreate`` default flags);
- three non-blocking explicit streams;
- the per-thread default stream of three CPU threads;
- blocking explicit streams with one stray 4-byte memset on the legacy default
  stream between K1 and the rest;
- non-blocking explicit streams with the same stray op.

Measured: the kernels' start/end on the GPU's global timer (K1 and K2 overlap or
not), and concurrency = (sum of the three alone) / (all three together): 1.0 is
serial, up to 3.0 when all run at once.
"""

from __future__ import annotations

from pathlib import Path
import threading
import time

import numpy as np

from ..cuda import driver as drv
from ..cuda.compiler import compile_package_kernel
from ..cuda.launch import launch
from ..cuda.memory import copy_h2d, memset_d8, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream, legacy_default_stream, per_thread_default_stream
from ..cuda.device import device_info
from ..cuda.timing import median
from .result import Result
from .claims import UNJUDGED, Data, Judged, Missing, is_num, rule, with_claims
from .figures import BOUND, GREY, PAGEABLE, RING, label_bars, need, pyplot, save

NAME = "default-stream"
TITLE = "Legacy default stream, blocking and non-blocking streams, per-thread default streams"
CLAIM = ("The legacy default stream serializes with blocking streams (even one stray op does); "
         "non-blocking streams and per-thread default streams run concurrently")
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "The legacy default stream (stream 0) synchronizes implicitly with every blocking stream: its work "
    "waits for all of them and they wait for it. Non-blocking streams and the per-thread default stream "
    "do not. One stray call on stream 0 is enough to serialize a pipeline built on blocking streams."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): the one claim its CLAIM makes.
VERDICT_FROM = ("default-stream",)

BLOCKS, THREADS = 4, 64


def run(ctx) -> Result:
    dev = ctx.device
    spin_ms = 3.0 if ctx.quick else 10.0
    repeat = 3 if ctx.quick else 5
    kern = compile_package_kernel("pipeline/stamps.cu", device=dev).kernel("spin_stamp_sm")
    pool = DevicePool(dev)
    work = create_stream(dev)
    stamps = pool.empty((2, BLOCKS, 4), np.uint64, work)
    copy_bytes = int(spin_ms * 1e-3 * 50e9) // 4096 * 4096  # about spin_ms at PCIe gen5 speed
    dbuf = pool.empty(copy_bytes, np.uint8, work)
    host = pinned_empty(copy_bytes, np.uint8)
    host[:] = 1
    work.sync()
    ns = np.uint64(int(spin_ms * 1e6))

    def k(stream, which):
        return lambda: launch(stream, kern, BLOCKS, THREADS, ns, np.uint64(stamps.ptr + which * BLOCKS * 32),
                              np.uint64(which))

    def cp(stream):
        return lambda: copy_h2d(dbuf.ptr, host, stream)

    def timed(ops, threads=False):
        """Host wall time of enqueueing ops and a device-wide sync; the kernels' stamps."""
        memset_d8(stamps.ptr, 0, stamps.nbytes, work)
        work.sync()
        dev.synchronize()
        t0 = time.perf_counter()
        if threads:
            barrier = threading.Barrier(len(ops))

            def body(op):
                dev.set_current()
                barrier.wait()
                op()
                with drv.translated("cuStreamSynchronize"):
                    per_thread_default_stream().sync()

            ts = [threading.Thread(target=body, args=(op,)) for op in ops]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        else:
            for op in ops:
                op()
        dev.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        s = stamps.to_numpy(work)
        k1 = (int(s[0, :, 0].min()), int(s[0, :, 1].max()))
        k2 = (int(s[1, :, 0].min()), int(s[1, :, 1].max()))
        return wall, k1, k2

    # Each op alone, on a non-blocking stream.
    alone_stream = create_stream(dev)
    alone = {
        "K1": median([timed([k(alone_stream, 0)])[0] for _ in range(repeat)]),
        "copy": median([timed([cp(alone_stream)])[0] for _ in range(repeat)]),
        "K2": median([timed([k(alone_stream, 1)])[0] for _ in range(repeat)]),
    }
    sum_alone = sum(alone.values())
    legacy = legacy_default_stream()
    ptds = per_thread_default_stream()
    blocking = [create_stream(dev, blocking=True) for _ in range(3)]
    nonblocking = [create_stream(dev) for _ in range(3)]
    stray = lambda: memset_d8(dbuf.ptr, 0, 4, legacy)  # noqa: E731

    cases = [
        ("legacy default stream", [k(legacy, 0), cp(legacy), k(legacy, 1)], False, True),
        ("3 blocking streams", [k(blocking[0], 0), cp(blocking[1]), k(blocking[2], 1)], False, False),
        ("3 non-blocking streams", [k(nonblocking[0], 0), cp(nonblocking[1]), k(nonblocking[2], 1)], False, False),
        ("per-thread default streams, 3 threads", [k(ptds, 0), cp(ptds), k(ptds, 1)], True, False),
        ("blocking streams + 1 stray legacy op",
         [k(blocking[0], 0), stray, cp(blocking[1]), k(blocking[2], 1)], False, True),
        ("non-blocking streams + 1 stray legacy op",
         [k(nonblocking[0], 0), stray, cp(nonblocking[1]), k(nonblocking[2], 1)], False, False),
    ]
    rows = []
    for i, (label, ops, threads, expect_serial) in enumerate(cases):
        ctx.progress(0.1 + 0.85 * i / len(cases), label)
        timed(ops, threads)  # warm-up
        runs = [timed(ops, threads) for _ in range(repeat)]
        runs.sort(key=lambda r: r[0])
        wall, k1, k2 = runs[len(runs) // 2]
        overlap_ms = max(0, min(k1[1], k2[1]) - max(k1[0], k2[0])) / 1e6
        conc = sum_alone / wall
        serialized = overlap_ms <= 0.05 * spin_ms  # K2 ran only after K1 (globaltimer)
        ok = serialized == expect_serial
        rows.append({"case": label, "wall_ms": wall, "sum_alone_ms": sum_alone, "concurrency": conc,
                     "K1_K2_overlap_ms": overlap_ms, "serialized": serialized,
                     "expected": "serial" if expect_serial else "concurrent", "as_expected": ok})
    for s in blocking + nonblocking + [alone_stream]:
        s.sync()
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict=UNJUDGED,
        device=device_info(dev),
        params={"spin_ms": spin_ms, "copy_bytes": copy_bytes, "blocks_per_kernel": BLOCKS, "repeat": repeat},
        metrics={"alone_ms": alone, "cases": {r["case"]: r["concurrency"] for r in rows}},
        table=rows,
        notes=[
            "concurrency = (K1 + copy + K2, each alone) / (all three enqueued together), host wall "
            "times; serialized = K1's and K2's globaltimer intervals do not overlap.",
            "One stray op on the legacy default stream waits for all earlier work in every blocking "
            "stream, and all later work in blocking streams waits for it: one op serializes the lot. "
            "Non-blocking streams ignore the legacy stream.",
        ],
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
@rule(NAME, "default-stream",
      "the legacy default stream serializes with blocking streams (one stray op is enough); "
      "non-blocking and per-thread default streams run concurrently")
def _default_stream(d: Data) -> Judged:
    rows = d.rows()
    if not rows or "as_expected" not in rows[0]:
        raise Missing("table rows with 'as_expected'")
    alone = d.m("alone_ms")
    ideal = sum(alone.values()) / max(alone.values())
    conc = {r["case"]: d.num(r, "concurrency") for r in rows}
    nb = conc.get("3 non-blocking streams")
    wrong = [r["case"] for r in rows if not r.get("as_expected")]
    return Judged(measured="concurrency: " + ", ".join(f"{k} {v:.2f}" for k, v in conc.items())
                  + ("" if not wrong else f"; not as expected: {', '.join(wrong)}"),
                  bound=f"all three at once: sum alone / longest alone = {ideal:.2f} (1 = serial)",
                  ratio=(nb / ideal) if nb else None, verdict="supported" if not wrong else "partly supported",
                  target="supported: each case serializes (globaltimer) exactly when the claim says it should")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("concurrency"))]
    need(rows, "table.concurrency")
    alone = (r.get("metrics") or {}).get("alone_ms") or {}
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.4))
    colors = [PAGEABLE if x.get("serialized") else RING for x in rows]
    bars = ax.barh([x["case"] for x in rows], [x["concurrency"] for x in rows], color=colors)
    label_bars(ax, bars, "{:.2f}")
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
    return {"concurrency by kind of stream": save(fig, out / f"{NAME}.png")}
