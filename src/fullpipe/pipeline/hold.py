"""Hold a stream for a set time, so that a probe's events time the GPU, not the host.

A chunk="auto" probe runs one batch at a time (tuning.py models each stage from it).
Its H2D is done long before the host has called a framework model, so an event
recorded before the compute call completes at once, and the compute stage would
span the host's Python and launches too: a cheap ``torch.sin`` over 8 MiB chunks
read as 20 GB/s of compute on an H100 host, the tuner took the run for compute-bound,
and it chose chunks that left the run bound by the host instead (session 13).

So a probe launches :class:`StreamHold` on the compute's stream first: one warp
spins on the GPU's clock for about twice the longest compute call seen so far. The
compute's kernels queue behind it, the "compute start" event completes when it
ends, and from there the GPU runs them back to back. A compute that waits for its
stream (``.item()``, a synchronize) waits for the hold, at most ``MAX_HOLD_S``: no
deadlock. A call that outlasts its hold is timed as before, from the hold's end:
its host time is then partly in the compute stage, as without a hold.
"""

from __future__ import annotations

import ctypes
from typing import Any

MIN_HOLD_S = 200e-6
MAX_HOLD_S = 50e-3
FIRST_HOLD_S = 5e-3  # before any call was timed (the first probe batch is a warm-up)


class StreamHold:
    """``hold(stream_handle)``: a one-warp spin kernel of ``seconds()`` on that stream.
    ``saw_call(seconds)`` tells it how long a compute call took."""

    def __init__(self, device: Any):
        from ..cuda.compiler import compile_package_kernel
        from ..cuda.hotpath import HotPath, PackedArgs, handle_int

        self.kernel = compile_package_kernel("pipeline/stamps.cu", device=device).kernel("hold_stream")
        self._hot = HotPath()
        self._handle = handle_int(self.kernel.handle)
        self._args = PackedArgs([ctypes.c_uint64])
        self.longest_call_s = 0.0

    def seconds(self) -> float:
        if self.longest_call_s == 0.0:
            return FIRST_HOLD_S
        return min(max(2.0 * self.longest_call_s + 100e-6, MIN_HOLD_S), MAX_HOLD_S)

    def saw_call(self, seconds: float) -> None:
        self.longest_call_s = max(self.longest_call_s, seconds)

    def __call__(self, stream_h: int) -> None:
        self._args.set(int(self.seconds() * 1e9))
        self._hot.launch(self._handle, 1, 32, self._args, stream_h)
