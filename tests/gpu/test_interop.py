"""GPU tests of cuda/interop.py: library streams that are fullpipe's streams, zero-copy
device views (bfloat16 included), pinned torch tensors through host_view/like_input."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from fullpipe.cuda.interop import as_cupy, as_torch, cupy_stream, host_view, like_input, torch_stream
from fullpipe.cuda.memory import is_pinned
from fullpipe.cuda.pool import DevicePool
from fullpipe.cuda.streams import create_stream

pytestmark = pytest.mark.gpu


@pytest.fixture
def torch():
    t = pytest.importorskip("torch")
    if not t.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    return t


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture
def dpool(device):
    p = DevicePool(device, release_threshold="max")
    yield p
    p.close()


def test_torch_stream_is_our_stream_and_uses_no_deprecated_api(device, torch):
    s = create_stream(device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ExternalStream's deprecation would fail here
        ts = torch_stream(s)
    assert ts.cuda_stream == int(s.handle) and ts.device.index == device.index
    a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    with torch.cuda.stream(ts):
        assert torch.cuda.current_stream().cuda_stream == int(s.handle)
        b = a * 2 + 1
    s.sync()  # waiting for fullpipe's stream is enough: the work ran there
    assert torch.equal(b.cpu(), torch.arange(1 << 20, dtype=torch.float32) * 2 + 1)
    del a, b  # torch's allocator remembers the stream of b: drop its blocks before the stream goes
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    s.close()


def test_torch_stream_from_a_thread_without_a_context(device, torch):
    s = create_stream(device)
    got = {}

    def worker():
        try:
            got["ptr"] = torch_stream(s).cuda_stream
        except BaseException as exc:  # noqa: BLE001 - checked below
            got["error"] = exc

    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert "error" not in got, got.get("error")
    assert got["ptr"] == int(s.handle)
    s.close()


def test_cupy_stream_is_our_stream(device, cupy):
    s = create_stream(device)
    cs = cupy_stream(s)
    assert cs.ptr == int(s.handle)
    with cs:
        assert cupy.cuda.get_current_stream().ptr == int(s.handle)
        x = cupy.arange(1000, dtype=cupy.int64) * 3
    s.sync()
    np.testing.assert_array_equal(cupy.asnumpy(x), np.arange(1000) * 3)
    del x  # CuPy's pool remembers the stream of x: drop its blocks before the stream goes
    cupy.get_default_memory_pool().free_all_blocks()
    s.close()


def test_as_torch_is_a_view_of_the_device_array(device, torch, dpool):
    s = create_stream(device)
    a = dpool.empty((64, 33), np.float32, s)
    s.sync()
    t = as_torch(a)
    assert t.data_ptr() == a.ptr and t.shape == (64, 33) and t.dtype == torch.float32
    t.copy_(torch.arange(64 * 33, dtype=torch.float32, device="cuda").reshape(64, 33))
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.to_numpy(s), np.arange(64 * 33, dtype=np.float32).reshape(64, 33))
    dpool.free_array(a, s)
    s.sync()
    s.close()


def test_as_torch_bfloat16_from_the_bits(device, torch, dpool):
    s = create_stream(device)
    want = (torch.randn(1000) * 10).to(torch.bfloat16)
    bits = want.view(torch.int16).numpy().view(np.uint16)
    a = dpool.empty(1000, np.uint16, s)
    a.copy_from_host(np.ascontiguousarray(bits), s)
    s.sync()
    t = as_torch(a, torch_dtype=torch.bfloat16)
    assert t.dtype == torch.bfloat16 and t.data_ptr() == a.ptr
    assert torch.equal(t.cpu(), want)
    with pytest.raises(ValueError, match="element sizes differ"):
        as_torch(a, torch_dtype=torch.float32)
    dpool.free_array(a, s)
    s.sync()
    s.close()


def test_as_cupy_is_a_view_of_the_device_array(device, cupy, dpool):
    s = create_stream(device)
    a = dpool.empty(5000, np.int32, s)
    s.sync()
    c = as_cupy(a)
    assert c.data.ptr == a.ptr and c.dtype == np.int32
    c[:] = cupy.arange(5000, dtype=cupy.int32)
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(a.to_numpy(s), np.arange(5000, dtype=np.int32))
    dpool.free_array(a, s)
    s.sync()
    s.close()


def test_pinned_torch_tensor_stays_pinned_through_host_view(device, torch):
    x = torch.empty(1 << 16, dtype=torch.bfloat16, pin_memory=True)
    x.copy_(torch.randn(1 << 16).to(torch.bfloat16))
    v, kind = host_view(x)
    assert is_pinned(v) and v.__array_interface__["data"][0] == x.data_ptr()
    y = like_input(v, kind)  # what a pass-through pipeline gives back
    assert y.is_pinned() and y.dtype == torch.bfloat16 and torch.equal(y, x)


def test_cuda_tensors_are_refused_as_host_input(device, torch):
    with pytest.raises(TypeError, match=r"device array \(torch\.Tensor\).*tensor\.cpu\(\)"):
        host_view(torch.zeros(3, device="cuda"))
    with pytest.raises(TypeError, match="DeviceArray"):
        as_torch(torch.zeros(2, device="cuda"))


def test_cupy_arrays_are_refused_as_host_input(device, cupy):
    with pytest.raises(TypeError, match=r"cupy\.asnumpy"):
        host_view(cupy.zeros(3))
    with pytest.raises(TypeError, match="DeviceArray"):
        as_cupy(cupy.zeros(3))
