"""Kernel launches: grid in blocks, optional cluster and cooperative launch, and the
dynamic-shared-memory opt-in done for you.

Blocks get more than 48 KiB of dynamic shared memory only after
``cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)``;
:func:`launch` sets it the first time a kernel asks for more.
"""

from __future__ import annotations

from typing import Any, Sequence

from . import driver as drv
from .device import ensure_current, ensure_current_for_stream

DEFAULT_DYNAMIC_SMEM_LIMIT = 48 * 1024
_opted_in: dict[tuple[int, int], int] = {}  # (kernel handle, device) -> bytes allowed


def _dims(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"{what} must be 1 to 3 positive ints, got {value!r}")
    return tuple(dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def set_max_dynamic_shared_memory(kernel: Any, nbytes: int, device_index: int = 0) -> None:
    """Allow ``kernel`` up to ``nbytes`` of dynamic shared memory per block."""
    from cuda.bindings import driver

    key = (int(kernel.handle), device_index)
    if _opted_in.get(key, DEFAULT_DYNAMIC_SMEM_LIMIT) >= nbytes:
        return
    dev = drv.call("cuDeviceGet", device_index)
    drv.call(
        "cuKernelSetAttribute",
        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        nbytes,
        kernel.handle,
        dev,
    )
    _opted_in[key] = nbytes


def launch(
    stream: Any,
    kernel: Any,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    *args: Any,
    shared_mem: int = 0,
    cluster: int | Sequence[int] | None = None,
    cooperative: bool = False,
    device_index: int | None = None,
) -> None:
    """Launch ``kernel<<<grid, block, shared_mem, stream>>>(*args)``.

    ``grid`` counts blocks, as in CUDA C++, also when ``cluster`` is given (each
    grid dimension must then be a multiple of the cluster's). Arguments are
    cuda.core Buffers, NumPy scalars (``np.int32(n)``), or ints for pointers.
    """
    from cuda.core import LaunchConfig
    from cuda.core import launch as core_launch

    grid3 = _dims(grid, "grid")
    block3 = _dims(block, "block")
    # A kernel from a context-independent library (cuLibraryLoadData) runs in the
    # context current in this thread, which must be the stream's: ``device_index`` names
    # it (a thread that drives several GPUs must say which); without it, a thread with
    # no context gets the stream's device's.
    if device_index is None:
        ensure_current_for_stream(stream)
    else:
        ensure_current(device_index)
    if not isinstance(shared_mem, int) or shared_mem < 0:
        raise ValueError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
    if shared_mem > DEFAULT_DYNAMIC_SMEM_LIMIT:
        set_max_dynamic_shared_memory(kernel, shared_mem, device_index or 0)
    config: dict[str, Any] = {"block": block3, "shmem_size": shared_mem}
    if cluster is not None:
        cluster3 = _dims(cluster, "cluster")
        if any(g % c for g, c in zip(grid3, cluster3)):
            raise ValueError(f"grid {grid3} is not a multiple of cluster {cluster3} in every dimension")
        config["cluster"] = cluster3
        config["grid"] = tuple(g // c for g, c in zip(grid3, cluster3))  # cuda.core counts clusters
    else:
        config["grid"] = grid3
    if cooperative:
        config["is_cooperative"] = True
    with drv.translated("cuLaunchKernelEx"):
        core_launch(stream, LaunchConfig(**config), kernel, *args)
