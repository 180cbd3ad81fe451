"""Persistent kernels: one launch whose blocks stay resident and pull work.

- :func:`small_tiles_gemm` - ``a @ b`` (float32) cut into many 64 x 64 tiles, either
  one block per tile (``persistent=False``) or a grid of SMs x resident blocks
  pulling tiles from an atomic work queue (``persistent=True``). Same tile code.
- :func:`normalize` - ``x / sum(x)`` in one cooperative launch around
  ``grid.sync()`` (or two launches, ``grid_sync=False``): an example where a
  whole-grid barrier is really needed.
- :func:`recurrent` - ``H_{t+1} = tanh(H_t W + X_t)`` for T steps: a chain of small
  dependent steps of N/16 small tiles each. ``persistent=True``: one cooperative
  launch whose blocks keep their columns of W in shared memory for all T steps and
  meet at ``grid.sync()`` between steps; ``False``: one launch per step, one block
  per tile, W copied again every step (:func:`recurrent_graph` captures those T
  launches in a CUDA graph, the fairest form of the baseline).

Sources: persistent_gemm.cu, persistent_grid_sync.cu, persistent_recurrent.cu.

    python -m fullpipe.kernels.persistent --selftest   # small checked runs (sanitizers)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from ..cuda.launch import launch
from ..cuda.streams import as_core_stream, stream_handle
from ._operands import arch_and_sm_count, empty_like_kind, operand
from .gemm import _float32_cp_async_operands, _module

GEMM_SOURCE = "kernels/persistent_gemm.cu"
SYNC_SOURCE = "kernels/persistent_grid_sync.cu"
RECURRENT_SOURCE = "kernels/persistent_recurrent.cu"
TILE = 64
THREADS = 256
_queues: dict[tuple[int, int], Any] = {}  # (device, stream handle) -> 2 zeroed uint32 counters


def _queue(device_index: int, stream: Any):
    """The work-queue counters for launches on ``stream`` (the kernel leaves them zeroed)."""
    from cuda.core import Device as CoreDevice

    from ..cuda.memory import device_empty, memset_d8

    key = (device_index, int(stream_handle(stream)))
    if key not in _queues:
        q = device_empty(2, np.uint32, stream, CoreDevice(device_index).memory_resource)
        memset_d8(q.ptr, 0, q.nbytes, stream)
        _queues[key] = q
    return _queues[key]


def resident_blocks_per_sm(kernel: Any, block: int = THREADS, shared_mem: int = 0) -> int:
    return max(1, int(kernel.occupancy.max_active_blocks_per_multiprocessor(block, shared_mem)))


def small_tiles_gemm(a: Any, b: Any, *, persistent: bool = True, stream: Any, out: Any = None) -> Any:
    """``out = a @ b`` for float32 (M, K) x (K, N) with 64 x 64 tiles; returns ``out``.

    Needs K and N multiples of 4 and 16-byte aligned arrays (16-byte cp.async copies).
    """
    A, B, out, C, s, m, n, k = _float32_cp_async_operands(a, b, out, stream, "small_tiles_gemm", nonempty=True)
    arch, sm_count = arch_and_sm_count(A.device_index)
    mod = _module(GEMM_SOURCE, arch)
    tiles = -(-m // TILE) * -(-n // TILE)
    if persistent:
        kernel = mod.kernel("gemm_small_tiles_persistent")
        grid = min(tiles, sm_count * resident_blocks_per_sm(kernel))
        q = _queue(A.device_index, s)
    else:
        kernel = mod.kernel("gemm_small_tiles_per_tile")
        grid = tiles
        q = _queue(A.device_index, s)  # unused by the kernel; same signature
    launch(s, kernel, grid, THREADS, np.uint64(A.ptr), np.uint64(B.ptr), np.uint64(C.ptr),
           np.int32(m), np.int32(n), np.int32(k), np.uint64(q.ptr), device_index=A.device_index)
    return out


def normalize(x: Any, *, stream: Any, out: Any = None, grid_sync: bool = True, partials: Any = None) -> Any:
    """``out = x / sum(x)`` for a 1-D float32 device array; returns ``out``.

    ``grid_sync=True``: one cooperative launch (grid = resident blocks) with
    ``grid.sync()`` between the partial sums and the scaling; ``False``: two launches.
    """
    if stream is None:
        raise TypeError("stream is required")
    X = operand(x, "x")
    if len(X.shape) != 1 or X.dtype != "float32":
        raise ValueError(f"x must be a 1-D float32 array, got shape {X.shape} dtype {X.dtype}")
    n = X.shape[0]
    if not 1 <= n < 2**31:
        raise ValueError(f"x must have 1 .. 2**31-1 elements, got {n}")
    s = as_core_stream(stream)
    if out is None:
        out, Y = empty_like_kind(X, (n,), "float32", s)
    else:
        Y = operand(out, "out")
        if Y.shape != (n,) or Y.dtype != "float32":
            raise ValueError(f"out must be a ({n},) float32 array, got {Y.shape} {Y.dtype}")
    arch, sm_count = arch_and_sm_count(X.device_index)
    mod = _module(SYNC_SOURCE, arch)
    coop = mod.kernel("normalize_grid_sync")
    grid = max(1, min(-(-n // THREADS), sm_count * resident_blocks_per_sm(coop)))
    if partials is None:
        from cuda.core import Device as CoreDevice

        from ..cuda.memory import device_empty

        partials = device_empty(grid, np.float32, s, CoreDevice(X.device_index).memory_resource)
    P = operand(partials, "partials")
    if P.shape[0] < grid:
        raise ValueError(f"partials needs at least {grid} floats")
    if grid_sync:
        launch(s, coop, grid, THREADS, np.uint64(X.ptr), np.uint64(Y.ptr), np.uint64(P.ptr), np.int32(n),
               cooperative=True, device_index=X.device_index)
    else:
        launch(s, mod.kernel("normalize_partials"), grid, THREADS, np.uint64(X.ptr), np.uint64(P.ptr), np.int32(n),
               device_index=X.device_index)
        launch(s, mod.kernel("normalize_scale"), grid, THREADS, np.uint64(X.ptr), np.uint64(Y.ptr), np.uint64(P.ptr),
               np.int32(grid), np.int32(n), device_index=X.device_index)
    return out


# --------------------------------------------------------------------------- recurrent chain
REC_COLS = 16  # columns of W (and of H) per tile
REC_MAX_B = 8
REC_STATIC_SMEM = 8 * REC_MAX_B * REC_COLS * 4  # the reduction buffer (red[] in the .cu)


@dataclasses.dataclass(frozen=True)
class RecurrentPlan:
    """Launch shapes of both forms of the recurrence (testable without a GPU)."""

    batch: int
    n: int
    steps: int
    tiles: int  # N / 16: blocks of the per-step kernel
    step_smem: int  # dynamic shared memory of recurrent_step
    grid: int  # blocks of the persistent kernel
    tiles_per_block: int
    persistent_smem: int  # dynamic shared memory of recurrent_persistent


def check_recurrent_sizes(batch: int, n: int, steps: int) -> None:
    """The size rules of both kernels that do not depend on the GPU (ValueError naming the rule)."""
    for name, v in (("batch", batch), ("N", n), ("T", steps)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise ValueError(f"{name} must be an int, got {v!r}")
    if not 1 <= batch <= REC_MAX_B:
        raise ValueError(f"batch must be 1 .. {REC_MAX_B} (rows of H), got {batch}")
    if n < REC_COLS or n % REC_COLS:
        raise ValueError(f"N must be a positive multiple of {REC_COLS} (whole 16-column tiles), got {n}")
    if n >= 2**31 // (REC_COLS * REC_MAX_B):
        raise ValueError(f"N = {n} is too large for the kernels' 32-bit indices")
    if steps < 1:
        raise ValueError(f"T must be >= 1 (steps of the recurrence), got {steps}")


def recurrent_plan(batch: int, n: int, steps: int, *, sm_count: int, smem_optin: int,
                   blocks_per_sm: Callable[[int], int], max_grid: int | None = None) -> RecurrentPlan:
    """Check the sizes and choose both launch shapes, or raise ValueError naming the constraint.

    ``smem_optin``: shared memory a block may have after opt-in;
    ``blocks_per_sm(dynamic_smem_bytes)``: resident blocks of recurrent_persistent;
    ``max_grid``: cap the persistent grid (tests use it to give blocks several tiles).
    """
    check_recurrent_sizes(batch, n, steps)
    tiles = n // REC_COLS
    budget = smem_optin - REC_STATIC_SMEM
    step_smem = (n * REC_COLS + batch * n) * 4
    if step_smem > budget:
        raise ValueError(f"N = {n}, batch = {batch} needs {step_smem} bytes of shared memory per block for one tile "
                         f"of W and H_t; this GPU allows {budget}: use a smaller N or batch")
    for tpb in range(1, tiles + 1):
        smem = (tpb * n * REC_COLS + batch * n) * 4
        if smem > budget:
            break
        grid = -(-tiles // tpb)
        capacity = sm_count * max(0, int(blocks_per_sm(smem)))
        if grid <= (capacity if max_grid is None else min(capacity, max_grid)):
            return RecurrentPlan(batch, n, steps, tiles, step_smem, grid, tpb, smem)
    raise ValueError(f"W ({n} x {n} fp32) does not fit in the shared memory of the blocks that can be resident at "
                     f"once ({sm_count} SMs, {budget} bytes per block): use a smaller N")


def _recurrent_operands(h0: Any, w: Any, x: Any, out: Any, stream: Any):
    if stream is None:
        raise TypeError("stream is required")
    H, W, X = operand(h0, "h0"), operand(w, "w"), operand(x, "x")
    for name, o, nd in (("h0", H, 2), ("w", W, 2), ("x", X, 3)):
        if len(o.shape) != nd or o.dtype != "float32":
            raise ValueError(f"{name} must be a {nd}-D float32 array, got shape {o.shape} dtype {o.dtype}")
    batch, n = H.shape
    if W.shape != (n, n):
        raise ValueError(f"w must be ({n}, {n}) to match h0 {H.shape}, got {W.shape}")
    if X.shape[1:] != (batch, n) or X.shape[0] < 1:
        raise ValueError(f"x must be (T, {batch}, {n}) with T >= 1, got {X.shape}")
    if len({H.device_index, W.device_index, X.device_index}) != 1:
        raise ValueError("h0, w and x must be on the same GPU")
    steps = X.shape[0]
    check_recurrent_sizes(batch, n, steps)
    if any(o.ptr % 16 for o in (H, W, X)):
        raise ValueError("h0, w and x must be 16-byte aligned (a sliced view may not be): copy them")
    O = None
    if out is not None:  # checked before the stream is touched
        O = operand(out, "out")
        if O.shape != (steps, batch, n) or O.dtype != "float32":
            raise ValueError(f"out must be a ({steps}, {batch}, {n}) float32 array, got {O.shape} {O.dtype}")
        if O.device_index != H.device_index:
            raise ValueError("out must be on the same GPU as h0")
        if O.ptr % 16:
            raise ValueError("out must be 16-byte aligned (a sliced view may not be): copy it")
    s = as_core_stream(stream)
    if out is None:
        out, O = empty_like_kind(H, (steps, batch, n), "float32", s)
    return H, W, X, out, O, s, batch, n, steps


@functools.lru_cache(maxsize=64)
def _recurrent_setup(device_index: int, batch: int, n: int, steps: int, max_grid: int | None = None):
    """(module, plan) for this device; opts both kernels in to their shared memory.
    Cached: the per-call cost of the fronts stays small (the baseline's launches
    from Python are timed)."""
    from ..cuda.device import Device
    from ..cuda.launch import set_max_dynamic_shared_memory

    arch, sm_count = arch_and_sm_count(device_index)
    mod = _module(RECURRENT_SOURCE, arch)
    facts = Device(device_index).facts
    coop = mod.kernel("recurrent_persistent")

    def bps(smem: int) -> int:
        set_max_dynamic_shared_memory(coop, smem, device_index)
        return resident_blocks_per_sm(coop, THREADS, smem)

    plan = recurrent_plan(batch, n, steps, sm_count=sm_count, smem_optin=facts.shared_memory_per_block_optin,
                          blocks_per_sm=bps, max_grid=max_grid)
    set_max_dynamic_shared_memory(coop, plan.persistent_smem, device_index)
    set_max_dynamic_shared_memory(mod.kernel("recurrent_step"), plan.step_smem, device_index)
    return mod, plan


def _launch_steps(target: Any, mod: Any, plan: RecurrentPlan, H: Any, W: Any, X: Any, O: Any) -> None:
    """The baseline: T launches of recurrent_step on ``target`` (a stream or a graph builder)."""
    step = mod.kernel("recurrent_step")
    row = plan.batch * plan.n * 4  # bytes of one H_t / X_t
    for t in range(plan.steps):
        h_in = H.ptr if t == 0 else O.ptr + (t - 1) * row
        launch(target, step, plan.tiles, THREADS, np.uint64(h_in), np.uint64(W.ptr), np.uint64(X.ptr + t * row),
               np.uint64(O.ptr + t * row), np.int32(plan.batch), np.int32(plan.n), shared_mem=plan.step_smem,
               device_index=H.device_index)


def recurrent(h0: Any, w: Any, x: Any, *, persistent: bool = True, stream: Any, out: Any = None,
              _max_grid: int | None = None) -> Any:
    """``out[t] = H_{t+1} = tanh(H_t @ w + x[t])`` for t < T, H_0 = ``h0``; returns ``out``.

    h0: (B, N), w: (N, N), x: (T, B, N), all float32; out: (T, B, N). Needs
    1 <= B <= 8, N a multiple of 16, W small enough for the resident blocks' shared
    memory (N <= about 2400 on an H100/H200) and 16-byte aligned arrays.
    ``persistent=True``: one cooperative launch; ``False``: T launches.
    """
    H, W, X, out, O, s, batch, n, steps = _recurrent_operands(h0, w, x, out, stream)
    mod, plan = _recurrent_setup(H.device_index, batch, n, steps, _max_grid)
    if persistent:
        launch(s, mod.kernel("recurrent_persistent"), plan.grid, THREADS, np.uint64(H.ptr), np.uint64(W.ptr),
               np.uint64(X.ptr), np.uint64(O.ptr), np.int32(batch), np.int32(n), np.int32(steps),
               np.int32(plan.tiles_per_block), shared_mem=plan.persistent_smem, cooperative=True,
               device_index=H.device_index)
    else:
        _launch_steps(s, mod, plan, H, W, X, O)
    return out


class RecurrentGraph:
    """The T per-step launches of :func:`recurrent` captured once in a CUDA graph.

    ``g.launch(stream)`` replays them (the driver submits one graph instead of T
    kernels). Keeps ``h0``, ``w``, ``x`` and ``out`` alive as long as it lives.
    """

    def __init__(self, graph: Any, keep: tuple, plan: RecurrentPlan):
        self.graph, self._keep, self.plan = graph, keep, plan

    def launch(self, stream: Any) -> None:
        self.graph.launch(as_core_stream(stream))


def recurrent_graph(h0: Any, w: Any, x: Any, *, stream: Any, out: Any) -> RecurrentGraph:
    """Capture the baseline's T launches (one block per tile per step) in a CUDA graph."""
    H, W, X, out, O, s, batch, n, steps = _recurrent_operands(h0, w, x, out, stream)
    mod, plan = _recurrent_setup(H.device_index, batch, n, steps)
    gb = s.create_graph_builder().begin_building()
    try:
        _launch_steps(gb, mod, plan, H, W, X, O)
    finally:
        gb.end_building()
    return RecurrentGraph(gb.complete(), (h0, w, x, out), plan)


