#!/usr/bin/env python3
"""Run every level-2 kernel once on small inputs and check it against PyTorch.

Used under compute-sanitizer (scripts/sanitize-kernels) and ncu (scripts/ncu-kernels):
    python scripts/kernels_driver.py              # small sizes, every kernel
    python scripts/kernels_driver.py --size 4096  # one square size (for ncu)
    python scripts/kernels_driver.py --only wmma  # kernels whose label contains 'wmma'
                                                  # (every candidate tiling in WMMA_CANDIDATES)
Prints one line per kernel; exits 1 if any result is wrong.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=None, help="one square size instead of the small odd ones")
    ap.add_argument("--only", default="", help="run only kernels whose label contains this text")
    args = ap.parse_args()

    import torch

    from fullpipe import kernels
    from fullpipe.cuda.device import Device
    from fullpipe.cuda.streams import create_stream

    dev = Device(0)
    stream = create_stream(dev)
    fp32_shapes = [(args.size,) * 3] if args.size else [(130, 68, 40), (67, 45, 33)]  # vector path, element path
    f16_shapes = [(args.size,) * 3] if args.size else [(136, 264, 48)]
    cases = []
    for shape in fp32_shapes:
        cases.append(("tiled", shape, torch.float32, lambda a, b, o: kernels.gemm(a, b, variant="tiled", stream=stream, out=o)))
        for s in (2, 3, 4):
            cases.append((f"double_buffer s{s}", shape, torch.float32,
                          lambda a, b, o, s=s: kernels.gemm(a, b, variant="double_buffer", stages=s, stream=stream, out=o)))
            cases.append((f"warp_specialized s{s}", shape, torch.float32,
                          lambda a, b, o, s=s: kernels.gemm(a, b, variant="warp_specialized", stages=s, stream=stream, out=o)))
    from fullpipe.kernels.gemm import WMMA_CANDIDATES, wmma_config

    # Small sizes (sanitizers): every candidate tiling. One big size (ncu): the default
    # only, since ncu tells kernels apart by symbol and every tiling has the same ones.
    wmma_cfgs = [wmma_config(None)] if args.size else list(WMMA_CANDIDATES)
    for shape in f16_shapes:
        for dt in (torch.float16, torch.bfloat16):
            for cfg in wmma_cfgs:
                cases.append((f"wmma {str(dt)[6:]} {cfg.name}", shape, dt,
                              lambda a, b, o, c=cfg: kernels.gemm(a, b, variant="wmma", config=c, stream=stream, out=o)))
    for shape in [(args.size,) * 3] if args.size else [(200, 136, 40)]:
        for p in (False, True):
            cases.append((f"small_tiles persistent={p}", shape, torch.float32,
                          lambda a, b, o, p=p: kernels.small_tiles_gemm(a, b, persistent=p, stream=stream, out=o)))
        for sh in (False, True):
            cases.append((f"cluster share_a={sh}", shape, torch.float32,
                          lambda a, b, o, sh=sh: kernels.cluster_gemm(a, b, share_a=sh, stream=stream, out=o)))

    bad = 0
    for label, (m, n, k), dt, fn in cases:
        if args.only and args.only not in label:
            continue
        a = torch.randn(m, k, device="cuda").to(dt)
        b = torch.randn(k, n, device="cuda").to(dt)
        out = torch.full((m, n), float("nan"), device="cuda")
        torch.cuda.synchronize()
        fn(a, b, out)
        stream.sync()
        ref = a.double() @ b.double()
        err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
        tol = 1e-4 if dt == torch.float32 else 1e-2
        ok = err < tol
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} {label:40s} {m}x{n}x{k}  rel err {err:.2e}", flush=True)
    if not args.only or "normalize" in args.only:
        n = args.size * args.size if args.size else 5000
        x = torch.rand(n, device="cuda") + 0.5
        for gs in (True, False):
            y = torch.full((n,), float("nan"), device="cuda")
            torch.cuda.synchronize()
            kernels.normalize(x, stream=stream, out=y, grid_sync=gs)
            stream.sync()
            ref = x.double() / x.double().sum()
            err = float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))
            ok = err < 1e-5
            bad += not ok
            print(f"{'ok  ' if ok else 'BAD '} normalize grid_sync={gs!s:5s}      n={n}  rel err {err:.2e}", flush=True)
    print(f"{bad} wrong result(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
