"""One device buffer per lane for a run: the eager one-stream path's batch memory.

With one stream per lane, every step of a lane's batches is on that stream, in
enqueue order: batch j's compute and D2H come before batch j+N's H2D (the
executor enqueues at most N-1 fronts ahead). So batch j+N may reuse batch j's
device memory with no event and no allocation: stream order alone makes it safe,
as it does for the stream-ordered pool's own reuse. A run takes one buffer per
lane from the pipeline's pool, sized for its largest batch, and gives them back
in stream order at its end; per batch that saves the pool's allocate and free
(two driver calls and their Python: ~7.5 us on an H100 host, issue 14), and the
lane's address stays the same for the whole run, so a tensor function's input
view can be cut from one tensor made once per lane (tensors.TensorCompute).

Not used where a lane's steps are on several streams (``copy_streams=True``:
protocol.DeferredFree). Graphs use them too, held across runs: graphs.py (direct
staging, a buffer per stream its graphs share) and run_graphs.py (a whole run's
lanes, allocated on lane 0's stream, where the graph is launched).
"""

from __future__ import annotations

from typing import Any, Sequence


class LaneBuffers:
    """``allocate_ptr``/``free_ptr`` with the pool's signature, answering each lane's
    stream with that lane's buffer. ``handles``: the lanes' stream handles (as the
    protocol passes them). ``order_h``: the one stream every buffer is allocated and
    freed in the order of (None: each lane's own stream)."""

    def __init__(self, pool: Any, handles: Sequence[Any], order_h: Any = None):
        self.pool = pool
        self.handles = list(handles)
        self.order_h = order_h
        self.nbytes = 0
        self._ptr: dict[Any, int] = {}

    def take(self, nbytes: int) -> None:
        """One buffer of at least ``nbytes`` per lane, from the pool, in stream order on
        the lane's stream (or ``order_h``)."""
        for h in self.handles:
            self._ptr[h] = self.pool.allocate_ptr(nbytes, h if self.order_h is None else self.order_h)
        self.nbytes = nbytes

    @property
    def held_bytes(self) -> int:
        return self.nbytes * len(self._ptr)

    def __len__(self) -> int:
        return len(self._ptr)

    def allocate_ptr(self, nbytes: int, stream_h: Any) -> int:
        if nbytes > self.nbytes:  # the run sized its lanes for its largest batch: a bug if reached
            raise RuntimeError(f"lane buffer of {self.nbytes} bytes asked for {nbytes}")
        return self._ptr[stream_h]

    def free_ptr(self, ptr: int, stream_h: Any) -> None:
        """A batch is done with its lane's buffer: nothing to do (the next batch of the lane
        reuses it in stream order)."""

    def addresses(self) -> list[tuple[int, int]]:
        """(device address, bytes) of each lane's buffer, in lane order."""
        return [(self._ptr[h], self.nbytes) for h in self.handles]

    def give_back(self) -> int:
        """Free every lane's buffer in stream order on its lane (after everything the run
        enqueued there). Returns how many were freed; safe to call twice."""
        freed = 0
        while self._ptr:
            h, ptr = self._ptr.popitem()
            self.pool.free_ptr(ptr, h if self.order_h is None else self.order_h)
            freed += 1
        self.nbytes = 0
        return freed
