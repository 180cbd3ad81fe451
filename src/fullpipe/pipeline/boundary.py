"""A pipeline stage boundary between two GPUs of one host, with no host wait in the loop.

The producer (GPU ``src``) finishes a buffer on its stream and records an event; the
boundary moves the buffer to the consumer (GPU ``dst``), whose stream waits on the
boundary's event before it reads. Neither compute stream waits for the copy itself.

Two ways across (``mode``):

- ``"copy"``: a peer copy (``cuMemcpyPeerAsync``) on the boundary's own stream on
  ``src``, so the copy engines move it while both GPUs' SMs compute. The destination is
  a buffer on ``dst`` (e.g. from its stream-ordered pool, which ``src`` is granted
  access to).
- ``"pull"``: ``dst``'s SMs read the source buffer in place over the link and write
  their local buffer (fullpipe's SM copy kernel), on ``dst``'s own stream. The source
  must be readable by ``dst``: a pool granted with ``grant_pool_access`` (what this
  class does for the pool it is given) or a plain allocation with peer access enabled.

    b = PeerBoundary(0, 1, src_pool=pool0, dst_pool=pool1)
    done = b.send(src_ptr, dst_ptr, nbytes, after=[ready_on_0, allocated_on_1], stream=stream_on_1)
    events.wait(stream_on_1, done)           # the consumer reads dst_ptr after this
    pool0.free(src_buf, b.stream)            # b.stream (on src) reaches this after the move
"""

from __future__ import annotations

from typing import Any, Sequence

from ..cuda import events
from ..cuda.device import Device, device_index, ensure_current
from ..cuda.peer import enable_peer_access, grant_pool_access
from ..cuda.streams import create_stream

MODES = ("copy", "pull")


class PeerBoundary:
    def __init__(self, src: Any, dst: Any, *, src_pool: Any = None, dst_pool: Any = None, mode: str = "copy"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.src, self.dst, self.mode = device_index(src), device_index(dst), mode
        if self.src == self.dst:
            raise ValueError(f"a boundary joins two different GPUs (both are {self.src})")
        if mode == "copy":
            # The copy engine of src writes dst's memory.
            enable_peer_access(self.src, self.dst)
            if dst_pool is not None:
                grant_pool_access(dst_pool, self.src)
        else:
            # dst's SMs read src's memory.
            enable_peer_access(self.dst, self.src)
            if src_pool is not None:
                grant_pool_access(src_pool, self.dst)  # pools have no read-only grant (CUDA_ERROR_NOT_SUPPORTED)
        # A stream on src that reaches each send's point once the move is done: "copy"
        # runs the copies there; with "pull" it only waits for them. Free the source on it.
        ensure_current(self.src, force=True)  # a stream belongs to the current context
        self.stream = create_stream(Device(self.src))
        self.copies = 0
        self.bytes = 0

    def send(self, src_ptr: int, dst_ptr: int, nbytes: int, *, after: Sequence[Any], stream: Any = None) -> Any:
        """Move ``nbytes`` from ``src_ptr`` (on ``src``) to ``dst_ptr`` (on ``dst``) once every
        event in ``after`` has happened (the producer's "ready", the destination's
        allocation, ...). Returns the event after which ``dst_ptr`` holds the data and
        ``src_ptr`` may be freed or reused (on :attr:`stream`, which follows the move).
        ``stream``: the consumer's stream, needed by ``"pull"`` (the copy runs there);
        ``"copy"`` uses the boundary's own stream."""
        # Events and copies belong to the current context: make it the stream's device's
        # (forced: PyTorch may have switched this thread's device behind fullpipe's record).
        if self.mode == "copy":
            from ..cuda.peer import copy_peer

            ensure_current(self.src, force=True)
            for e in after:
                events.wait(self.stream, e)
            copy_peer(dst_ptr, self.dst, src_ptr, self.src, nbytes, self.stream)
            done = events.record(self.stream)
        else:
            if stream is None:
                raise ValueError("mode='pull' runs on the consumer's stream: pass stream=")
            from ..kernels.peer_copy import copy_sm

            ensure_current(self.dst, force=True)
            for e in after:
                events.wait(stream, e)
            copy_sm(dst_ptr, src_ptr, nbytes, stream, device=self.dst)
            done = events.record(stream)
            events.wait(self.stream, done)
        self.copies += 1
        self.bytes += nbytes
        return done
