"""A copy driven by the SMs, for memory on another GPU (peer_copy.cu).

``copy_sm(dst_ptr, src_ptr, nbytes, stream, device=d)`` runs on GPU ``d``: its SMs load
from ``src`` and store to ``dst``, 16 bytes per load and store. One side may be a peer
GPU's memory that ``d`` may access (``fullpipe.cuda.peer.enable_peer_access(d, peer)``
for cuMemAlloc memory, ``grant_pool_access(pool, d)`` for a pool's): *push* when
``dst`` is the remote side, *pull* when ``src`` is. A copy engine does the same job
with ``cuMemcpyPeerAsync``; the SM copy costs SMs but needs no engine, and shows what
the link carries when the SMs drive it.

Any ``nbytes`` and any alignment: :func:`plan` cuts the copy into a head (up to dst's
next boundary of the word width), a body of whole words and a tail, and picks the widest
word (16, 8, 4, 2 or 1 bytes) that both pointers are equally aligned for.

    python -m fullpipe.kernels.peer_copy --selftest   # small checked copies (sanitizers)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ..cuda import compiler
from ..cuda.device import device_index, ensure_current
from ..cuda.launch import launch

SOURCE = "kernels/peer_copy.cu"
THREADS = 256  # PEER_COPY_THREADS in the .cu
UNROLL = 4  # PEER_COPY_UNROLL: words in flight per thread
WIDTHS = (16, 8, 4, 2, 1)
HOLD_KERNEL = "peer_copy_hold"


def kernel_name(width: int) -> str:
    return f"peer_copy_w{width}"


@dataclasses.dataclass(frozen=True)
class CopyPlan:
    """How one copy is launched: ``head`` bytes, ``words`` words of ``width`` bytes, then
    ``tail`` bytes, on ``grid`` blocks of THREADS threads."""

    width: int
    head: int
    words: int
    tail: int
    grid: int

    @property
    def nbytes(self) -> int:
        return self.head + self.words * self.width + self.tail

    @property
    def kernel(self) -> str:
        return kernel_name(self.width)


def plan(dst_ptr: int, src_ptr: int, nbytes: int, *, sm_count: int, blocks_per_sm: int) -> CopyPlan:
    """The launch of one copy (pure: testable without a GPU).

    Width: the widest of 16, 8, 4, 2, 1 that divides ``dst_ptr - src_ptr``, so that the
    words of both sides are aligned at once. Head: bytes up to dst's next multiple of the
    width (fewer if the copy is shorter). Grid: enough blocks for one word per thread per
    unrolled step, at most ``sm_count x blocks_per_sm`` (grid-stride beyond), at least one
    (the head and tail are copied by the first threads of the grid)."""
    for name, v in (("dst_ptr", dst_ptr), ("src_ptr", src_ptr), ("nbytes", nbytes), ("sm_count", sm_count),
                    ("blocks_per_sm", blocks_per_sm)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if sm_count < 1 or blocks_per_sm < 1:
        raise ValueError(f"sm_count and blocks_per_sm must be >= 1, got {sm_count} and {blocks_per_sm}")
    diff = abs(int(dst_ptr) - int(src_ptr))
    width = next(w for w in WIDTHS if diff % w == 0)
    head = min((-int(dst_ptr)) % width, nbytes)
    words = (nbytes - head) // width
    tail = nbytes - head - words * width
    per_block = THREADS * UNROLL
    grid = max(1, min(sm_count * blocks_per_sm, -(-words // per_block)))
    return CopyPlan(width, head, words, tail, grid)


@functools.lru_cache(maxsize=None)
def _module(arch: str):
    return compiler.compile_package_kernel(SOURCE, arch=arch)


@functools.lru_cache(maxsize=None)
def _device_shape(index: int) -> tuple[str, int, int]:
    """(arch, SM count, resident blocks per SM of the 16-byte kernel) of a device, once."""
    from cuda.core import Device as CoreDevice

    ensure_current(index)  # the occupancy query asks the current context
    core = CoreDevice(index)
    cc = core.compute_capability
    arch = f"sm_{cc.major}{cc.minor}" + ("a" if cc.major >= 9 else "")
    kernel = _module(arch).kernel(kernel_name(16))
    resident = int(kernel.occupancy.max_active_blocks_per_multiprocessor(THREADS, 0))
    return arch, int(core.properties.multiprocessor_count), max(1, resident)


def copy_sm(dst_ptr: int, src_ptr: int, nbytes: int, stream: Any, *, device: Any) -> CopyPlan:
    """Copy ``nbytes`` from ``src_ptr`` to ``dst_ptr`` with the SMs of ``device`` (an int
    or a fullpipe Device), enqueued on ``stream`` (a stream of ``device``). Either pointer
    may be a peer GPU's memory that ``device`` may access. The ranges must not overlap.
    Returns the launch's :class:`CopyPlan` (nothing is launched for ``nbytes == 0``)."""
    if stream is None:
        raise TypeError("stream is required (a stream of `device`)")
    index = device_index(device)
    for name, p in (("dst_ptr", dst_ptr), ("src_ptr", src_ptr)):
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p <= 0:
            raise ValueError(f"{name} must be a device pointer (a positive int), got {p!r}")
    if isinstance(nbytes, (int, np.integer)) and not isinstance(nbytes, bool) and nbytes > 0 \
            and int(dst_ptr) < int(src_ptr) + nbytes and int(src_ptr) < int(dst_ptr) + nbytes:
        raise ValueError("source and destination overlap: copy_sm copies between separate buffers")
    arch, sm_count, resident = _device_shape(index)
    p = plan(int(dst_ptr), int(src_ptr), nbytes, sm_count=sm_count, blocks_per_sm=resident)
    if p.nbytes == 0:
        return p
    ensure_current(index)  # the launch runs in this thread's context: it must be `device`'s
    launch(stream, _module(arch).kernel(p.kernel), p.grid, THREADS, np.uint64(src_ptr), np.uint64(dst_ptr),
           np.uint32(p.head), np.uint64(p.words), np.uint32(p.tail), device_index=index)
    return p


