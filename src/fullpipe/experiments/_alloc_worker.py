"""One allocator, one process: the fragmentation workload, a JSON line on stdout.

    python -m fullpipe.experiments._alloc_worker --allocator torch-native --budget 2147483648

Allocator settings are process-wide (PyTorch reads PYTORCH_CUDA_ALLOC_CONF once,
at its first CUDA allocation), so the fragmentation experiment runs each allocator
in a fresh process through this module. The budget caps the allocator the way
each library allows:

- torch-native / torch-expandable: ``torch.cuda.set_per_process_memory_fraction``
  (caps reserved memory);
- torch-async (``backend:cudaMallocAsync``): the same call, which in that backend
  caps the bytes PyTorch has live, not what the driver's pool reserves;
- cupy: ``MemoryPool.set_limit(size=budget)`` (caps the pool's total bytes);
- fullpipe: ``DevicePool(max_size=budget)`` (the driver caps the pool's reservation).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

ALLOCATORS = ("torch-native", "torch-expandable", "torch-async", "cupy", "fullpipe")
TORCH_CONF = {
    "torch-native": "",
    "torch-expandable": "expandable_segments:True",
    "torch-async": "backend:cudaMallocAsync",
}
MiB = 1 << 20


# --------------------------------------------------------------------------- workload
def workload(seed: int, steps: int, budget: int) -> list[tuple[str, int, int]]:
    """An LLM-serving-like sequence of ("alloc", id, bytes) / ("free", id, 0) operations.

    Requests arrive with KV-cache-sized buffers (tokens x 16 KiB, tokens log-normal
    around 512), live for a random number of steps, and some grow (a new, larger
    buffer, then the old one freed) as tokens are decoded. Admission keeps the live
    bytes under 55 % of the budget, so whatever the allocator does, the live data
    alone always leaves room. Deterministic for a seed.
    """
    rng = np.random.default_rng(seed)
    ops: list[tuple[str, int, int]] = []
    live: dict[int, tuple[int, int]] = {}  # id -> (bytes, step it ends)
    live_bytes = 0
    next_id = 0
    cap = int(0.55 * budget)
    per_token = 16 * 1024
    for step in range(steps):
        for rid in [r for r, (_, end) in live.items() if end <= step]:
            ops.append(("free", rid, 0))
            live_bytes -= live.pop(rid)[0]
        for _ in range(2):  # up to two arrivals per step
            tokens = int(min(3072, max(32, rng.lognormal(math.log(512), 1.0))))
            size = tokens * per_token
            if live_bytes + size <= cap:
                ops.append(("alloc", next_id, size))
                live[next_id] = (size, step + int(rng.geometric(1 / 25)))
                live_bytes += size
                next_id += 1
        if live and rng.random() < 0.5:  # one request grows: alloc bigger, then free the old one
            rid = int(rng.choice(list(live)))
            size, end = live[rid]
            bigger = int(size * 1.25) // per_token * per_token
            if live_bytes + bigger <= cap:
                ops.append(("alloc", next_id, bigger))
                ops.append(("free", rid, 0))
                live.pop(rid)
                live[next_id] = (bigger, end)
                live_bytes += bigger - size
                next_id += 1
    return ops


def big_request(budget: int, live_bytes: int) -> int:
    """The final large allocation: 90 % of what the budget leaves beside the live data,
    in whole MiB. It always fits in the budget's total free memory."""
    return max(MiB, int(0.9 * (budget - live_bytes)) // MiB * MiB)


# --------------------------------------------------------------------------- adapters
class _Torch:
    def __init__(self, kind: str, budget: int):
        import torch

        self.torch = torch
        self.kind = kind
        _, total = torch.cuda.mem_get_info(0)
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), 0)
        self.live: dict[int, Any] = {}

    def backend(self) -> str:
        return self.torch.cuda.get_allocator_backend()

    def alloc(self, rid: int, n: int) -> None:
        self.live[rid] = self.torch.empty(n, dtype=self.torch.uint8, device="cuda")

    def free(self, rid: int) -> None:
        del self.live[rid]

    def reserved(self) -> int:
        return int(self.torch.cuda.memory_reserved(0))

    def peak_reserved(self) -> int:
        return int(self.torch.cuda.max_memory_reserved(0))

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