# --------------------------------------------------------------------------- selftest
def _selftest(argv: list[str] | None = None) -> int:
    """Small checked runs of every kernel of this module (for compute-sanitizer):
    the work queue twice in a row (its reset), both normalize forms, the recurrence
    in all three forms. Exit status 1 if any result is wrong."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.kernels.persistent")
    ap.add_argument("--selftest", action="store_true", required=True)
    ap.add_argument("--only", default="", help="run only cases whose label contains this text")
    args = ap.parse_args(argv)
    import torch

    from ..cuda.device import Device
    from ..cuda.streams import create_stream

    stream = create_stream(Device(0))
    bad = 0

    def report(label: str, err: float, tol: float, nan: bool) -> None:
        nonlocal bad
        ok = err < tol and not nan
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} {label:44s} rel err {err:.2e}", flush=True)

    def rel(a, ref) -> float:
        return float(torch.linalg.norm(a.double() - ref) / torch.linalg.norm(ref).clamp_min(1e-30))

    g = torch.Generator(device="cuda").manual_seed(3)
    for m, n, k in [(200, 136, 40), (64, 64, 16), (130, 68, 100)]:
        for p in (False, True):
            label = f"small_tiles persistent={p} {m}x{n}x{k}"
            if args.only not in label:
                continue
            for rep in range(2):  # the 2nd launch uses the queue the 1st one reset
                a = torch.randn(m, k, device="cuda", generator=g)
                b = torch.randn(k, n, device="cuda", generator=g)
                out = torch.full((m, n), float("nan"), device="cuda")
                torch.cuda.synchronize()
                small_tiles_gemm(a, b, persistent=p, stream=stream, out=out)
                stream.sync()
                report(f"{label} launch {rep}", rel(out, a.double() @ b.double()), 1e-4, bool(torch.isnan(out).any()))
    for nx in (1000, 70000):
        for gs in (True, False):
            label = f"normalize grid_sync={gs} n={nx}"
            if args.only not in label:
                continue
            x = torch.rand(nx, device="cuda", generator=g) + 0.5
            y = torch.full((nx,), float("nan"), device="cuda")
            torch.cuda.synchronize()
            normalize(x, stream=stream, out=y, grid_sync=gs)
            stream.sync()
            report(label, rel(y, x.double() / x.double().sum()), 1e-5, bool(torch.isnan(y).any()))
    for batch, n, steps in [(3, 256, 5), (8, 128, 3), (1, 1024, 4)]:
        h0, w, x = recurrent_inputs(batch, n, steps, seed=batch + n)
        ref = recurrent_reference(h0, w, x)
        for mode in ("persistent", "persistent 3 blocks", "per_step", "per_step_graph"):
            label = f"recurrent {mode} B={batch} N={n} T={steps}"
            if args.only not in label:
                continue
            out = torch.full((steps, batch, n), float("nan"), device="cuda")
            torch.cuda.synchronize()
            if mode == "per_step_graph":
                recurrent_graph(h0, w, x, stream=stream, out=out).launch(stream)
            elif mode == "persistent 3 blocks":  # several tiles per block
                if n > 256:
                    continue
                recurrent(h0, w, x, persistent=True, stream=stream, out=out, _max_grid=3)
            else:
                recurrent(h0, w, x, persistent=mode == "persistent", stream=stream, out=out)
            stream.sync()
            report(label, rel(out, ref), 1e-4, bool(torch.isnan(out).any()))
    return 1 if bad else 0


def recurrent_inputs(batch: int, n: int, steps: int, seed: int = 0):
    """Random (h0, w, x) torch CUDA tensors for :func:`recurrent`, scaled so that the
    recurrence neither explodes nor dies out (W ~ N(0, 0.5 / N): a contraction)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    h0 = torch.randn(batch, n, device="cuda", generator=g).tanh()
    w = torch.randn(n, n, device="cuda", generator=g) * (0.5 / n**0.5)
    x = torch.randn(steps, batch, n, device="cuda", generator=g) * 0.5
    return h0, w, x


def recurrent_reference(h0: Any, w: Any, x: Any):
    """The recurrence in float64 with PyTorch: (T, B, N)."""
    import torch

    h, wd, outs = h0.double(), w.double(), []
    for t in range(x.shape[0]):
        h = torch.tanh(h @ wd + x[t].double())
        outs.append(h)
    return torch.stack(outs)


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())