def hold(stream: Any, ns: int, *, device: Any) -> None:
    """Keep ``stream`` busy for ``ns`` nanoseconds (one thread spins): work enqueued
    behind it starts together once the host has enqueued all of it."""
    index = device_index(device)
    arch, _, _ = _device_shape(index)
    ensure_current(index)
    launch(stream, _module(arch).kernel(HOLD_KERNEL), 1, 32, np.uint64(ns), device_index=index)


# --------------------------------------------------------------------------- self-test
def _selftest(argv: list[str] | None = None) -> int:
    """Small checked copies on GPU 0 (and GPU 0 <-> 1 when there are two and they may
    access each other): every alignment case, poisoned destination, every byte checked.
    For compute-sanitizer: ``compute-sanitizer python -m fullpipe.kernels.peer_copy --selftest``."""
    import argparse

    from ..cuda import driver as drv
    from ..cuda.device import Device
    from ..cuda.memory import copy_d2h, copy_h2d, memset_d8, pinned_empty
    from ..cuda.streams import create_stream

    ap = argparse.ArgumentParser(prog="python -m fullpipe.kernels.peer_copy")
    ap.add_argument("--selftest", action="store_true")
    ap.parse_args(argv)
    drv.call("cuInit", 0)
    count = int(drv.call("cuDeviceGetCount"))
    pairs = [(0, 0)]
    if count >= 2:
        from ..cuda.peer import can_access_peer, enable_peer_access

        if can_access_peer(0, 1) and can_access_peer(1, 0):
            enable_peer_access(0, 1)
            enable_peer_access(1, 0)
            pairs += [(0, 1), (1, 0)]  # (src device, dst device); run on 0: push, then pull
    size = 1 << 20
    rng = np.random.default_rng(5)
    host = pinned_empty(size + 64, np.uint8)
    back = pinned_empty(size + 64, np.uint8)
    host[:] = rng.integers(0, 256, host.size, dtype=np.uint8)
    bad = 0
    for src_dev, dst_dev in pairs:
        devs = {d: Device(d) for d in {src_dev, dst_dev}}
        ensure_current(src_dev)
        src = int(drv.call("cuMemAlloc", size + 64))
        s_src = create_stream(devs[src_dev])
        copy_h2d(src, host, s_src)
        s_src.sync()
        ensure_current(dst_dev)
        dst = int(drv.call("cuMemAlloc", size + 64))
        s_dst = create_stream(devs[dst_dev])
        for run_on in sorted({src_dev, dst_dev}):
            stream = s_src if run_on == src_dev else s_dst
            for n, so, do in ((size, 0, 0), (size - 3, 0, 0), (1000, 5, 5), (777, 3, 11), (4099, 8, 0),
                              (15, 1, 1), (1, 7, 0), (0, 0, 0)):
                ensure_current(dst_dev)
                memset_d8(dst, 0xA5, size + 64, s_dst)
                s_dst.sync()
                copy_sm(dst + do, src + so, n, stream, device=run_on)
                stream.sync()
                ensure_current(dst_dev)
                copy_d2h(back, dst, s_dst)
                s_dst.sync()
                want = np.full(size + 64, 0xA5, np.uint8)
                want[do:do + n] = host[so:so + n]
                ok = np.array_equal(np.asarray(back), want)
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {src_dev}->{dst_dev} on GPU {run_on}: {n} bytes, "
                      f"src+{so}, dst+{do}: {plan(dst + do, src + so, n, sm_count=1, blocks_per_sm=1).kernel}")
        ensure_current(dst_dev)
        drv.call("cuMemFree", dst)
        ensure_current(src_dev)
        drv.call("cuMemFree", src)
    print("selftest:", "all copies right" if not bad else f"{bad} wrong copies")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(_selftest())
