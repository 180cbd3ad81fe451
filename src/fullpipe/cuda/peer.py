"""Peer access between GPUs of one host: who may touch whose memory, and copies between them.

Two ways to move a buffer from GPU a to GPU b without the host:

- a **peer copy** (``copy_peer``: ``cuMemcpyPeerAsync``), done by a copy engine of the
  stream's device, ordered like any other work on that stream;
- **direct access**: kernels on b read or write a's memory over the link. Plain
  allocations need ``enable_peer_access(b, a)``; memory from a stream-ordered pool needs
  the pool's own grant, ``grant_pool_access(pool_of_a, b)`` (``cuMemPoolSetAccess``, as in
  NVIDIA's streamOrderedAllocationP2P sample): enabling context peer access does not
  cover pool memory.

Ordering across devices needs no host: an event recorded on a's stream can be waited on
by b's stream (``fullpipe.cuda.events.wait``).

    >>> enable_peer_access(1, 0)                    # GPU 1 may touch GPU 0's memory
    >>> copy_peer(dst_ptr, 1, src_ptr, 0, nbytes, stream_on_1)
"""

from __future__ import annotations

from typing import Any

from ..errors import CudaError
from . import driver as drv
from .device import device_index, ensure_current

# Pools take no read-only grant: cuMemPoolSetAccess answers CUDA_ERROR_NOT_SUPPORTED to
# CU_MEM_ACCESS_FLAGS_PROT_READ (seen on H200s, driver 580.159).
ACCESS = ("none", "readwrite")


class PeerAccessError(RuntimeError):
    """Two GPUs cannot reach each other's memory (no link, or the driver refused)."""


_primary: dict[int, Any] = {}


def _ctx(index: int) -> Any:
    """The primary context of device ``index``, retained once. Asked of the device, not
    of the thread: a thread that drives several GPUs (and PyTorch switching devices
    under it) cannot make this the wrong one."""
    ctx = _primary.get(index)
    if ctx is None:
        drv.call("cuInit", 0)
        ctx = _primary[index] = drv.call("cuDevicePrimaryCtxRetain", drv.call("cuDeviceGet", index))
    return ctx


def device_count() -> int:
    drv.call("cuInit", 0)
    return int(drv.call("cuDeviceGetCount"))


def _check_pair(device: Any, peer: Any) -> tuple[int, int]:
    a, b = device_index(device), device_index(peer)
    n = device_count()
    for i in (a, b):
        if not 0 <= i < n:
            raise ValueError(f"device index {i} out of range: this machine has {n} GPU(s)")
    if a == b:
        raise ValueError(f"a device is not its own peer (both are {a})")
    return a, b


def can_access_peer(device: Any, peer: Any) -> bool:
    """Whether work on ``device`` can read and write memory of ``peer`` (cuDeviceCanAccessPeer)."""
    a, b = _check_pair(device, peer)
    return bool(drv.call("cuDeviceCanAccessPeer", a, b))


_enabled: set[tuple[int, int]] = set()


def enable_peer_access(device: Any, peer: Any) -> None:
    """Let kernels and copies on ``device`` touch plain allocations of ``peer``.
    Idempotent. Raises PeerAccessError when the pair cannot reach each other."""
    a, b = _check_pair(device, peer)
    if (a, b) in _enabled:
        return
    if not drv.call("cuDeviceCanAccessPeer", a, b):
        raise PeerAccessError(f"GPU {a} cannot access GPU {b}'s memory (cuDeviceCanAccessPeer says no: "
                              "no NVLink or PCIe peer path between them); copy through the host instead")
    peer_ctx = _ctx(b)
    ensure_current(a, force=True)
    try:
        drv.call("cuCtxEnablePeerAccess", peer_ctx, 0)
    except CudaError as exc:
        if exc.name != "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED":
            raise PeerAccessError(f"enabling GPU {a} -> GPU {b} peer access failed: {exc}") from exc
    _enabled.add((a, b))


def copy_peer(dst_ptr: int, dst_device: Any, src_ptr: int, src_device: Any, nbytes: int, stream: Any) -> None:
    """Copy ``nbytes`` from ``src_ptr`` on ``src_device`` to ``dst_ptr`` on ``dst_device``,
    enqueued on ``stream`` (cuMemcpyPeerAsync; the copy engine of the stream's device does
    it). The source must be ready on ``stream`` (wait for its producer's event first)."""
    from cuda.bindings import driver

    from .hotpath import handle_int

    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if nbytes == 0:
        return
    a, b = device_index(dst_device), device_index(src_device)
    dst_ctx, src_ctx = _ctx(a), _ctx(b)
    drv.call("cuMemcpyPeerAsync", driver.CUdeviceptr(int(dst_ptr)), dst_ctx, driver.CUdeviceptr(int(src_ptr)),
             src_ctx, int(nbytes), driver.CUstream(handle_int(stream)))


def _location(index: int) -> Any:
    from cuda.bindings import driver

    loc = driver.CUmemLocation()
    loc.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    loc.id = index
    return loc


def grant_pool_access(pool: Any, device: Any, access: str = "readwrite") -> None:
    """Let kernels and copies on ``device`` use memory from ``pool`` (a fullpipe DevicePool
    of another GPU): ``"readwrite"`` or ``"none"`` (cuMemPoolSetAccess).
    Applies to the pool's present and future allocations."""
    from cuda.bindings import driver

    if access not in ACCESS:
        raise ValueError(f"access must be one of {', '.join(ACCESS)}, got {access!r}")
    owner = device_index(pool.device)
    _, peer = _check_pair(owner, device)
    if access != "none" and not drv.call("cuDeviceCanAccessPeer", peer, owner):
        raise PeerAccessError(f"GPU {peer} cannot access GPU {owner}'s memory, so it cannot use that GPU's pool")
    flags = {"none": driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE,
             "readwrite": driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE}[access]
    desc = driver.CUmemAccessDesc()
    desc.location = _location(peer)
    desc.flags = flags
    ensure_current(owner, force=True)
    drv.call("cuMemPoolSetAccess", pool.handle, [desc], 1)


def pool_access(pool: Any, device: Any) -> str:
    """What ``device`` may do with memory from ``pool``: "none", "read" or "readwrite"."""
    from cuda.bindings import driver

    index = device_index(device)
    ensure_current(device_index(pool.device), force=True)
    flags = drv.call("cuMemPoolGetAccess", pool.handle, _location(index))
    return {int(driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE): "none",
            int(driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READ): "read",
            int(driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE): "readwrite"}[int(flags)]
