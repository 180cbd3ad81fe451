"""Tensor-function computes (y = f(x)) against the fake drivers: form detection, the
output sized from the first y, D2H straight from y's memory, variable batch shapes,
ring and pinned outputs, copy_streams, the issue order with prefetch, failures.

The framework is a fake with PyTorch's semantics where they matter: a "current
stream" that f enqueues its work on, tensors that are views of device memory (here
host memory the fake streams work on), and outputs f allocates itself."""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
import types

import numpy as np
import pytest

import fullpipe.cuda.driver as fdriver
import fullpipe.pipeline.executor as fexec
from fullpipe.pipeline import PipelineWarning, StreamPipeline
from fullpipe.pipeline.tensors import TensorFormError, compute_form
from tests.test_pipeline_fakecuda import _assert_clean, fake  # noqa: F401 - fixture
from tests.test_pipeline_protocol import Recorder

# These tests are of the staging ring: small pageable batches go through it, not in bulk.
pytestmark = pytest.mark.usefixtures("ring_staging")

_current = threading.local()


class FakeTensor:
    """A device tensor of the fake framework: ``ptr``/``shape``/``dtype`` over memory
    the fake streams read and write."""

    def __init__(self, ptr, shape, dtype, owner=None):
        self.ptr, self.shape, self.dtype, self.owner = int(ptr), tuple(shape), np.dtype(dtype), owner

    @classmethod
    def empty(cls, shape, dtype):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        mem = ctypes.create_string_buffer(max(n, 1))
        return cls(ctypes.addressof(mem), shape, dtype, owner=mem)

    def host(self):
        n = int(np.prod(self.shape)) * self.dtype.itemsize
        raw = (ctypes.c_byte * max(n, 1)).from_address(self.ptr)
        return np.frombuffer(raw, np.uint8, count=n).view(self.dtype).reshape(self.shape)


class FakeFramework:
    name = "fake"

    def __init__(self, device_index):
        self.device_index = device_index
        self.kept = []
        self.copies = []
        self.cuts = 0  # batch inputs cut from a lane tensor (instead of made from an address)

    def stream(self, fp_stream):
        return fp_stream

    def current_stream(self):
        return getattr(_current, "stream", None)

    def set_current(self, fs):
        _current.stream = fs

    def tensor(self, x, in_dtype):
        return FakeTensor(x.ptr, x.shape, x.dtype, owner=x)

    def cut(self, base, n, shape, offset=0):
        assert offset + n <= int(np.prod(base.shape)), "a batch cut past the end of its buffer"
        self.cuts += 1
        return FakeTensor(base.ptr + offset * base.dtype.itemsize, shape, base.dtype, owner=base)

    def host_dtype(self, dtype):
        return np.dtype(dtype), None

    def output(self, y, fs):
        if not isinstance(y, FakeTensor):
            raise TypeError(f"the compute returned {type(y).__name__}")
        return y, y.shape, y.dtype, y.ptr

    def keep_for(self, y, other_fs):
        self.kept.append((y, other_fs))

    def repeat_rows(self, t, rows):
        def op():
            h, have = t.host(), rows
            while have < len(h):
                k = min(have, len(h) - have)
                h[have:have + k] = h[:k]
                have += k

        _current.stream.put(op)

    @staticmethod
    def first_rows(y, rows):
        return FakeTensor(y.ptr, (rows,) + y.shape[1:], y.dtype, owner=y)

    def tiled_rows(self, x, rows):
        t = FakeTensor.empty((rows,) + x.shape[1:], x.dtype)
        self.copies.append(t)  # (alive to the end, as copy())

        def op():
            src, dst = x.host(), t.host()
            for a in range(0, rows, len(src)):
                dst[a:a + len(src)] = src[:rows - a]

        _current.stream.put(op)
        return t

    # what compute threads read of the caller's modes (compute_threads.TorchModes)
    torch = types.SimpleNamespace(is_inference_mode_enabled=lambda: False, is_grad_enabled=lambda: True,
                                  is_autocast_enabled=lambda device: False,
                                  set_grad_enabled=lambda on: contextlib.nullcontext())

    # what the adapter needs once a function writes the same memory in every call
    graph_trees = 0  # the generation of PyTorch's CUDA graph trees (a compute that runs them adds one)

    @staticmethod
    def extent(y):  # (fake tensors are contiguous)
        return y.ptr, y.ptr + int(np.prod(y.shape)) * y.dtype.itemsize

    @staticmethod
    def address(y):
        return y.ptr

    def copy(self, y):
        c = FakeTensor.empty(y.shape, y.dtype)
        self.copies.append(c)  # (alive to the end: the fake has no stream-ordered caching allocator)
        _current.stream.put(lambda: c.host().__setitem__(..., y.host()))
        return c

    def record(self, fs, event):
        from tests.test_pipeline_fakecuda import FakeEvent

        event = event or FakeEvent()
        fdriver.driver().cuEventRecord(event, fs)
        return event

    @staticmethod
    def wait(fs, event):
        fdriver.driver().cuStreamWaitEvent(fs, event, 0)

    def graph_trees_state(self):
        return self.graph_trees


class RowStats:
    """y[i] = (sum of row i, max of row i) as float64: another row shape and dtype.
    Enqueued on the current stream, as a framework op would be. Keeps every output
    alive (the fake has no stream-ordered caching allocator)."""

    def __init__(self, fail_at=None, log=None):
        self.outputs, self.calls, self.fail_at, self.log = [], 0, fail_at, log

    def __call__(self, x):
        if self.fail_at is not None and self.calls == self.fail_at:
            self.calls += 1
            raise RuntimeError("model failed on purpose")
        self.calls += 1
        s = _current.stream
        if self.log is not None:
            self.log.append(("compute", s))
        y = FakeTensor.empty((x.shape[0], 2), np.float64)
        self.outputs.append(y)

        def op():
            a = x.host().reshape(x.shape[0], -1).astype(np.float64)
            y.host()[:, 0] = a.sum(axis=1)
            y.host()[:, 1] = a.max(axis=1)

        s.put(op)
        return y


def want(x):
    a = np.asarray(x).reshape(len(x), -1).astype(np.float64)
    return np.stack([a.sum(axis=1), a.max(axis=1)], axis=1)


@pytest.fixture
def fakefw(fake, monkeypatch):
    made = []

    def make(name, index):
        fw = FakeFramework(index)
        made.append(fw)
        return fw

    monkeypatch.setattr(fexec, "make_framework", make)
    return made


