"""CPU tests of the ctypes hot path: argument packing, and the fallback that forwards
to the cuda.bindings-shaped driver module (used with the fake driver in tests)."""

from __future__ import annotations

import ctypes
import types

import pytest

import fullpipe.cuda.driver as fdriver
from fullpipe.cuda.hotpath import HotPath, PackedArgs, handle_int
from fullpipe.errors import CudaError


def test_packed_args_point_at_their_values():
    args = PackedArgs([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32])
    args.set(0x1000, 2**40 + 3, -7)
    ptrs = (ctypes.c_void_p * 3).from_address(args.address)
    assert ctypes.c_uint64.from_address(ptrs[0]).value == 0x1000
    assert ctypes.c_uint64.from_address(ptrs[1]).value == 2**40 + 3
    assert ctypes.c_int32.from_address(ptrs[2]).value == -7
    args.set(1, 2, 3)  # reused storage: same addresses, new values
    assert ctypes.c_int32.from_address(ptrs[2]).value == 3
    with pytest.raises(ValueError, match="takes 3 arguments"):
        args.set(1, 2)


def test_handle_int_accepts_ints_objects_and_stream_protocol():
    class Core:
        handle = 1234

    class Torchish:
        def __cuda_stream__(self):
            return (0, 99)

    assert handle_int(5) == 5
    assert handle_int(Core()) == 1234
    assert handle_int(Torchish()) == 99


def test_fallback_forwards_to_driver_module_and_raises(monkeypatch):
    calls = []

    def ok(*args):
        calls.append(args)
        return (0,)

    fake = types.SimpleNamespace(
        __name__="fake", cuMemcpyHtoDAsync=ok, cuEventRecord=ok, cuMemFreeAsync=ok,
        cuMemAllocFromPoolAsync=lambda n, pool, s: (0, 0xABC00),
        cuMemcpyDtoHAsync=lambda *a: (1,),  # CUDA_ERROR_INVALID_VALUE
        cuGetErrorName=lambda e: (0, b"CUDA_ERROR_INVALID_VALUE"),
        cuGetErrorString=lambda e: (0, b"invalid argument"),
    )
    monkeypatch.setattr(fdriver, "driver", lambda: fake)
    hot = HotPath()
    assert not hot.native  # never mixes a fake driver with the real libcuda
    hot.memcpy_htod(1, 2, 3, "s")
    hot.event_record("e", "s")
    assert hot.alloc_from_pool(16, "pool", "s") == 0xABC00
    assert calls == [(1, 2, 3, "s"), ("e", "s")]
    with pytest.raises(CudaError, match="cuMemcpyDtoHAsync"):
        hot.memcpy_dtoh(1, 2, 3, "s")
