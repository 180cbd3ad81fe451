"""fullpipe bench persistent: a persistent kernel with an atomic work queue vs one
block per tile, on a GEMM cut into many small (64 x 64) tiles with a short K, where
each block's launch, pipeline fill and drain are a large share of its work; plus a
cooperative grid.sync() example (x / sum(x)) vs two launches.

Same tile code in both GEMM kernels (persistent_gemm.cu); they differ only in
where a block's next tile comes from. Bound: cuBLAS fp32 (TF32 off), same run.
"""

from __future__ import annotations

from typing import Any

from . import Bound, Context, Result, verdict_from_ratio
from .gemm import device_info, rel_error, tflops, torch_on, true_fp32
from .measure import median, spread, time_on_stream

NAME = "persistent"
TITLE = "Persistent kernels and work queues"
CLAIM = ("On many small tiles, a persistent grid pulling tiles from an atomic queue is >= 1.5x faster "
         "than one block per tile")


def run(ctx: Context) -> Result:
    import torch

    from ..cuda.streams import create_stream
    from ..kernels import normalize, small_tiles_gemm

    dev = ctx.device
    stream = create_stream(dev)
    repeat = 10 if ctx.quick else 20
    shapes = [(2048, 2048, 32), (2048, 2048, 128)] if ctx.quick else [(4096, 4096, 32), (4096, 4096, 128), (8192, 8192, 32)]
    rows: list[dict[str, Any]] = []
    metrics: dict[str, Any] = {}
    notes: list[str] = []
    failed: list[str] = []
    ratios = []
    per_tile_ms = {}
    for i, (m, n, k) in enumerate(shapes):
        gen = torch.Generator(device="cuda").manual_seed(i)
        a = torch.randn(m, k, device="cuda", generator=gen)
        b = torch.randn(k, n, device="cuda", generator=gen)
        out = torch.empty(m, n, device="cuda")
        torch.cuda.synchronize()
        with true_fp32(), torch_on(stream):
            ref = a @ b
            ts = time_on_stream(lambda: torch.matmul(a, b), stream, repeat=repeat)
        cub_ms = median(ts)
        tiles = (m // 64) * (n // 64)
        rows.append({"shape": f"{m}x{n}x{k}", "kernel": "cuBLAS fp32", "tiles": tiles, "ms": cub_ms,
                     "spread": spread(ts), "TFLOP/s": tflops(m, n, k, cub_ms), "ratio": None})
        ms = {}
        for persistent in (False, True):
            label = "persistent queue" if persistent else "one block per tile"
            ok = True
            for rep in range(2):  # the 2nd launch checks the queue reset
                with torch_on(stream):
                    out.fill_(float("nan"))
                small_tiles_gemm(a, b, persistent=persistent, stream=stream, out=out)
                stream.sync()
                err = rel_error(out, ref)
                if not err < 1e-4:
                    failed.append(f"{label} {m}x{n}x{k} launch {rep}: relative error {err:.3e}")
                    ok = False
                    break
            if not ok:
                continue
            ts = time_on_stream(lambda: small_tiles_gemm(a, b, persistent=persistent, stream=stream, out=out),
                                stream, repeat=repeat)
            ms[persistent] = median(ts)
            rows.append({"shape": f"{m}x{n}x{k}", "kernel": label, "tiles": tiles, "ms": ms[persistent],
                         "spread": spread(ts), "TFLOP/s": tflops(m, n, k, ms[persistent]),
                         "ratio": (ms[False] / ms[True]) if persistent and False in ms else None})
        if len(ms) == 2:
            ratios.append(ms[False] / ms[True])
            per_tile_ms[ms[False] / ms[True]] = (f"{m}x{n}x{k}", ms[False])
            metrics[f"speedup_{m}x{n}x{k}"] = ms[False] / ms[True]
        ctx.progress((i + 1) / (len(shapes) + 1), f"{m}x{n}x{k}")

    # Whole-grid barrier example: y = x / sum(x), one cooperative launch vs two launches.
    nx = 1 << (22 if ctx.quick else 24)
    x = torch.rand(nx, device="cuda") + 0.5
    y = torch.empty(nx, device="cuda")
    partials = torch.empty(dev.facts.sm_count * 32, device="cuda")  # >= the cooperative grid
    torch.cuda.synchronize()
    ref = x.double() / x.double().sum()
    for grid_sync in (True, False):
        label = "normalize: grid.sync (1 launch)" if grid_sync else "normalize: 2 launches"
        with torch_on(stream):
            y.fill_(float("nan"))
        normalize(x, stream=stream, out=y, grid_sync=grid_sync, partials=partials)
        stream.sync()
        err = rel_error(y.double(), ref)
        if not err < 1e-5:
            failed.append(f"{label}: relative error {err:.3e}")
            continue
        ts = time_on_stream(lambda: normalize(x, stream=stream, out=y, grid_sync=grid_sync, partials=partials), stream, repeat=repeat)
        rows.append({"shape": f"n={nx}", "kernel": label, "tiles": None, "ms": median(ts), "spread": spread(ts),
                     "TFLOP/s": None, "ratio": None})
        metrics[f"{label}_ms"] = median(ts)

    best = max(ratios) if ratios else None
    notes.append("ratio = time(one block per tile) / time(persistent); grid of the persistent kernel = "
                 "SMs x resident blocks per SM (occupancy), each block claims tiles with atomicAdd")
    if failed:
        verdict = "failed"
        notes.extend(failed)
    else:
        verdict = verdict_from_ratio(best, 1.5, 1.1) if best is not None else "failed"
        if best is not None and best < 1.5:
            notes.append("one block per tile already keeps 8 blocks resident per SM, so the hardware block "
                         "scheduler overlaps one block's fill with another's math; the persistent grid saves "
                         "only block launch and the per-tile pipeline fill")
    return Result(NAME, CLAIM, verdict, device_info(dev), {"shapes": [list(s) for s in shapes], "tile": 64,
                  "repeat": repeat}, metrics,
                  bound=(Bound(f"one block per tile, {per_tile_ms[best][0]} (same tile code)", per_tile_ms[best][1], "ms")
                         if best is not None else None),
                  ratio=best, table=rows, notes=notes)
