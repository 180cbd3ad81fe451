"""CPU tests of the pool's logic that needs no GPU: argument checks (which must come
before any driver call), out-of-memory recognition, the statistics record."""

from __future__ import annotations

import pytest

from fullpipe.cuda import pool as pool_mod
from fullpipe.cuda.pool import UINT64_MAX, DevicePool, PoolStats, parse_threshold
from fullpipe.errors import CudaError


@pytest.mark.parametrize("value, expected", [(0, 0), (1 << 30, 1 << 30), ("max", UINT64_MAX)])
def test_release_threshold_values(value, expected):
    assert parse_threshold(value) == expected


@pytest.mark.parametrize("value", [-1, "min", "MAX", 1.5, True, None])
def test_bad_release_threshold_is_a_value_error(value):
    with pytest.raises(ValueError, match="release_threshold must be 0, a byte count or 'max'"):
        parse_threshold(value)


@pytest.mark.parametrize("kwargs, match", [
    ({"release_threshold": -5}, "release_threshold"),
    ({"max_size": 0}, "max_size"),
    ({"max_size": -1}, "max_size"),
    ({"max_size": 1.0}, "max_size"),
])
def test_constructor_rejects_bad_options_before_touching_the_driver(kwargs, match):
    # object() is no device: reaching the driver would fail differently.
    with pytest.raises(ValueError, match=match):
        DevicePool(object(), **kwargs)


@pytest.mark.parametrize("nbytes", [0, -1, 1.5, True, "10"])
def test_allocate_rejects_bad_sizes_before_touching_the_driver(nbytes):
    p = DevicePool.__new__(DevicePool)
    with pytest.raises(ValueError, match="positive int"):
        p.allocate(nbytes, object())


def test_a_stream_is_required():
    with pytest.raises(TypeError, match="stream is required"):
        pool_mod._core_stream(None)
    with pytest.raises(TypeError, match="expected a stream"):
        pool_mod._core_stream(42)


def test_out_of_memory_is_recognised_through_the_exception_chain():
    oom = CudaError("cuMemAllocFromPoolAsync", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
    assert pool_mod._is_out_of_memory(oom)
    # cuda.core's own error text, wrapped by fullpipe.cuda.driver.translated
    inner = RuntimeError("CUDA_ERROR_OUT_OF_MEMORY: out of memory")
    outer = CudaError("cuMemAllocFromPoolAsync", None, "CUDA_ERROR_OUT_OF_MEMORY", str(inner))
    outer.__cause__ = inner
    assert pool_mod._is_out_of_memory(outer)
    other = CudaError("cuMemAllocFromPoolAsync", 1, "CUDA_ERROR_INVALID_VALUE", "invalid argument")
    assert not pool_mod._is_out_of_memory(other)


def test_trim_rejects_negative_keep():
    p = DevicePool.__new__(DevicePool)
    with pytest.raises(ValueError, match="keep_bytes"):
        p.trim(-1)


def test_pool_stats_record_keeps_the_old_fields_first():
    s = PoolStats(1, 2, 3, 4, 5)  # the original positional fields still work
    assert s.as_dict() == {"reserved_bytes": 1, "reserved_high_bytes": 2, "used_bytes": 3, "used_high_bytes": 4,
                           "allocations": 5, "allocations_high": 0, "allocations_total": 0, "oom_retries": 0}


def test_free_array_rejects_foreign_arrays():
    import numpy as np

    from fullpipe.cuda.memory import DeviceArray

    p = DevicePool.__new__(DevicePool)
    with pytest.raises(TypeError, match="DevicePool.empty"):
        p.free_array(DeviceArray(0x1000, (4,), np.float32, owner=None), object())
    with pytest.raises(TypeError, match="DevicePool.empty"):
        p.free_array(np.zeros(4), object())