# --------------------------------------------------------------------------- form detection
def test_compute_form_from_the_signature():
    assert compute_form(lambda x: x) == "tensor"
    assert compute_form(lambda s, x, y: None) == "stream"
    assert compute_form(lambda x, scale=2.0: x) == "tensor"
    assert compute_form(lambda s, x, y=None: None) == "stream"
    assert compute_form(None) == "none"

    class Stream3:
        def __call__(self, stream, x, y):
            pass

    assert compute_form(Stream3()) == "stream"
    assert compute_form(lambda *a: None, "torch") == "tensor"
    assert compute_form(lambda x: x, "stream") == "stream"
    # what a new user passes most: a builtin (no readable signature), a ufunc, a decorator's
    # (*args, **kwargs) wrapper (torch.inference_mode()(f) has no functools.wraps)
    assert compute_form(np.sin) == compute_form(len) == "tensor"

    def wrapper(*args, **kwargs):
        return None

    assert compute_form(wrapper) == compute_form(lambda x, *rest: x) == "tensor"
    assert compute_form(lambda s, x, y, *rest: None) == compute_form(lambda s, x, *rest: None) == "stream"

    def needs_keyword(x, *, scale):
        return x

    for ambiguous in (lambda a, b: None, lambda a, b=None, c=None: None, needs_keyword):
        with pytest.raises(TensorFormError, match="form="):
            compute_form(ambiguous)
    with pytest.raises(ValueError, match="form must be one of"):
        compute_form(lambda x: x, "jax")


def test_torch_module_is_a_tensor_function():
    torch = pytest.importorskip("torch")
    assert compute_form(torch.nn.Linear(4, 4)) == "tensor"
    assert compute_form(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())) == "tensor"


# --------------------------------------------------------------------------- runs
@pytest.mark.parametrize("pinned", [False, True])
def test_output_is_sized_from_the_first_y(fake, fakefw, pinned):
    x = np.random.default_rng(1).random((10_000, 3), dtype=np.float32)
    if pinned:
        fake.pinned.add(x.ctypes.data)
    f = RowStats()
    pipe = StreamPipeline(f, form="torch", streams=3, chunk=700)
    y = pipe.run(x)
    assert y.shape == (10_000, 2) and y.dtype == np.float64
    np.testing.assert_allclose(y, want(x), rtol=1e-6)
    assert pipe.stats.staging == {"input": "direct" if pinned else "ring", "output": "direct" if pinned else "ring"}
    assert pipe.stats.bytes_out == y.nbytes
    assert f.calls == pipe.stats.batches  # f ran once per batch: no extra discovery call
    _assert_clean(pipe)


def test_no_output_region_is_allocated_for_a_tensor_function(fake, fakefw, monkeypatch):
    from tests.test_pipeline_fakecuda import FakePool

    sizes = []
    real = FakePool.allocate_ptr
    monkeypatch.setattr(FakePool, "allocate_ptr", lambda self, n, s: sizes.append(n) or real(self, n, s))
    x = np.ones((4000, 4), np.float32)
    StreamPipeline(RowStats(), form="torch", streams=2, chunk=1000).run(x)
    # one buffer per lane (stream) for the run, the input only: y is the framework's, read in place
    assert sizes == [1000 * 16] * 2


def test_variable_batches_and_shapes(fake, fakefw):
    rng = np.random.default_rng(2)
    batches = [rng.random((int(rng.integers(1, 400)), int(rng.integers(1, 9))), dtype=np.float32)
               for _ in range(60)]
    pipe = StreamPipeline(RowStats(), form="torch", streams=3, slots=3)
    ys = pipe.run_batches(batches)
    for b, y in zip(batches, ys):
        np.testing.assert_allclose(y, want(b), rtol=1e-6)
    assert fakefw[0].cuts == len(batches)  # every x cut from its lane's tensor, none made from an address
    _assert_clean(pipe)


def test_outputs_bigger_than_the_ring_slots_go_straight_to_the_output(fake, fakefw):
    """Row shapes that grow the output faster than the input (the ring is sized from
    the first batch): those batches' D2H goes straight into the output, still correct."""

    def widen(x):  # y has 8 * x.shape[1] float64 columns: out/in grows with the width
        s = _current.stream
        y = FakeTensor.empty((x.shape[0], 8 * x.shape[1]), np.float64)
        keep.append(y)
        s.put(lambda: y.host().__setitem__(slice(None), np.repeat(x.host().astype(np.float64), 8, axis=1)))
        return y

    keep = []
    batches = [np.full((100, 1), 1, np.float32), np.full((100, 64), 2, np.float32), np.full((100, 2), 3, np.float32)]
    ys = StreamPipeline(widen, form="torch", streams=2).run_batches(batches)
    for b, y in zip(batches, ys):
        np.testing.assert_array_equal(y, np.repeat(b.astype(np.float64), 8, axis=1))


def test_given_out_is_checked_against_y(fake, fakefw):
    x = np.ones((100, 3), np.float32)
    pipe = StreamPipeline(RowStats(), form="torch", streams=2, chunk=50)
    out = np.zeros((100, 2), np.float64)
    assert pipe.run(x, out=out) is out
    np.testing.assert_allclose(out, want(x))
    with pytest.raises(ValueError, match="out has shape"):
        pipe.run(x, out=np.zeros((100, 5), np.float64))
    _assert_clean(pipe)
    with pytest.raises(ValueError, match="needs 100 rows"):
        pipe.run(x, out=np.zeros((99, 2), np.float64))


def test_y_with_wrong_rows_is_refused(fake, fakefw):
    pipe = StreamPipeline(lambda x: FakeTensor.empty((1, 2), np.float64), form="torch", streams=2, chunk=50)
    with pytest.raises(ValueError, match="one output row per input row") as info:
        pipe.run(np.ones((100, 3), np.float32))
    assert info.value.batch_index == 0
    _assert_clean(pipe)


@pytest.mark.parametrize("fail_at", [0, 7])
def test_failure_in_f_drains_and_returns_everything(fake, fakefw, fail_at):
    x = np.random.default_rng(4).random((3000, 4), dtype=np.float32)
    pipe = StreamPipeline(RowStats(fail_at=fail_at), form="torch", streams=3, chunk=200)
    _current.stream = "the caller's stream"
    with pytest.raises(RuntimeError, match="on purpose") as info:
        pipe.run(x)
    assert info.value.batch_index == fail_at
    assert _current.stream == "the caller's stream"  # each call ran on its lane's stream; the caller's is back
    _assert_clean(pipe)
    pipe.compute = RowStats()
    pipe._tc = None  # a new compute object: the adapter is made again
    np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)


def test_copy_streams_tell_the_framework_that_the_d2h_stream_reads_y(fake, fakefw):
    x = np.random.default_rng(5).random((2000, 4), dtype=np.float32)
    fake.pinned.add(x.ctypes.data)
    pipe = StreamPipeline(RowStats(), form="torch", streams=2, chunk=250, copy_streams=True)
    np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)
    fw = fakefw[0]
    assert len(fw.kept) == 8 and all(other is pipe._all_streams[3] for _, other in fw.kept)
    assert fw.cuts == 0  # no lane buffers with copy streams: x made per batch
    _assert_clean(pipe)


