"""CPU tests of the host side of cuda/interop.py: views without copies, the kind
remembered, outputs given back as the input's kind (bfloat16 included)."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe.cuda.interop import BUFFER, NUMPY, host_view, like_input


def test_numpy_passes_through_untouched():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    v, kind = host_view(x)
    assert v is x and kind == NUMPY
    out = np.zeros(3)
    assert like_input(out, kind) is out


def test_buffer_protocol_objects_are_viewed_not_copied():
    raw = bytearray(range(16))
    v, kind = host_view(raw)
    assert kind == BUFFER and v.dtype == np.uint8 and v.shape == (16,)
    raw[3] = 200
    assert v[3] == 200  # same memory
    ro, _ = host_view(b"abcd")
    assert not ro.flags.writeable
    assert isinstance(like_input(np.ones(2), kind), np.ndarray)


@pytest.mark.parametrize("bad", [[1, 2, 3], 3.0, None, "text"])
def test_other_objects_are_type_errors(bad):
    with pytest.raises(TypeError, match="NumPy array, a torch CPU tensor or an object with the buffer protocol"):
        host_view(bad)


def test_device_arrays_are_refused_with_what_to_do():
    class FakeCupyArray:
        __module__ = "cupy._core.core"

        @property
        def __cuda_array_interface__(self):
            return {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(TypeError, match=r"device array \(cupy\.FakeCupyArray\).*cupy\.asnumpy"):
        host_view(FakeCupyArray(), "batch 3")


# --------------------------------------------------------------------------- torch
@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_torch_cpu_tensor_is_a_zero_copy_view_and_comes_back_as_a_tensor(torch):
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    v, kind = host_view(t)
    assert kind.library == "torch" and kind.torch_dtype == torch.float32 and not kind.reinterpreted
    assert v.dtype == np.float32 and v.shape == (4, 5)
    t[1, 2] = -7
    assert v[1, 2] == -7  # same memory
    out = np.empty((4, 5), np.float32)
    out[:] = v * 2
    y = like_input(out, kind)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    y[0, 0] = 123
    assert out[0, 0] == 123  # the tensor is the output's memory
    assert torch.equal(y[1:], (t * 2)[1:])


def test_tensor_that_requires_grad_is_viewed_without_a_copy(torch):
    w = torch.randn(8, requires_grad=True)
    v, kind = host_view(w)
    assert v.__array_interface__["data"][0] == w.data_ptr()


@pytest.mark.parametrize("name, carrier", [
    ("bfloat16", np.uint16),
    ("float8_e4m3fn", np.uint8),
    ("float8_e5m2", np.uint8),
])
def test_dtypes_numpy_lacks_travel_as_bits_and_come_back_typed(torch, name, carrier):
    dtype = getattr(torch, name)
    t = (torch.randn(64, 3) * 4).to(dtype)
    v, kind = host_view(t)
    assert kind.reinterpreted and kind.torch_dtype == dtype and v.dtype == carrier
    assert v.__array_interface__["data"][0] == t.data_ptr()  # no copy
    signed = {1: torch.int8, 2: torch.int16}[t.element_size()]
    np.testing.assert_array_equal(v, t.view(signed).numpy().view(carrier))  # the exact bits
    out = np.empty_like(v)
    out[:] = v  # what a pipeline that passes data through would write
    y = like_input(out, kind)
    assert y.dtype == dtype and y.data_ptr() == out.__array_interface__["data"][0]
    assert torch.equal(y.view(signed), t.view(signed))


def test_bf16_in_float32_out_is_a_float32_tensor(torch):
    t = torch.randn(10, dtype=torch.bfloat16)
    _, kind = host_view(t)
    y = like_input(np.arange(10, dtype=np.float32), kind)
    assert y.dtype == torch.float32
    y16 = like_input(np.zeros(10, np.uint16), kind, torch_dtype=torch.float16)  # told explicitly
    assert y16.dtype == torch.float16
    with pytest.raises(ValueError, match="bytes per element"):
        like_input(np.zeros(10, np.float32), kind, torch_dtype=torch.bfloat16)


def test_non_contiguous_tensor_is_a_value_error_that_names_contiguous(torch):
    t = torch.arange(20.0).reshape(4, 5).t()
    with pytest.raises(ValueError, match=r"input\.contiguous\(\)"):
        host_view(t)


def test_a_tensor_not_on_the_cpu_is_refused(torch):
    with pytest.raises(TypeError, match=r"device array \(torch\.Tensor\).*tensor\.cpu\(\)"):
        host_view(torch.empty(4, device="meta"), "input")