class _Cupy:
    def __init__(self, budget: int):
        import cupy

        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()
        self.pool.set_limit(size=budget)
        self.live: dict[int, Any] = {}

    def backend(self) -> str:
        return "cupy.cuda.MemoryPool"

    def alloc(self, rid: int, n: int) -> None:
        self.live[rid] = self.cupy.empty(n, dtype=self.cupy.uint8)

    def free(self, rid: int) -> None:
        del self.live[rid]

    def reserved(self) -> int:
        return int(self.pool.total_bytes())

    def peak_reserved(self) -> int:
        return -1  # CuPy keeps no high-water mark: the caller tracks it

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.cupy.cuda.memory.OutOfMemoryError) or "out of memory" in str(exc).lower()


class _Fullpipe:
    def __init__(self, budget: int):
        from fullpipe.cuda.device import Device
        from fullpipe.cuda.pool import DevicePool
        from fullpipe.cuda.streams import create_stream

        self.dev = Device(0)
        self.stream = create_stream(self.dev)
        self.pool = DevicePool(self.dev, release_threshold="max", max_size=budget)
        self.live: dict[int, Any] = {}

    def backend(self) -> str:
        return "fullpipe DevicePool (cuMemAllocFromPoolAsync, max_size = budget)"

    def alloc(self, rid: int, n: int) -> None:
        self.live[rid] = self.pool.allocate(n, self.stream)

    def free(self, rid: int) -> None:
        self.pool.free(self.live.pop(rid), self.stream)

    def reserved(self) -> int:
        return self.pool.stats().reserved_bytes

    def peak_reserved(self) -> int:
        return self.pool.stats().reserved_high_bytes

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError)


def make_adapter(kind: str, budget: int):
    if kind in TORCH_CONF:
        return _Torch(kind, budget)
    if kind == "cupy":
        return _Cupy(budget)
    if kind == "fullpipe":
        return _Fullpipe(budget)
    raise ValueError(f"unknown allocator {kind!r}; known: {', '.join(ALLOCATORS)}")


# --------------------------------------------------------------------------- run
def run_workload(kind: str, budget: int, seed: int, steps: int) -> dict[str, Any]:
    adapter = make_adapter(kind, budget)
    ops = workload(seed, steps, budget)
    sizes: dict[int, int] = {}
    live = peak_live = peak_reserved = 0
    t0 = time.perf_counter()
    failed_op = None
    for i, (op, rid, n) in enumerate(ops):
        try:
            if op == "alloc":
                adapter.alloc(rid, n)
                sizes[rid] = n
                live += n
            else:
                adapter.free(rid)
                live -= sizes.pop(rid)
        except Exception as exc:
            if not adapter.is_oom(exc):
                raise
            failed_op = {"index": i, "bytes": n, "error": str(exc).splitlines()[0][:300]}
            break
        peak_live = max(peak_live, live)
        peak_reserved = max(peak_reserved, adapter.reserved())
    workload_s = time.perf_counter() - t0
    reserved_before_big = adapter.reserved()
    big = big_request(budget, live)
    big_ok, big_error = False, None
    if failed_op is None:
        try:
            adapter.alloc(-1, big)
            big_ok = True
            peak_reserved = max(peak_reserved, adapter.reserved())
            adapter.free(-1)
        except Exception as exc:
            if not adapter.is_oom(exc):
                raise
            big_error = str(exc).splitlines()[0][:300]
    lib_peak = adapter.peak_reserved()
    return {
        "allocator": kind,
        "backend": adapter.backend(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "budget": budget,
        "operations": len(ops),
        "workload_failed": failed_op,
        "peak_live": peak_live,
        "peak_reserved": max(peak_reserved, lib_peak),
        "live_at_end": live,
        "reserved_before_big": reserved_before_big,
        "big_request": big,
        "big_fits_in_budget": live + big <= budget,
        "big_ok": big_ok,
        "big_error": big_error,
        "workload_seconds": workload_s,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fullpipe.experiments._alloc_worker")
    p.add_argument("--allocator", required=True, choices=ALLOCATORS)
    p.add_argument("--budget", type=int, required=True, help="bytes the allocator may use")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=400)
    args = p.parse_args(argv)
    if args.budget <= 0 or args.steps <= 0:
        p.error("--budget and --steps must be positive")
    if args.allocator in TORCH_CONF:
        # Read by PyTorch at its first CUDA allocation: must be set before that.
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = TORCH_CONF[args.allocator]
    try:
        out = run_workload(args.allocator, args.budget, args.seed, args.steps)
    except ImportError as exc:
        out = {"allocator": args.allocator, "skipped": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