def test_h2d_of_the_next_batches_is_in_flight_during_the_compute_call(fake, fakefw, monkeypatch):
    rec = Recorder(monkeypatch, fake.driver)
    x = np.random.default_rng(6).random((4000, 4), dtype=np.float32)
    fake.pinned.add(x.ctypes.data)
    pipe = StreamPipeline(RowStats(log=rec.raw), form="torch", streams=3, chunk=1000, timing=False)
    np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)
    calls = [c[:2] for c in rec.named(pipe) if c[0] in ("h2d", "compute")]
    assert calls[:4] == [("h2d", "s0"), ("h2d", "s1"), ("h2d", "s2"), ("compute", "s0")]


def test_the_calls_of_one_batch_per_lane_go_back_to_back(fake, fakefw, monkeypatch):
    """A tensor function's calls for batches j..j+2 (one per lane) one after another, then
    their D2Hs, then the next group's H2Ds: each behind its lane's D2H, so a lane buffer is
    never written under a batch still to be computed; each lane's steps stay in order."""
    rec = Recorder(monkeypatch, fake.driver)
    x = np.random.default_rng(6).random((7000, 4), dtype=np.float32)
    fake.pinned.add(x.ctypes.data)
    pipe = StreamPipeline(RowStats(log=rec.raw), form="torch", streams=3, chunk=1000, timing=False)
    np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)
    assert (pipe.stats.call_group, pipe.stats.prefetch) == (3, 2)
    assert "calls 3 at a time" in str(pipe.stats)
    calls = [c[:2] for c in rec.named(pipe) if c[0] in ("h2d", "compute", "d2h")]
    group = [("h2d", "s0"), ("h2d", "s1"), ("h2d", "s2"), ("compute", "s0"), ("compute", "s1"), ("compute", "s2"),
             ("d2h", "s0"), ("d2h", "s1"), ("d2h", "s2")]
    assert calls == group * 2 + [("h2d", "s0"), ("compute", "s0"), ("d2h", "s0")]
    _assert_clean(pipe)


@pytest.mark.parametrize("options, group", [(dict(streams=1), 1), (dict(streams=3, synchronous=True), 1),
                                            (dict(streams=3, slots=2), 1), (dict(streams=3, slots=3), 2),
                                            (dict(streams=8), 3), (dict(streams=8, slots=8), 4),
                                            (dict(streams=3, compute_threads=2), 1), (dict(streams=3, prefetch=0), 1),
                                            (dict(streams=3, prefetch=1), 2)])
def test_how_many_calls_go_back_to_back(fake, fakefw, options, group):
    """One stream, synchronous runs and compute threads: one call at a time; a pageable input's
    ring leaves a slot free (the group's fronts take one slot each before its first call); at
    most four, and at most prefetch + 1 where the option is set."""
    x = np.random.default_rng(7).random((9000, 4), dtype=np.float32)
    pipe = StreamPipeline(RowStats(), form="torch", chunk=500, timing=False, **options)
    np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)
    assert pipe.stats.call_group == group
    _assert_clean(pipe)


def test_torch_input_comes_back_as_torch(fake, fakefw):
    torch = pytest.importorskip("torch")
    x = torch.rand(500, 3)
    y = StreamPipeline(RowStats(), streams=2, chunk=100).run(x)  # form="auto": a torch input -> torch
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64 and y.shape == (500, 2)
    np.testing.assert_allclose(y.numpy(), want(x.numpy()), rtol=1e-6)


def test_numpy_input_with_no_library_asks_for_form(fake, fakefw, monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    pipe = StreamPipeline(RowStats(), streams=2, chunk=100)
    with pytest.raises(TypeError, match="form='torch' or form='cupy'"):
        pipe.run(np.ones((10, 2), np.float32))


def test_numpy_input_with_torch_and_cupy_imported_is_a_torch_function(monkeypatch):
    """CuPy imported by some other library must not turn a PyTorch compute into an error
    (seen on the H200: the GPU test suite imports CuPy before the PyTorch tests)."""
    import sys

    from fullpipe.cuda.interop import host_view
    from fullpipe.pipeline.tensors import tensor_framework

    _, kind = host_view(np.ones((4, 2), np.float32))
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or object())
    monkeypatch.setitem(sys.modules, "cupy", sys.modules.get("cupy") or object())
    assert tensor_framework(lambda x: x, "auto", kind) == "torch"
    assert tensor_framework(lambda x: x, "cupy", kind) == "cupy"
    monkeypatch.delitem(sys.modules, "torch")
    assert tensor_framework(lambda x: x, "auto", kind) == "cupy"


def test_a_function_of_cupys_or_torchs_own_picks_its_library():
    """cupy.tanh with PyTorch imported was handed torch tensors and returned a CuPy array
    (refused: H100, session 13); a library's own function (or ufunc) now decides."""
    import types

    from fullpipe.cuda.interop import host_view
    from fullpipe.pipeline.tensors import tensor_framework

    _, kind = host_view(np.ones((4, 2), np.float32))
    ufunc_type = type("ufunc", (), {"__call__": lambda self, x: x, "__module__": "cupy._core._kernel"})
    tanh = ufunc_type()
    sin = types.FunctionType((lambda x: x).__code__, {}, "sin")
    sin.__module__ = "torch"
    assert compute_form(tanh) == compute_form(sin) == "tensor"
    assert tensor_framework(tanh, "auto", kind) == "cupy" and tensor_framework(sin, "auto", kind) == "torch"
    assert tensor_framework(tanh, "torch", kind) == "torch"  # the explicit form still wins


def test_a_cupy_function_handed_torch_tensors_is_told_to_pass_form_cupy():
    """A CuPy function given a NumPy input with PyTorch imported is handed torch tensors, takes
    them (__cuda_array_interface__) and returns a cupy.ndarray: the first sign is its output,
    and the error says which form to pass (a new user's tour, an H200, session 48, p307); the
    other way round too."""
    import types

    from fullpipe.pipeline.tensors import CupyFramework, TorchFramework

    cupy_array = type("ndarray", (), {"__module__": "cupy"})
    torch_tensor = type("Tensor", (), {"__module__": "torch"})
    fw = object.__new__(TorchFramework)
    fw.torch = types.SimpleNamespace(Tensor=torch_tensor)
    with pytest.raises(TypeError, match=r"returned ndarray; .*a CuPy function: pass form='cupy'"):
        fw.output(cupy_array(), None)
    with pytest.raises(TypeError, match=r"returned 2 values.*model\(x\)\[0\]") as info:
        fw.output((torch_tensor(), torch_tensor()), None)
    assert "form=" not in str(info.value)
    cw = object.__new__(CupyFramework)
    cw.cupy = types.SimpleNamespace(ndarray=cupy_array)
    with pytest.raises(TypeError, match=r"returned Tensor; .*a PyTorch function: pass form='torch'"):
        cw.output(torch_tensor(), None)


