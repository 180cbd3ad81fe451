"""CPU tests of gemm()'s Hopper variants on activations with leading dimensions, (..., K) @
w.T -> (..., N) as F.linear takes them: the kernels see one (M, K) matrix, the result comes
back in the leading shape, `out` may be given either way (a wrong one is named), and no
rows give an empty result without a launch. A torch-like stand-in tensor and a recording
stand-in for the kernel launch replace the GPU."""

from __future__ import annotations

import pytest

import fullpipe.kernels.hopper_gemm as hg
from fullpipe.kernels import gemm
from fullpipe.kernels._operands import matmul_shape, operand


class FakeTensor:
    """What operand() reads of a CUDA torch tensor: pointer, shape, strides, dtype, device."""

    is_cuda = True

    def __init__(self, shape, strides=None, ptr=1 << 20, dtype="torch.bfloat16"):
        self.shape, self.ptr, self.dtype = tuple(shape), ptr, dtype
        self._strides = tuple(strides) if strides is not None else _c_strides(self.shape)

    def data_ptr(self):
        return self.ptr

    def dim(self):
        return len(self.shape)

    def stride(self):
        return self._strides

    def get_device(self):
        return 0

    def is_contiguous(self):
        return all(d == 1 or s == c for d, s, c in zip(self.shape, self._strides, _c_strides(self.shape)))

    def t(self):
        return FakeTensor(self.shape[::-1], self._strides[::-1], self.ptr, self.dtype)

    @property
    def T(self):
        return self.t()

    def reshape(self, *shape):
        return FakeTensor(shape, None, self.ptr, self.dtype)

    def new_empty(self, shape):
        return FakeTensor(shape, None, 0, self.dtype)


FakeTensor.__module__ = "torch.fake"  # (how operand() tells a torch tensor)


def _c_strides(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


@pytest.fixture
def launches(monkeypatch):
    """The persistent rung's launch, recorded: (a's shape as the kernel sees it, out's)."""
    seen = []

    def run(A, B, kind, out, stream, *args, **kwargs):
        m, n, _ = matmul_shape(A, B)
        if out is None:
            out = FakeTensor((m, n))
        C = operand(out, "out")
        if C.shape != (m, n):
            raise ValueError(f"out must be an {(m, n)} array, got {C.shape}")
        seen.append((A.shape, B.transposed, C.shape))
        return out

    monkeypatch.setattr(hg, "run", run)
    return seen


def test_leading_dimensions_run_as_one_matrix_and_come_back_in_their_shape(launches):
    x, w = FakeTensor((2, 77, 768)), FakeTensor((2304, 768))
    y = gemm(x, w.T, variant="hopper_persistent", stream=object())
    assert y.shape == (2, 77, 2304)
    assert launches == [((154, 768), True, (154, 2304))]


def test_out_in_the_leading_shape_or_as_the_matrix_of_its_rows(launches):
    x, w = FakeTensor((3, 5, 40, 256)), FakeTensor((512, 256))
    out = FakeTensor((3, 5, 40, 512))
    assert gemm(x, w.T, variant="hopper_persistent", stream=object(), out=out) is out
    flat = FakeTensor((600, 512))
    assert gemm(x, w.T, variant="hopper_persistent", stream=object(), out=flat) is flat
    assert [c for _, _, c in launches] == [(600, 512), (600, 512)]


@pytest.mark.parametrize("shape, match", [
    ((5, 3, 40, 512), r"out must be an \(3, 5, 40, N\) array or the \(600, N\) matrix"),  # rows permuted
    ((3, 5, 41, 512), r"out must be an \(3, 5, 40, N\)"),
    ((601, 512), r"out must be an \(600, 512\)"),                                          # the matrix, wrong
])
def test_a_wrong_out_is_named(launches, shape, match):
    x, w = FakeTensor((3, 5, 40, 256)), FakeTensor((512, 256))
    with pytest.raises(ValueError, match=match):
        gemm(x, w.T, variant="hopper_persistent", stream=object(), out=FakeTensor(shape))
    assert launches == []


def test_out_whose_rows_are_not_one_matrix_is_refused(launches):
    x, w = FakeTensor((2, 77, 768)), FakeTensor((2304, 768))
    strided = FakeTensor((2, 77, 2304), strides=(2304, 2 * 2304, 1))  # (77, 2, N) with its first two axes swapped
    with pytest.raises(ValueError, match="must be C-contiguous"):
        gemm(x, w.T, variant="hopper_persistent", stream=object(), out=strided)
    assert launches == []


def test_no_rows_give_an_empty_result_without_a_launch(launches):
    w = FakeTensor((2304, 768))
    y = gemm(FakeTensor((0, 77, 768)), w.T, variant="hopper", stream=object())
    assert y.shape == (0, 77, 2304) and launches == []
    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemm(FakeTensor((0, 77, 512)), w.T, variant="hopper", stream=object())
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        gemm(FakeTensor((0, 77, 768), dtype="torch.float32"), FakeTensor((2304, 768), dtype="torch.float32").T,
             variant="hopper", stream=object())
