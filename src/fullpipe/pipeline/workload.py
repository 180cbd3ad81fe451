"""fullpipe's own per-batch compute for the pipeline and its experiments.

:class:`MixKernel` is a compute callable for :class:`StreamPipeline`:
``y = mix^rounds(x)`` element-wise on uint32 (workload.cu). Its memory traffic is
fixed and its time grows linearly with ``rounds``, so an experiment can set the
compute time of a batch to match its copy time (balanced), or make it much
shorter (copy-bound) or longer (compute-bound), with :func:`calibrate_rounds`
measuring on the same device in the same run. :func:`reference` reproduces every
bit with NumPy.
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import Any

import numpy as np


LCG_MUL = np.uint32(1664525)
LCG_ADD = np.uint32(1013904223)
BLOCK = 256


def reference(x: np.ndarray, rounds: int) -> np.ndarray:
    """What workload_mix computes, in NumPy (uint32 arithmetic wraps mod 2^32)."""
    v = np.array(x, dtype=np.uint32, copy=True)
    for _ in range(rounds):
        v *= LCG_MUL
        v += LCG_ADD
        v ^= v >> np.uint32(13)
    return v


class MixKernel:
    """``compute(stream, x, y)``: y = mix^rounds(x) on uint32 device arrays.

    ``rounds`` may be changed between runs (it is read at each launch)."""

    input_dtype = np.dtype(np.uint32)

    def __init__(self, device: Any, rounds: int = 1, blocks_per_sm: int = 8):
        from ..cuda.compiler import compile_package_kernel
        from ..cuda.hotpath import HotPath, PackedArgs, handle_int

        if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or not 0 <= rounds < 2**31:
            raise ValueError(f"rounds must be an int in [0, 2**31), got {rounds!r}")
        self.rounds = int(rounds)
        self.device = device
        self.kernel = compile_package_kernel("pipeline/workload.cu", device=device).kernel("workload_mix")
        self.max_blocks = device.facts.sm_count * blocks_per_sm
        # The launch is on the pipeline's per-batch hot path: a ctypes cuLaunchKernel
        # with arguments packed once (see cuda/hotpath.py), not cuda.core's launch().
        self._hot = HotPath()
        self._handle_int = handle_int
        self._kernel_handle = handle_int(self.kernel.handle)
        self._args = PackedArgs([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32])
        self._lock = threading.Lock()  # the packed arguments are one set per object

    def grid_for(self, n: int) -> int:
        return max(1, min(self.max_blocks, math.ceil(max(n // 4, 1) / BLOCK)))

    def __call__(self, stream: Any, x: Any, y: Any) -> None:
        if y is None:
            raise ValueError("MixKernel writes an output: use a pipeline with output='same'")
        if x.dtype != self.input_dtype or y.dtype != self.input_dtype or x.size != y.size:
            raise ValueError(f"MixKernel takes uint32 x and y of one size, got {x!r} and {y!r}")
        if x.ptr % 16 or y.ptr % 16:
            raise ValueError("MixKernel needs 16-byte aligned device arrays (uint4 loads)")
        if not 0 <= self.rounds < 2**31:
            raise ValueError(f"rounds must be an int in [0, 2**31), got {self.rounds!r}")
        n = x.size
        grid = self.grid_for(n)
        h = self._handle_int(stream)
        with self._lock:
            self._args.set(x.ptr, y.ptr, n, self.rounds)
            self._hot.launch(self._kernel_handle, grid, BLOCK, self._args, h)


def time_kernel_ms(kernel: MixKernel, stream: Any, x: Any, y: Any, repeat: int = 5) -> float:
    """Median milliseconds of one launch on ``stream`` (events on that stream)."""
    from ..cuda.timing import median, time_on_stream

    return median(time_on_stream(lambda: kernel(stream, x, y), stream, warmup=1, repeat=repeat))


def calibrate_rounds(kernel: MixKernel, stream: Any, x: Any, y: Any, target_ms: float,
                     max_rounds: int = 1 << 16) -> tuple[int, float]:
    """Set ``kernel.rounds`` so that one launch on (x, y) takes about ``target_ms``;
    returns (rounds, measured ms). Time is linear in rounds: fit through two points,
    then refine."""
    kernel.rounds = 0
    t0 = time_kernel_ms(kernel, stream, x, y)
    kernel.rounds = 64
    t1 = time_kernel_ms(kernel, stream, x, y)
    per_round = max((t1 - t0) / 64, 1e-9)
    rounds = int(min(max_rounds, max(0, round((target_ms - t0) / per_round))))
    for attempt in range(4):
        kernel.rounds = rounds
        t = time_kernel_ms(kernel, stream, x, y)
        if rounds == 0 or attempt == 3 or abs(t - target_ms) <= 0.02 * target_ms:
            break
        per_round = max((t - t0) / rounds, 1e-9)
        rounds = int(min(max_rounds, max(0, round((target_ms - t0) / per_round))))
    return rounds, t