def test_auto_chunk_probes_a_tensor_function_and_reuses_the_choice(fake, fakefw):
    fake.jitter["value"] = 0.0
    x = np.random.default_rng(7).random((48 * (1 << 20) // 64, 16), dtype=np.float32)  # 48 MiB
    f = RowStats()
    pipe = StreamPipeline(f, form="torch", streams=2)
    y = pipe.run(x)
    np.testing.assert_allclose(y, want(x), rtol=1e-5)
    c = pipe.stats.chunk
    assert c["source"] == "tuned" and c["probe_batches"] >= 4  # each probe size twice: frameworks tune per shape
    assert pipe.stats.batches + c["probe_batches"] == f.calls
    calls = f.calls
    np.testing.assert_allclose(pipe.run(x[:1000]), want(x[:1000]), rtol=1e-5)
    assert pipe.stats.chunk["source"] == "reused" and f.calls - calls == pipe.stats.batches


def test_batch_views_are_row_major_like_numpys():
    """Each batch's input is cut from its lane's buffer with these strides (as_strided):
    they must be NumPy's C order for every non-empty shape."""
    from fullpipe.cuda.memory import contiguous_strides

    rng = np.random.default_rng(3)
    for _ in range(200):
        shape = tuple(int(e) for e in rng.integers(1, 9, size=int(rng.integers(1, 5))))
        want = tuple(s // 4 for s in np.empty(shape, np.float32).strides)
        assert contiguous_strides(shape) == want, shape


def test_a_type_error_at_the_first_call_with_cupy_imported_suggests_form_cupy(fake, fakefw, monkeypatch):
    """A CuPy function over a NumPy input with PyTorch and CuPy both imported is handed a
    torch tensor, and CuPy's error ("The input array a must be a cupy.ndarray") does not
    say why: the failure carries a note naming form='cupy'. Only at the first call, and
    only when the other framework is imported."""
    import sys

    monkeypatch.setattr(fexec, "make_framework", lambda name, index: type("Torchish", (FakeFramework,),
                                                                          {"name": "torch"})(index))
    x = np.ones((400, 4), np.float32)

    def cupy_function(t):
        raise TypeError("The input array a must be a cupy.ndarray")

    def notes_of(compute, cupy_imported):
        if cupy_imported:
            monkeypatch.setitem(sys.modules, "cupy", sys.modules.get("cupy") or object())
        else:
            monkeypatch.delitem(sys.modules, "cupy", raising=False)
        pipe = StreamPipeline(compute, form="torch", streams=2, chunk=100)
        with pytest.raises(TypeError) as info:
            pipe.run(x)
        _assert_clean(pipe)
        return " ".join(getattr(info.value, "__notes__", []))

    assert "pass form='cupy'" in notes_of(cupy_function, cupy_imported=True)
    assert "form='cupy'" not in notes_of(cupy_function, cupy_imported=False)
    later = RowStats()

    def fails_later(t):
        if later.calls == 2:
            raise TypeError("a bug of the compute's own, at its third call")
        return later(t)

    assert "form='cupy'" not in notes_of(fails_later, cupy_imported=True)


def test_a_short_lists_outputs_are_cut_from_few_pinned_blocks():
    """plain._PinnedCarver: outputs of a short list (row sizes that vary, bytes per input byte
    that grow) are disjoint, 256-byte aligned views of few blocks; a block is sized for the
    outputs still to come; after the pool refuses a take, no output is pinned and no take is
    tried again."""
    from fullpipe.pipeline.plain import _PinnedCarver

    takes: list[int] = []
    blocks: list[np.ndarray] = []

    def take(nbytes):
        takes.append(nbytes)
        blocks.append(np.zeros(nbytes, np.uint8))
        return blocks[-1]

    rng = np.random.default_rng(3)
    ins = [int(n) for n in rng.integers(1_000, 50_000, 40)]
    carver = _PinnedCarver(take, sum(ins))
    steady = [carver.view((max(1, n // 64), 3), np.dtype(np.float32), n) for n in ins]
    assert len(takes) == 1, takes  # (as many output bytes per input byte all along: one block)
    carver = _PinnedCarver(take, sum(ins))
    views = []
    for i, n in enumerate(ins):
        width = 3 + (i // 10) * 5  # output bytes per input byte grow along the list
        views.append(carver.view((max(1, n // 64), width), np.dtype(np.float32), n))
    assert len(takes) <= 1 + 6, takes  # (a few more blocks, not one per output)
    for v, place in views:  # (each view's place: its block and offset, as the address says)
        assert carver.address(place) == v.__array_interface__["data"][0]
        assert place[1] + v.nbytes <= carver.used[place[0]] <= carver.blocks[place[0]][0].nbytes
    views = [v for v, _ in views + steady]
    spans = []
    for v in views:
        base = next(b for b in blocks if np.shares_memory(v, b))
        start = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        assert start % _PinnedCarver.ALIGN == 0 and start + v.nbytes <= base.nbytes
        spans.append((id(base), start, start + v.nbytes))
    for (b1, s1, e1), (b2, s2, e2) in zip(sorted(spans), sorted(spans)[1:]):
        assert b1 != b2 or e1 <= s2, "two outputs overlap"
    for k, v in enumerate(views):  # each view is its own memory
        v[...] = k
    assert all((v == k).all() for k, v in enumerate(views))

    refused: list[int] = []

    def full(nbytes):
        refused.append(nbytes)
        return None

    carver = _PinnedCarver(full, 10_000)
    assert carver.view((10, 10), np.dtype(np.float32), 5_000) == (None, None)
    assert carver.view((10, 10), np.dtype(np.float32), 5_000) == (None, None)
    assert len(refused) == 1  # (the pool is not asked again in the same run)


def test_a_short_lists_new_pageable_outputs_are_one_array_filled_block_by_block():
    """plain._one_array_for: the new pageable outputs of a list staged in several pinned
    blocks (outputs of varying sizes and dtypes) come out of one array laid out as the
    blocks, filled by copies of whole blocks cut in pieces for the copier's threads: each
    output holds its stage's bytes, and the outputs are disjoint."""
    import ctypes

    from fullpipe.pipeline.plain import _one_array_for, _PinnedCarver

    blocks: list[np.ndarray] = []

    def take(nbytes):
        blocks.append(np.zeros(nbytes, np.uint8))
        return blocks[-1]

    rng = np.random.default_rng(5)
    ins = [int(n) for n in rng.integers(1_000, 300_000, 60)]
    carver = _PinnedCarver(take, sum(ins))
    staged = []
    for i, n in enumerate(ins):
        dtype = np.dtype([np.float32, np.float64, np.int16][i % 3])
        width = 3 + (i // 20) * 7  # (more output bytes per input byte later: more blocks)
        view, place = carver.view((max(1, n // 64), width), dtype, n)
        view[...] = rng.integers(-1000, 1000, view.shape)
        staged.append((view, place))
    assert len(blocks) > 1
    host, at_block, copies = _one_array_for(carver, threads=4)
    assert host.nbytes == sum(carver.used) and len(copies) > len(blocks)  # (pieces)
    covered = sorted((to - host.ctypes.data, to - host.ctypes.data + n) for to, _, n in copies)
    assert covered[0][0] == 0 and covered[-1][1] == host.nbytes
    assert all(e == s2 for (_, e), (s2, _) in zip(covered, covered[1:]))  # (every byte once)
    for to, src, n in copies:
        ctypes.memmove(to, src, n)
    outs = []
    for view, (k, at) in staged:
        a = at_block[k] + at
        out = host[a:a + view.nbytes].view(view.dtype).reshape(view.shape)
        np.testing.assert_array_equal(out, view)
        outs.append(out)
    for k, out in enumerate(outs):  # (disjoint: each its own memory in the one array)
        out[...] = k
    assert all((out == k).all() for k, out in enumerate(outs))


class OneBuffer:
    """A compute that writes one output buffer in every call and returns it, as a CUDA
    graph's static output does (``torch.compile(mode="reduce-overhead")``): y = 2x + 1,
    the write a little late, as a kernel behind others would be. ``fresh=True``: the
    graph's output is copied into a new tensor before it is returned (``.float()`` after
    the graph), so only the shared buffer itself races; ``trees`` then says that PyTorch's
    graph trees ran (the adapter's only sign): ``trees`` is the list of fake frameworks
    to tell."""

    def __init__(self, fresh=False, trees=None):
        self.buf, self.fresh, self.trees, self.calls = {}, fresh, trees, 0

    def __call__(self, x):
        self.calls += 1
        for fw in self.trees or ():  # (the fake frameworks made so far)
            fw.graph_trees += 1
        buf = self.buf.get(x.shape)
        if buf is None:
            buf = self.buf[x.shape] = FakeTensor.empty(x.shape, np.float32)
        s = _current.stream

        def op():
            time.sleep(2e-4)
            buf.host()[...] = x.host() * 2 + 1

        s.put(op)
        if not self.fresh:
            return buf
        y = FakeTensor.empty(x.shape, np.float32)
        self.buf.setdefault("fresh", []).append(y)  # (kept alive: the fake has no caching allocator)
        s.put(lambda: y.host().__setitem__(..., buf.host()))
        return y


@pytest.mark.parametrize("copy_streams, threads", [(False, 1), (True, 1), (False, 3)])
def test_a_compute_that_returns_one_buffer_turns_serial_and_its_run_is_done_again(fake, fakefw, copy_streams,
                                                                                   threads):
    """Its output overlaps one another lane still copies out: the run is done again from the
    start with calls one after another (each output copied on the device), right, with one
    warning; later runs are serial from their first call. On compute threads too (the
    overlap is seen on a worker thread; its calls then take turns)."""
    x = np.random.default_rng(8).random((3000, 4), dtype=np.float32)
    if copy_streams:
        fake.pinned.add(x.ctypes.data)
    f = OneBuffer()
    pipe = StreamPipeline(f, form="torch", streams=3, chunk=200, copy_streams=copy_streams,
                          compute_threads=threads)
    with pytest.warns(PipelineWarning, match="one after another") as got:
        y = pipe.run(x)
    assert len([w for w in got if issubclass(w.category, PipelineWarning)]) == 1
    np.testing.assert_array_equal(y, x * 2 + 1)
    assert "still being copied out" in pipe.stats.compute_serial
    assert 15 < f.calls < 30  # the first try stopped at the first overlap, the second ran all 15
    for k in range(3):
        xs = [x[i:i + 100 + 37 * k] for i in range(0, 2800, 300)]
        calls = f.calls
        ys = pipe.run_batches(xs)
        assert f.calls - calls == len(xs)
        for a, b in zip(xs, ys):
            np.testing.assert_array_equal(b, a * 2 + 1)
    _assert_clean(pipe)


def test_cuda_graph_trees_turn_the_calls_serial_at_once(fake, fakefw):
    """A compute whose graphs share memory but whose output is new each call shows no
    overlap; the graph trees' generation, changed by the first call, makes the rest serial: right,
    and nothing run again."""
    x = np.random.default_rng(9).random((3000, 4), dtype=np.float32)
    f = OneBuffer(fresh=True, trees=fakefw)
    pipe = StreamPipeline(f, form="torch", streams=3, chunk=200)
    with pytest.warns(PipelineWarning, match="CUDA graphs"):
        y = pipe.run(x)
    np.testing.assert_array_equal(y, x * 2 + 1)
    assert f.calls == 15 and "CUDA graphs" in pipe.stats.compute_serial
    _assert_clean(pipe)


def test_outputs_that_view_the_input_or_are_new_stay_concurrent(fake, fakefw):
    """A view of x is fullpipe's own memory (with copy_streams the batches' buffers come from
    the pool, and a freed one comes back at the same address); a new output each call never
    overlaps a held one: neither turns the calls serial."""
    import warnings

    x = np.random.default_rng(10).random((3000, 4), dtype=np.float32)
    fake.pinned.add(x.ctypes.data)
    for compute, want_y, kw in ((lambda t: t, x, {"copy_streams": True}), (lambda t: t, x, {}),
                                (RowStats(), want(x), {})):
        pipe = StreamPipeline(compute, form="torch", streams=3, chunk=100, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("error", PipelineWarning)
            for _ in range(2):
                np.testing.assert_allclose(pipe.run(x), want_y, rtol=1e-6)
        assert pipe.stats.compute_serial is None
        _assert_clean(pipe)


def test_in_place_runs_are_right_and_overlaps_across_batches_are_refused(fake, fakefw):
    """out=x (each output row where its input row is) is an in-place run; so is a batch whose
    output overlaps its own input anyhow (its input is read before its output is written).
    An output shifted against the input of run(), or over another batch's input, could be
    written before that input is read: refused before anything runs, the input untouched.
    The first in-place run calls serially (a run that went wrong could not be done again)
    and, seeing no sign, makes the compute verified: later in-place runs overlap."""
    kept = []

    def affine(t):  # y = 2x + 1, a new tensor, enqueued on the current stream
        y = FakeTensor.empty(t.shape, np.float32)
        kept.append(y)
        _current.stream.put(lambda: y.host().__setitem__(..., t.host() * 2 + 1))
        return y

    x0 = np.random.default_rng(12).random((3000, 4), dtype=np.float32)
    x = x0.copy()
    pipe = StreamPipeline(affine, form="torch", streams=3, chunk=200)
    assert pipe.run(x, out=x) is x
    np.testing.assert_array_equal(x, x0 * 2 + 1)
    assert pipe._tc.verified and pipe.stats.compute_serial is None
    xs = [x[i:i + 150] for i in range(0, 3000, 150)]
    pipe.run_batches(xs, outs=xs)
    np.testing.assert_array_equal(x, (x0 * 2 + 1) * 2 + 1)
    x1 = x.copy()
    pipe.run_batches([x[0:100], x[1000:1100]], outs=[x[50:150], x[1050:1150]])  # each over its own input
    np.testing.assert_array_equal(x[50:150], x1[0:100] * 2 + 1)
    np.testing.assert_array_equal(x[1050:1150], x1[1000:1100] * 2 + 1)
    before = x.copy()
    with pytest.raises(ValueError, match="without lining up"):
        pipe.run(x[:-100], out=x[100:])
    with pytest.raises(ValueError, match=r"outs\[0\] shares memory with batch 1's input"):
        pipe.run_batches([x[0:100], x[100:200]], outs=[x[50:150], x[300:400]])
    np.testing.assert_array_equal(x, before)
    _assert_clean(pipe)


def test_an_in_place_run_of_a_compute_that_returns_one_buffer_is_right_at_once(fake, fakefw):
    """In place, a run that showed the first sign could not be done again (its inputs are
    overwritten): the first in-place run calls serially while it watches, so the buffer is
    seen without harm, every row is right, and nothing is run twice."""
    x0 = np.random.default_rng(13).random((3000, 4), dtype=np.float32)
    x = x0.copy()
    f = OneBuffer()
    pipe = StreamPipeline(f, form="torch", streams=3, chunk=200)
    with pytest.warns(PipelineWarning, match="one after another"):
        pipe.run(x, out=x)
    np.testing.assert_array_equal(x, x0 * 2 + 1)
    assert f.calls == 15 and pipe.stats.compute_serial and not pipe._tc.verified
    _assert_clean(pipe)


# --------------------------------------------------------------------------- pad_shapes
class ShapeLog(RowStats):
    """RowStats that logs the shape of every call, and the input rows of the calls at
    ``watch`` rows as the stream saw them; optionally slow at each new shape's first call
    (a framework's per-shape setup: cuDNN plans, a recompile)."""

    def __init__(self, new_shape_s=0.0, watch=None):
        super().__init__()
        self.shapes, self.new_shape_s, self.watch, self.seen_inputs = [], new_shape_s, watch, []

    def __call__(self, x):
        if self.new_shape_s and x.shape not in self.shapes:
            time.sleep(self.new_shape_s)
        self.shapes.append(x.shape)
        if x.shape[0] == self.watch:
            _current.stream.put(lambda: self.seen_inputs.append(x.host().copy()))
        return super().__call__(x)


def test_pad_shapes_runs_the_last_chunk_at_the_chunks_rows_and_returns_its_own(fake, fakefw):
    x = np.random.default_rng(3).random((1000, 16), dtype=np.float32)  # chunks of 300, 300, 300, 100
    f = ShapeLog(watch=300)
    with StreamPipeline(f, form="torch", streams=2, chunk=300, pad_shapes=True) as pipe:
        y = pipe.run(x)
        np.testing.assert_allclose(y, want(x), rtol=1e-6)
        assert set(f.shapes) == {(300, 16)} and pipe.stats.padded == {"batches": 1, "rows": 200}
        last_in = next(a for a in f.seen_inputs if np.array_equal(a[:100], x[900:]))  # (streams run in any order)
        # the last chunk's rows, then copies of them in turn
        np.testing.assert_array_equal(last_in, np.concatenate([x[900:], x[900:], x[900:]]))
        y2 = pipe.run(x[:950])  # another length, another last chunk: still one shape
        np.testing.assert_allclose(y2, want(x[:950]), rtol=1e-6)
        assert set(f.shapes) == {(300, 16)} and pipe.stats.padded == {"batches": 1, "rows": 250}
    f = ShapeLog()
    with StreamPipeline(f, form="torch", streams=2, chunk=300, pad_shapes=False) as pipe:
        np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)
        assert set(f.shapes) == {(300, 16), (100, 16)} and pipe.stats.padded is None


def test_an_input_too_small_to_probe_runs_its_even_split_at_one_shape(fake, fakefw):
    """chunk="auto" splits an input too small to probe evenly: its last chunk, a row short per
    other chunk, runs padded to the others' rows (one new shape for the compute, not two,
    whatever a shape costs), and its outputs are its own rows'; not with pad_shapes=False."""
    rows = 3 * (4 << 20) // 64 + 1  # 12 MiB and a row of 64 bytes: chunks of 65537, 65537, 65535
    x = np.random.default_rng(48).random((rows, 16), dtype=np.float32)
    for pad, shapes, padded in (("auto", {(65537, 16)}, {"batches": 1, "rows": 2}),
                                (False, {(65537, 16), (65535, 16)}, None)):
        f = ShapeLog()
        with StreamPipeline(f, form="torch", streams=3, pad_shapes=pad) as pipe:
            np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)
            assert pipe.stats.chunk["source"] == "even split" and pipe.stats.batches == 3
            assert set(f.shapes) == shapes and pipe.stats.padded == padded
            _assert_clean(pipe)


def test_what_padding_a_row_costs_is_learnt_from_runs_at_seen_shapes_only(fake, fakefw):
    """A new shape's first call paces the GPU at its host's speed (resnet50's first call, ~400 ms
    on an H200, spans its compute's events): a run that called the compute at a new shape does not
    teach the GPU time per row that padding is priced at; the next run, at seen shapes, does."""
    x = np.random.default_rng(6).random((1000, 16), dtype=np.float32)
    f = ShapeLog()
    with StreamPipeline(f, form="torch", streams=2, chunk=250) as pipe:
        pipe.run(x)
        assert pipe._tc.gpu_row_s == {}  # (its first run: every call at a new shape, or the first of all)
        pipe.run(x)
        assert list(pipe._tc.gpu_row_s.values()) == [pytest.approx(pipe.stats.busy_ms["compute"] * 1e-3 / 1000)]


def test_pad_shapes_without_a_lane_buffer_and_in_run_batches(fake, fakefw):
    x = np.random.default_rng(4).random((1000, 16), dtype=np.float32)
    f = ShapeLog(watch=300)
    with StreamPipeline(f, form="torch", streams=2, chunk=300, pad_shapes=True, copy_streams=True) as pipe:
        np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-6)  # no lane buffers: a new tensor
        assert set(f.shapes) == {(300, 16)} and pipe.stats.padded == {"batches": 1, "rows": 200}
        assert any(np.array_equal(a, np.concatenate([x[900:]] * 3)) for a in f.seen_inputs)
    # run_batches: a batch of a new shape runs at the fewest rows of a seen one, at most twice its own
    sizes = [40, 25, 40, 21, 50, 19]
    xs = [x[:n] + i for i, n in enumerate(sizes)]
    f = ShapeLog()
    with StreamPipeline(f, form="torch", streams=2, pad_shapes=True) as pipe:
        ys = pipe.run_batches(xs)
        for y, xi in zip(ys, xs):
            np.testing.assert_allclose(y, want(xi), rtol=1e-6)
        assert [s[0] for s in f.shapes] == [40, 40, 40, 40, 50, 19]  # 19: 40 is more than twice its rows
        assert pipe.stats.padded == {"batches": 2, "rows": 15 + 19}
    with pytest.raises(TypeError, match="pad_shapes"):
        StreamPipeline(f, form="torch", pad_shapes="yes")
    with pytest.raises(ValueError, match="pad_shapes=True pads the batches a tensor function"):
        StreamPipeline(lambda stream, x, y: None, pad_shapes=True)


def test_pad_shapes_auto_in_run_batches_learns_what_a_new_shape_costs_from_the_calls(fake, fakefw):
    x = np.random.default_rng(6).random((64, 16), dtype=np.float32)
    sizes = [32, 32, 20, 20, 24, 12, 30, 16]
    xs = [x[:n] * (i + 1) for i, n in enumerate(sizes)]
    f = ShapeLog(new_shape_s=0.3)
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        ys = pipe.run_batches(xs)
        for y, xi in zip(ys, xs):
            np.testing.assert_allclose(y, want(xi), rtol=1e-6)
        # the first call of all is not a shape's cost; 20's first call over its second is: from
        # then on 24 runs at 32, 12 at 20, 30 at 32, 16 at 20
        assert [s[0] for s in f.shapes] == [32, 32, 20, 20, 32, 20, 32, 20]
        assert pipe.stats.padded == {"batches": 4, "rows": 8 + 8 + 2 + 4}
    f = ShapeLog()  # no per-shape cost: every batch at its own shape
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        pipe.run_batches(xs)
        assert [s[0] for s in f.shapes] == sizes and pipe.stats.padded is None


def test_pad_shapes_auto_learns_from_a_list_of_all_different_sizes(fake, fakefw):
    """No size comes twice, so no shape is called twice on its own: after two slow new shapes,
    one batch runs at a shape called once, and that second call, quick, shows the cost was the
    shape's. Without the trial every batch is a new shape (10 calls of 0.3 s)."""
    x = np.random.default_rng(9).random((64, 16), dtype=np.float32)
    sizes = [32, 20, 24, 12, 30, 16, 40, 28, 18, 36]
    xs = [x[:n] * (i + 1) for i, n in enumerate(sizes)]
    f = ShapeLog(new_shape_s=0.3)
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        ys = pipe.run_batches(xs)
        for y, xi in zip(ys, xs):
            np.testing.assert_allclose(y, want(xi), rtol=1e-6)
        # 12 is the trial (at 20, called once); then 30 at 32, 16 at 20, 28 at 32, 18 at 20, 36 at 40
        assert [s[0] for s in f.shapes] == [32, 20, 24, 20, 32, 20, 40, 32, 20, 40]
        assert pipe.stats.padded == {"batches": 6, "rows": 8 + 2 + 4 + 4 + 2 + 4}
        assert pipe._tc.new_shape_s >= 0.25


def test_pad_shapes_auto_tries_once_where_every_call_is_slow(fake, fakefw):
    """A function slow at every call (it waits for the GPU, or works on the CPU) over sizes that
    never repeat: one batch is padded to find out, then none."""
    x = np.random.default_rng(10).random((64, 16), dtype=np.float32)

    class SlowAlways(ShapeLog):
        def __call__(self, t):
            time.sleep(0.3)
            return super().__call__(t)

    sizes = [40, 30, 36, 24, 44, 20, 26]
    f = SlowAlways()
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        pipe.run_batches([x[:n] for n in sizes])
        assert [s[0] for s in f.shapes] == [40, 30, 36, 30, 44, 20, 26]  # 24: the trial, at 30
        assert pipe.stats.padded == {"batches": 1, "rows": 6}
        assert pipe._tc.new_shape_s < 0.05


def test_chunk_auto_probes_call_each_size_on_one_stream(fake, fakefw):
    """A framework's caching allocator keeps freed memory per stream: a probe size's second
    call on another stream would allocate again and read as host time. Each probe size runs
    on one lane, the sizes on different lanes; the run after them on every lane."""
    x = np.random.default_rng(11).random((48 * (1 << 20) // 64, 16), dtype=np.float32)
    calls = []

    class StreamLog(RowStats):
        def __call__(self, t):
            calls.append((t.shape[0], id(_current.stream)))
            return super().__call__(t)

    with StreamPipeline(StreamLog(), form="torch", streams=3) as pipe:
        np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-5)
        n_probe = pipe.stats.chunk["probe_batches"]
        probes = calls[:n_probe]
        sizes = sorted({n for n, _ in probes})
        assert n_probe >= 4 and len(sizes) >= 2
        lanes = [{s for n, s in probes if n == size} for size in sizes]
        assert all(len(lane) == 1 for lane in lanes) and lanes[0] != lanes[1]
        assert len({s for _, s in calls[n_probe:]}) == 3


def test_chunk_auto_with_a_compute_that_returns_one_buffer_per_shape(fake, fakefw):
    """The probes call each size on one lane, so a compute that returns one buffer per batch
    shape (a CUDA graph's static output) shows no overlap there; the run after them sees it,
    and is done again with its calls one after another: right, one warning."""
    x = np.random.default_rng(12).random((48 * (1 << 20) // 64, 16), dtype=np.float32)
    f = OneBuffer()
    with StreamPipeline(f, form="torch", streams=3) as pipe:
        with pytest.warns(PipelineWarning, match="one after another") as got:
            y = pipe.run(x)
        assert len([w for w in got if issubclass(w.category, PipelineWarning)]) == 1
        np.testing.assert_array_equal(y, x * 2 + 1)
        assert "still being copied out" in pipe.stats.compute_serial
        _assert_clean(pipe)


def test_an_in_place_run_with_chunk_auto_is_verified_by_its_probes(fake, fakefw):
    """A compute with new outputs, in place, chunk="auto": the probes' sizes run on two lanes,
    and their checks find no sign, so the run after them is not careful (its calls are not
    made one after another)."""
    kept, careful = [], []

    def affine(t):  # y = 2x + 1, a new tensor, enqueued on the current stream
        careful.append(pipe._tc._careful)
        y = FakeTensor.empty(t.shape, np.float32)
        kept.append(y)
        _current.stream.put(lambda: y.host().__setitem__(..., t.host() * 2 + 1))
        return y

    x0 = np.random.default_rng(14).random((48 * (1 << 20) // 64, 16), dtype=np.float32)
    x = x0.copy()
    with StreamPipeline(affine, form="torch", streams=3) as pipe:
        pipe.run(x, out=x)
        np.testing.assert_array_equal(x, x0 * 2 + 1)
        n_probe = pipe.stats.chunk["probe_batches"]
        assert n_probe >= 4 and any(careful[:n_probe]) and not any(careful[n_probe:])
        assert pipe._tc.verified and pipe.stats.compute_serial is None


def test_pad_shapes_auto_tries_once_on_compute_threads(fake, fakefw):
    """On compute threads the calls decided before the trial's answer do not start trials of
    their own: one batch padded."""
    x = np.random.default_rng(13).random((64, 16), dtype=np.float32)

    class SlowAlways(ShapeLog):
        def __call__(self, t):
            time.sleep(0.3)
            return super().__call__(t)

    sizes = [40, 30, 36, 24, 44, 20, 26, 34, 22, 18]
    for threads in (2, 3):
        f = SlowAlways()
        with StreamPipeline(f, form="torch", streams=4, compute_threads=threads) as pipe:
            ys = pipe.run_batches([x[:n] for n in sizes])
            for y, n in zip(ys, sizes):
                np.testing.assert_allclose(y, want(x[:n]), rtol=1e-6)
            assert pipe.stats.padded is not None and pipe.stats.padded["batches"] == 1


def test_pad_shapes_auto_saves_the_new_shapes_of_a_compute_slow_at_them(fake, fakefw):
    fake.jitter["value"] = 0.0
    x = np.random.default_rng(5).random((48 * (1 << 20) // 64 + 37, 16), dtype=np.float32)  # 48 MiB and a bit
    f = ShapeLog(new_shape_s=0.3)
    row_bytes = 16 * 4
    small, large = ((1 << 20) // row_bytes, 16), ((8 << 20) // row_bytes, 16)
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        y = pipe.run(x)
        np.testing.assert_allclose(y, want(x), rtol=1e-5)
        c = pipe.stats.chunk
        # the first call of all cost a good part of the run: one batch shape in the first run, the
        # larger probe size, its last chunk padded to it; the smaller size is probed by the second run
        assert "a second probe size on the next" in c["reason"] and pipe.stats.padded["rows"] > 0
        assert set(f.shapes) == {large} and c["rows"] == large[0]
        short = x[:20_000]  # (too short to probe the smaller size: its one chunk padded to the size probed)
        np.testing.assert_allclose(pipe.run(short), want(short), rtol=1e-5)
        assert set(f.shapes) == {large} and pipe.stats.padded["rows"] == large[0] - 20_000
        np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-5)
        c = pipe.stats.chunk
        assert c["probe_batches"] == 2 and c["new_shape_ms"] >= 250 and pipe.stats.padded["rows"] > 0
        first = set(f.shapes)
        assert (c["rows"], 16) in first and first <= {small, large, (c["rows"], 16)}  # no shape of a last chunk
        np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-5)
        np.testing.assert_allclose(pipe.run(x[:-1000]), want(x[:-1000]), rtol=1e-5)  # another length
        assert set(f.shapes) == first
        # once the padding's cost adds up to one new shape's, the last chunk runs at its own shape
        # (once: it is a shape seen from then on)
        tc = pipe._tc
        assert tc._pad_paid  # (what padding each last chunk's shape has cost so far)
        tc._pad_paid = {k: tc.new_shape_s for k in tc._pad_paid}
        np.testing.assert_allclose(pipe.run(x), want(x), rtol=1e-5)
        assert pipe.stats.padded is None and len(set(f.shapes)) == len(first) + 1
        pipe.run(x)
        assert pipe.stats.padded is None and len(set(f.shapes)) == len(first) + 1
    f = ShapeLog()  # a compute with no per-shape cost: nothing padded
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        pipe.run(x)
        assert pipe.stats.padded is None


@pytest.mark.parametrize("share, padded", [(1e-9, True), (1e9, False)])
def test_pad_shapes_auto_pads_a_last_chunk_whose_shape_costs_a_good_part_of_a_run(fake, fakefw, monkeypatch,
                                                                                   share, padded):
    """A new shape that costs far less than NEW_SHAPE_COSTLY_S but a good part of a run (a
    ViT-B/16 on an H200: ~70 ms, as long as a run of 512 images; session 38): from the
    second run, whose chunk choice knows the first run's time, the last chunk runs at the
    chunks' rows, where the share makes the shape's cost count (set to ~0 here), and at its
    own shape where it does not."""
    fake.jitter["value"] = 0.0
    monkeypatch.setattr(fexec, "SHAPE_COST_SHARE", share)
    x = np.random.default_rng(6).random((48 * (1 << 20) // 64 + 37, 16), dtype=np.float32)
    f = ShapeLog(new_shape_s=0.03)
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        pipe.run(x)  # (with every share counting, its first call too: the probes' smaller size on the next run)
        assert ("a second probe size on the next" in pipe.stats.chunk["reason"]) == padded
        pipe.run(x)
        assert 0 < pipe.stats.chunk["new_shape_ms"] < 1e3 * fexec.NEW_SHAPE_COSTLY_S
        for n in (len(x) - 1000, len(x) - 2000):  # (last chunks of new lengths)
            shapes = len(set(f.shapes))
            np.testing.assert_allclose(pipe.run(x[:n]), want(x[:n]), rtol=1e-5)
            assert (pipe.stats.padded is not None) == padded
            assert (len(set(f.shapes)) == shapes) == padded


def test_pad_shapes_auto_takes_no_slow_call_for_a_shapes_cost(fake, fakefw):
    """A function whose calls are slow for a large batch every time (it waits for the GPU, or
    works on the CPU) shows no per-shape cost: a shape's first call is compared with its second."""
    x = np.random.default_rng(8).random((64, 16), dtype=np.float32)

    class SlowWhenLarge(ShapeLog):
        def __call__(self, t):
            if t.shape[0] >= 40:
                time.sleep(0.3)
            return super().__call__(t)

    sizes = [8, 8, 48, 48, 56, 30, 8, 52, 27]
    xs = [x[:n] for n in sizes]
    f = SlowWhenLarge()
    with StreamPipeline(f, form="torch", streams=2) as pipe:
        pipe.run_batches(xs)
        assert [s[0] for s in f.shapes] == sizes and pipe.stats.padded is None
        assert pipe._tc.new_shape_s < 0.05
