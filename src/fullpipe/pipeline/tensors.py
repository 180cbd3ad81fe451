"""Tensor-function computes: ``y = f(x)`` with PyTorch tensors or CuPy arrays.

The executor's own compute contract is ``compute(stream, x, y)`` on fullpipe
:class:`~fullpipe.cuda.memory.DeviceArray` views (the "stream" form). A tensor
function is adapted here, per batch, on the batch's lane:

1. ``x`` is the batch's input in fullpipe's device buffer, handed over as a
   zero-copy tensor (:func:`~fullpipe.cuda.interop.as_torch` /
   :func:`~fullpipe.cuda.interop.as_cupy`), with the input's torch dtype when the host
   input was e.g. a bfloat16 tensor;
2. the lane's stream is made current for the framework (``with
   torch.cuda.stream(ts)`` / ``with cs:``; one framework stream object per pipeline
   stream, made once), and ``y = f(x)`` is called;
3. ``y`` itself is copied to the host: the D2H reads ``y.data_ptr()`` on the same
   stream, so there is no device-to-device copy (only a non-contiguous ``y`` is made
   contiguous first, on that stream). ``y``'s memory belongs to the framework's
   caching allocator; it is reused only by work enqueued later on the same stream,
   i.e. after the D2H (with ``copy_streams=True`` the D2H is on another stream, and
   ``y.record_stream`` tells PyTorch so).

The output's row shape and dtype are those of the first batch's ``y`` (read from
the tensor, no synchronization); every later batch must match, and ``y`` must have
one row per input row.

Which form a callable is (:func:`compute_form`) is decided once, at construction,
from the explicit ``form=`` option or, with ``form="auto"``, from its signature;
a callable that could be called either way is refused with a message that says to
pass ``form=``.

``graph=True`` with a PyTorch function: :class:`TorchGraphs` captures ``f`` with
PyTorch's own CUDA graphs (``torch.cuda.CUDAGraph``, so its caching allocator knows
about the capture), one graph per lane and input shape, each with static input and
output tensors; a batch is then ``static_x.copy_(x)`` (one device-to-device copy)
and ``graph.replay()`` on the lane's stream, and the D2H reads ``static_y``.

A function that writes the same device memory in every call breaks step 3 and the
lanes' overlap: one output buffer reused, a CUDA graph's static output, and any
``torch.compile`` mode that replays CUDA graphs (``"reduce-overhead"``,
``"max-autotune"``), whose graphs also share static inputs and intermediates. The
next batch's call, on another lane's stream, writes that memory while the D2H (or
the graph) of the one before still reads it: silently wrong outputs (session 23,
p140: thousands of rows off in most runs). :class:`TensorCompute` watches for it
and then calls the function *serially* (:meth:`TensorCompute.serialize`): each
call waits on the GPU for the one before and its output is copied once on the
device before the next call may write it. Two signs, both checked on every call
until one is seen:

- ``y`` overlaps an output another lane still holds for its D2H: the memory may
  already have been written, so the run raises :class:`ComputeSharesOutput` and the
  pipeline runs it again from the start, serially (executor.py);
- the call ran PyTorch's CUDA graph trees (:meth:`TorchFramework.graph_trees_state`
  changed across it): seen right after the first such call, a warm-up that replays
  no graph, before a second call could; nothing needs doing again.

A run that writes its outputs over its inputs (``run(x, out=x)``) cannot be done
again, so until a run has shown neither sign on two lanes or more (``verified``)
such a run is *careful*: its calls go serially while both signs are still watched.
With ``graph=True``, a capture whose static output overlaps another stream's is
refused (the graphs would race on it).
"""

from __future__ import annotations

import collections
import functools
import inspect
import math
import statistics
import sys
import threading
import time
from typing import Any, Callable

import numpy as np

from ..cuda.interop import HostKind
from ..cuda.memory import DeviceArray, contiguous_strides

FORMS = ("auto", "stream", "torch", "cupy")
MAX_TORCH_GRAPHS = 64
BASE_CACHE_SIZE = 16  # tensors over the lanes' buffers kept across runs (3 per run with the defaults)
SHAPES_SEEN_SIZE = 4096  # input shapes remembered for pad_shapes (run_batches of many shapes: forgotten all at once)
NEW_SHAPE_COSTLY_S = 0.25  # a new batch shape that costs the compute this much is worth padding to avoid
# a batch's input view needs its shape's strides: computed once per shape (a Python loop: ~1.5 us a batch)
_strides = functools.lru_cache(maxsize=SHAPES_SEEN_SIZE)(contiguous_strides)


class ComputeSharesOutput(RuntimeError):
    """A tensor function returned device memory that another batch's output still uses
    (see the module docstring). Raised inside a run, after the adapter has turned to
    serial calls; the executor runs the run again from the start and the caller never
    sees it."""


class TensorFormError(TypeError):
    """The compute's form could not be decided or does not fit the input."""


def _is_torch_module(obj: Any) -> bool:
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn") for c in type(obj).__mro__)


_ANY = math.inf  # most positional arguments of a callable that takes *args


def _positional_arity(fn: Any) -> tuple[int, float] | str | None:
    """(required positional parameters, most positional parameters, ``_ANY`` with
    ``*args``) of ``fn``; "keyword" when it needs a keyword fullpipe cannot supply;
    None when its signature cannot be read (a builtin such as ``torch.sin``, a ufunc)."""
    target = fn.forward if _is_torch_module(fn) else fn
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    required, most = 0, 0.0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            most = _ANY
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            most += 1
            if p.default is p.empty:
                required += 1
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            return "keyword"
    return required, most


def compute_form(compute: Any, form: str = "auto") -> str:
    """"none", "stream" (``compute(stream, x, y)``) or "tensor" (``y = compute(x)``;
    the framework is decided by :func:`tensor_framework`).

    ``form="auto"``: a torch.nn.Module is a tensor function; otherwise the signature
    decides: callable with one positional argument and not three -> "tensor"; with
    three and not one -> "stream". A signature that cannot be read (``torch.sin``,
    ``cupy.tanh``) or that takes ``*args`` after at most one named parameter (a
    decorator's wrapper, such as ``torch.inference_mode()(f)``) is a tensor function:
    the stream form is fullpipe's own, written with its three parameters. Anything else
    (two required arguments, named parameters that fit both, a required keyword) raises
    TensorFormError asking for ``form=``.
    """
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    if compute is None:
        if form not in ("auto", "stream"):
            raise ValueError(f"form={form!r} needs a compute function")
        return "none"
    if not callable(compute):
        raise TypeError(f"compute must be callable, got {type(compute).__name__}")
    if form == "stream":
        return "stream"
    if form in ("torch", "cupy"):
        return "tensor"
    if _is_torch_module(compute):
        return "tensor"
    arity = _positional_arity(compute)
    if arity is None:
        return "tensor"
    if arity != "keyword":
        required, most = arity
        one, three = required <= 1 <= most, required <= 3 <= most
        if one and not three:
            return "tensor"
        if three and not one:
            return "stream"
        if one and most == _ANY:  # f(*args, **kwargs), f(x, *rest): a wrapper, or a function of x
            return "tensor"
    what = ("needs a keyword argument" if arity == "keyword"
            else f"takes {arity[0]} required of {'any number of' if arity[1] == _ANY else int(arity[1])} "
                 "positional arguments")
    raise TensorFormError(
        f"cannot tell how to call {getattr(compute, '__name__', type(compute).__name__)} (it {what}). "
        "Pass form='torch' or form='cupy' for a tensor function y = f(x), or form='stream' for "
        "compute(stream, x, y) on fullpipe DeviceArrays.")


def tensor_framework(compute: Any, form: str, kind: HostKind) -> str:
    """"torch" or "cupy" for a tensor function, decided at the first run: the explicit
    form; else torch for a torch.nn.Module; else the library a function of PyTorch's or
    CuPy's own belongs to (``cupy.tanh``); else torch for a torch input; else PyTorch
    when it is imported (a tensor function is a PyTorch function unless ``form="cupy"`` says
    otherwise: CuPy being imported by some other library must not break a PyTorch
    compute); else CuPy when only it is imported; else an error."""
    if form in ("torch", "cupy"):
        return form
    if _is_torch_module(compute):
        return "torch"
    own = _library_of(compute)
    if own is not None:  # torch.sin, cupy.tanh: the library the function itself belongs to
        return own
    if kind.library == "torch":
        return "torch"
    import sys

    for name in ("torch", "cupy"):
        if name in sys.modules:
            return name
    raise TensorFormError(
        "a tensor function on a NumPy input, and neither PyTorch nor CuPy is imported: "
        "import the library the function uses, or pass form='torch' or form='cupy'.")


def _library_of(compute: Any) -> str | None:
    """"torch" or "cupy" when ``compute`` is one of that library's own functions (or
    ufuncs), by the module it was defined in; None for anything else (a user's function)."""
    module = getattr(compute, "__module__", None) or type(compute).__module__
    top = module.split(".", 1)[0] if isinstance(module, str) else ""
    return top if top in ("torch", "cupy") else None


# --------------------------------------------------------------------------- frameworks
def _repeat_rows(t: Any, rows: int) -> None:
    """Fill ``t[rows:]`` with copies of ``t[:rows]``, in turn, doubling each time, on the
    framework's current stream (a padded batch in its lane's buffer:
    :meth:`TensorCompute._padded_input`). A torch tensor or a CuPy array."""
    n, have = t.shape[0], rows
    while have < n:
        k = min(have, n - have)
        t[have:have + k] = t[:k]
        have += k


class TorchFramework:
    name = "torch"

    def __init__(self, device_index: int):
        import torch

        from ..cuda.interop import as_torch

        self.torch = torch
        self.device_index = device_index
        self.device = torch.device("cuda", device_index)
        self._as_torch = as_torch
        self._np_dtypes: dict[Any, tuple[np.dtype, Any]] = {}
        self._torch_dtypes: dict[np.dtype, Any] = {}  # a NumPy field's torch dtype (record_field)

    def stream(self, fp_stream: Any) -> Any:
        from ..cuda.interop import torch_stream

        return torch_stream(fp_stream, device=self.device_index)

    def current_stream(self) -> Any:
        return self.torch.cuda.current_stream(self.device_index)

    def set_current(self, fs: Any) -> None:
        # (not ``with torch.cuda.stream(fs)`` per batch: saving and restoring the stream
        # around every call costs more host time than the call's own framework overhead)
        self.torch.cuda.set_stream(fs)

    def tensor(self, x: Any, in_dtype: Any) -> Any:
        return self._as_torch(x, torch_dtype=in_dtype)

    def no_rows(self, x_np: np.ndarray, in_dtype: Any) -> Any:
        """An empty device tensor of ``x_np``'s shape (no rows), as ``tensor`` would make it."""
        t = self.torch.from_numpy(np.empty(x_np.shape, x_np.dtype))
        return (t if in_dtype is None else t.view(in_dtype)).to(self.device)

    @staticmethod
    def cut(base: Any, n: int, shape: tuple[int, ...], offset: int = 0) -> Any:
        """``n`` elements of the 1-D tensor ``base`` from element ``offset`` as a tensor of
        ``shape``. One ``as_strided`` (1.9 us on an H100 host) rather than
        ``base[offset:offset + n].view(shape)`` (6.8 us: Python indexing, then a view), once
        per batch (session 14)."""
        return base.as_strided(shape, _strides(shape), offset)

    def host_dtype(self, fw_dtype: Any) -> tuple[np.dtype, Any]:
        """(the NumPy dtype of the host output, the torch dtype to give back or None)."""
        got = self._np_dtypes.get(fw_dtype)
        if got is None:
            from ..cuda.interop import _CARRIER_BY_ITEMSIZE

            t = self.torch.empty((), dtype=fw_dtype)
            try:
                got = (t.numpy().dtype, None)
            except TypeError:  # bfloat16, float8: the bytes travel as an unsigned integer
                got = (_CARRIER_BY_ITEMSIZE[t.element_size()], fw_dtype)
            self._np_dtypes[fw_dtype] = got
        return got

    def output(self, y: Any, fs: Any) -> tuple[Any, tuple[int, ...], Any, int]:
        """(y made contiguous on fs if needed, shape, framework dtype, device address)."""
        if not isinstance(y, self.torch.Tensor):
            raise TypeError(f"the compute returned {type(y).__name__}; a tensor function must return one "
                            f"torch tensor (one output row per input row){_pick_one_hint(y)}{_other_framework_hint(y)}")
        if y.get_device() != self.device_index:  # (-1 on the CPU)
            raise ValueError(f"the compute returned a tensor on {y.device}; it must stay on cuda:{self.device_index} "
                             "(fullpipe copies it to the host)")
        if not y.is_contiguous() or y.is_conj() or y.is_neg():  # (a lazy conjugate or negation: its bytes
            with self.torch.cuda.stream(fs):                     # are not its values, and a D2H copies bytes)
                y = y.resolve_conj().resolve_neg().contiguous()
        return y, tuple(y.shape), y.dtype, y.data_ptr()

    def keep_for(self, y: Any, other_fs: Any) -> None:
        y.record_stream(other_fs)

    def record_field(self, t: Any, f: Any, record_bytes: int) -> Any:
        """Field ``f`` (records.Field) of the records ``t`` (a rows x record_bytes uint8
        tensor, contiguous, field after field) as a contiguous tensor of its own: a view of
        the field's rows, which are together. One ``as_strided`` over the field's bytes, then
        its dtype (and its row shape where that is not one dimension): 8 against 16 us a
        field for ``narrow`` and three views (a 2-core host; compute threads calling a model
        on dict batches spent 6.5 % of their samples here, an H200 host, session 55)."""
        rows = t.shape[0]
        dtype = f.torch_dtype
        if dtype is None:
            dtype = self._torch_dtypes.get(f.dtype)
            if dtype is None:
                from ..cuda.interop import _torch_dtype_for

                dtype = _torch_dtype_for(f.dtype, None) or self.torch.from_numpy(np.empty(0, f.dtype)).dtype
                self._torch_dtypes[f.dtype] = dtype
        cols = t.as_strided((rows, f.row_bytes), (f.row_bytes, 1), t.storage_offset() + rows * f.offset).view(dtype)
        return cols if len(f.row_shape) == 1 else cols.view((rows,) + f.row_shape)

    repeat_rows = staticmethod(_repeat_rows)

    @staticmethod
    def tiled_rows(x: Any, rows: int) -> Any:
        """A new tensor of ``rows`` rows: ``x``'s rows, then copies of them, in turn (on the
        current stream: PyTorch's allocator keeps it for this stream's work)."""
        k = -(-rows // x.shape[0])
        return x.repeat((k,) + (1,) * (x.dim() - 1))[:rows]

    @staticmethod
    def first_rows(y: Any, rows: int) -> Any:
        return y[:rows]

    @staticmethod
    def extent(y: Any) -> tuple[int, int]:
        """[start, end) of the device memory ``y`` spans (a view's own span, not its
        storage's); (0, 0) for an empty tensor."""
        if y.is_contiguous():  # (the common case, per batch: no Python loop over the strides)
            nbytes = y.nbytes
            start = y.data_ptr() if nbytes else 0
            return start, start + nbytes
        if not y.numel():
            return 0, 0
        item = y.element_size()
        start = y.data_ptr()
        return start, start + (1 + sum((n - 1) * st for n, st in zip(y.shape, y.stride()))) * item

    @staticmethod
    def address(y: Any) -> int:
        return y.data_ptr()

    @staticmethod
    def copy(y: Any) -> Any:
        """A copy of ``y`` in new memory, on the current stream."""
        return y.clone()

    def record(self, fs: Any, event: Any) -> Any:
        """``event`` (a new one if None) recorded on ``fs``."""
        if event is None:
            event = self.torch.cuda.Event()
        event.record(fs)
        return event

    @staticmethod
    def wait(fs: Any, event: Any) -> None:
        fs.wait_event(event)

    def graph_trees_state(self) -> Any:
        """Where torch.compile's CUDA graph trees for this device and thread stand
        (``mode="reduce-overhead"`` or ``"max-autotune"``): None (never imported), () (no
        tree manager yet), or (manager, its generation). A call that runs one of their
        graphs changes it: the manager's generation follows torch.compile's count of
        calls (p142, session 23: +1 at each such call, warm-up and recording included;
        nothing for an eager call, nor for a call compiled in the default mode, whose
        manager is untouched). Read through PyTorch's private module: another layout
        reads as None (the output check still stands)."""
        trees = sys.modules.get("torch._inductor.cudagraph_trees")
        if trees is None:
            return None
        try:
            containers = trees.get_obj(trees.local, "tree_manager_containers")
            container = containers.get(self.device_index) or containers.get(self.device)
            manager = container.tree_manager if container is not None else None
            return (id(manager), manager.current_gen) if manager is not None else ()
        except Exception:  # noqa: BLE001 - another PyTorch's private layout
            return None


class CupyFramework:
    name = "cupy"

    def __init__(self, device_index: int):
        import cupy

        self.cupy = cupy
        self.device_index = device_index

    def stream(self, fp_stream: Any) -> Any:
        from ..cuda.interop import cupy_stream

        return cupy_stream(fp_stream, device=self.device_index)

    def current_stream(self) -> Any:
        return self.cupy.cuda.get_current_stream()

    def set_current(self, fs: Any) -> None:
        fs.use()

    def tensor(self, x: Any, in_dtype: Any) -> Any:
        from ..cuda.interop import as_cupy

        return as_cupy(x)

    def no_rows(self, x_np: np.ndarray, in_dtype: Any) -> Any:
        """An empty device array of ``x_np``'s shape and dtype (no rows; a dtype CuPy has not,
        NumPy's bfloat16 or records, as the unsigned integer of its size, as ``tensor`` does)."""
        from ..cuda.interop import cupy_dtype

        with self.cupy.cuda.Device(self.device_index):
            return self.cupy.empty(x_np.shape, cupy_dtype(x_np.dtype))

    @staticmethod
    def cut(base: Any, n: int, shape: tuple[int, ...], offset: int = 0) -> Any:
        return base[offset:offset + n].reshape(shape)

    def host_dtype(self, fw_dtype: Any) -> tuple[np.dtype, Any]:
        return np.dtype(fw_dtype), None

    def output(self, y: Any, fs: Any) -> tuple[Any, tuple[int, ...], Any, int]:
        if not isinstance(y, self.cupy.ndarray):
            raise TypeError(f"the compute returned {type(y).__name__}; a CuPy tensor function must return "
                            f"one cupy.ndarray (one output row per input row){_pick_one_hint(y)}"
                            f"{_other_framework_hint(y)}")
        if y.device.id != self.device_index:
            raise ValueError(f"the compute returned an array on device {y.device.id}; it must stay on "
                             f"device {self.device_index}")
        if not y.flags.c_contiguous:
            with fs:
                y = self.cupy.ascontiguousarray(y)
        return y, tuple(y.shape), y.dtype, y.data.ptr

    def keep_for(self, y: Any, other_fs: Any) -> None:  # pragma: no cover - refused at construction
        raise ValueError("copy_streams=True is not supported with a CuPy tensor function")

    def record_field(self, t: Any, f: Any, record_bytes: int) -> Any:
        """As TorchFramework.record_field, a CuPy array (a view)."""
        rows = t.shape[0]
        cols = t if f.row_bytes == record_bytes else t.reshape(-1)[rows * f.offset:rows * (f.offset + f.row_bytes)]
        from ..cuda.interop import cupy_dtype  # (CuPy has no bfloat16: its bits, as as_cupy gives)

        return cols.view(cupy_dtype(f.dtype)).reshape((rows,) + f.row_shape)

    repeat_rows = staticmethod(_repeat_rows)

    def tiled_rows(self, x: Any, rows: int) -> Any:
        k = -(-rows // x.shape[0])
        return self.cupy.tile(x, (k,) + (1,) * (x.ndim - 1))[:rows]

    @staticmethod
    def first_rows(y: Any, rows: int) -> Any:
        return y[:rows]

    @staticmethod
    def extent(y: Any) -> tuple[int, int]:
        if not y.size:
            return 0, 0
        low = sum(min(0, (n - 1) * st) for n, st in zip(y.shape, y.strides))  # (bytes; may be negative)
        high = sum(max(0, (n - 1) * st) for n, st in zip(y.shape, y.strides)) + y.itemsize
        return y.data.ptr + low, y.data.ptr + high

    @staticmethod
    def address(y: Any) -> int:
        return y.data.ptr

    @staticmethod
    def copy(y: Any) -> Any:
        return y.copy()  # (on CuPy's current stream)

    def record(self, fs: Any, event: Any) -> Any:
        if event is None:
            event = self.cupy.cuda.Event(disable_timing=True)
        event.record(fs)
        return event

    @staticmethod
    def wait(fs: Any, event: Any) -> None:
        fs.wait_event(event)

    @staticmethod
    def graph_trees_state() -> Any:
        return None


def _pick_one_hint(y: Any) -> str:
    """For a model that returns several outputs: how to pick the one to keep."""
    if hasattr(y, "keys"):  # a dict, an OrderedDict, a ModelOutput
        keys = list(y.keys())[:4]
        return (f". It returned a mapping with keys {keys}: wrap it to return one, e.g. "
                f"lambda x: model(x)[{keys[0]!r}]" if keys else "")
    if isinstance(y, (tuple, list)):
        return (f". It returned {len(y)} values: wrap it to return one, e.g. lambda x: model(x)[0] (or run "
                "one pipeline per output)")
    return ""


def _other_framework_hint(y: Any) -> str:
    """For a compute that returned the other framework's array: a CuPy function handed a
    torch tensor takes it (``__cuda_array_interface__``) and returns a cupy.ndarray, so the
    first sign is its output (a NumPy input goes to PyTorch when both are imported)."""
    top = type(y).__module__.split(".")[0]
    if top not in ("torch", "cupy"):
        return ""
    other = "CuPy" if top == "cupy" else "PyTorch"
    return (f". It returned a {other} array, so it is a {other} function: pass form={top!r} to StreamPipeline "
            "(a NumPy input goes to PyTorch when both are imported)")


def make_framework(name: str, device_index: int) -> Any:
    return TorchFramework(device_index) if name == "torch" else CupyFramework(device_index)


# --------------------------------------------------------------------------- the adapter
class TensorCompute:
    """``y = f(x)`` as the executor's ``compute_out(lane, stream, ptr, b) -> (y_ptr, info)``,
    ``info`` being the output's (shape, host NumPy dtype, framework dtype to give back or
    None): the executor sizes the host output from it.

    ``routes``: the pipeline's lanes (protocol.Route); one framework stream per
    pipeline stream is made here, once. ``graphs``: a :class:`TorchGraphs` (graph=True)
    or None. Calls of different lanes may run on different threads at once
    (compute_threads.py): a call touches only its lane's state.

    The batch's input tensor: when the run gives each lane one device buffer
    (pipeline/lanes.py, :meth:`use_lanes`), one framework tensor over the whole
    buffer is made per lane and run, and each batch's ``x`` is cut from it (a slice
    and a view: a few microseconds; making a tensor from an address costs tens).
    Likewise from one tensor over the run's inputs when they were uploaded together
    (bulk.DeviceInputs, :meth:`use_block`). Otherwise it is made per batch.
    """

    def __init__(self, fn: Callable[[Any], Any], framework: Any, routes: list, *, graphs: "TorchGraphs | None" = None):
        self.fn = fn
        self.fw = framework
        by_id: dict[int, Any] = {}
        self._fs = []
        self._fs_out = []
        for r in routes:
            for s in (r.stream, r.d2h_stream):
                if id(s) not in by_id:
                    by_id[id(s)] = framework.stream(s)
            self._fs.append(by_id[id(r.stream)])
            self._fs_out.append(None if r.d2h_stream is r.stream else by_id[id(r.d2h_stream)])
        self._keep: list[Any] = [None] * len(routes)
        self.graphs = graphs
        self.in_dtype: Any = None  # the framework dtype of x (a bfloat16 torch input), or None
        self.np_dtype: np.dtype = np.dtype(np.uint8)  # the host input's dtype (the device bytes' layout)
        self._bases: list[tuple[int, Any]] = []  # per lane: (address, 1-D tensor over its buffer)
        self._block: tuple[int, int, Any] | None = None  # the run's inputs: (address, end, 1-D tensor over them)
        self._base_cache: dict[tuple, Any] = {}  # (address, bytes, dtypes) -> 1-D tensor over it, across runs
        self._caller_stream: Any = None  # the framework's current stream before the run, restored after
        self.out_row_bytes = 0  # the largest output row seen in run_batches (the executor's bulk staging)
        self.called = False  # f has returned once (a TypeError before that may be the wrong framework)
        # calls one after another on the GPU (see the module docstring): why, or None
        self.serial: str | None = None
        # no sign seen in a run whose calls were checked on two lanes or more: an in-place run
        # need not be careful (begin_run)
        self.verified = False
        self._careful = False  # this run: calls serial, and checked, until verified (begin_run)
        self._checked_lanes: set[int] = set()
        self._held: list[tuple[int, int]] = [(0, 0)] * len(routes)  # per lane: the returned y's [start, end)
        self._raw: list[Any] = [None] * len(routes)  # careful runs: each lane's last y as returned (alive)
        self._check_lock = threading.Lock()  # (calls on compute threads check at once)
        self._serial_lock = threading.Lock()
        self._serial_done: Any = None  # the event after the last serial call and its copy
        # Batch shapes (StreamPipeline's pad_shapes; see pays_to_pad): the shapes f was called with
        # (with the input's dtypes), what a new one costs its first call (new_shape_s), the recent
        # calls' host times, the compute's GPU time per row (the executor's), what padding has cost
        self.pad_shapes: bool | str = "auto"
        self.bucket = False  # this run: a batch of a new shape may run at a seen one (run_batches)
        self.shapes_seen: set[tuple] = set()  # (input shape, dtype key)
        self.new_shape_calls = 0  # calls at a shape not seen before (a run that made some paid their setup)
        self.shape_cost_hint = 0.0  # what chunk="auto"'s probes measured a new shape cost (the executor's)
        self.gpu_row_s: dict[tuple, float] = {}  # (row shape, dtype key) -> GPU compute time per row
        self._dtype_key: tuple = ()
        self._call_times: collections.deque = collections.deque(maxlen=32)
        self._timed_first = False  # the first call of all carries one-time costs: not a shape's
        self.last_calls: collections.deque = collections.deque(maxlen=2)  # the last two calls' host time, s
        self._shape_first: dict[tuple, tuple[float, int]] = {}  # a shape called once: (its host time, lane)
        self._pair_excess: float | None = None  # the latest shape's first call over its second
        self._new_calls: collections.deque = collections.deque(maxlen=2)  # the last two new shapes' first calls
        self._tried = False  # _trial_rows has padded its one batch
        self._pad_paid: dict[tuple, float] = {}
        self._shape_lock = threading.Lock()  # (calls on compute threads count and pay at once)
        self.padded_rows = self.padded_batches = 0  # this run's padded batches (_padded_input)
        # this run's batches of several arrays (records.py): batch index -> its layout; None: one array each
        self.records: Callable[[int], Any] | None = None

    @staticmethod
    def dtype_key(np_dtype: Any, in_dtype: Any) -> tuple:
        """What tells a batch's dtype apart for its shape's sake (begin_run's arguments)."""
        return (np.dtype(np_dtype).str, in_dtype)

    def begin_run(self, in_dtype: Any, np_dtype: Any = np.uint8, in_place: bool = False,
                  bucket: bool = False, pad_shapes: bool | str = "auto") -> None:
        """``in_dtype``: the framework dtype x is given as (None: from ``np_dtype``);
        ``np_dtype``: the host input's dtype. ``in_place``: the outputs overwrite the
        inputs (``run(x, out=x)``): a run that showed the first sign could not be done
        again, so until a run has shown neither sign the calls go serially, still checked.
        ``bucket``: a batch of a new shape may run at a seen one (run_batches); ``pad_shapes``:
        the pipeline's option (StreamPipeline)."""
        self.in_dtype = in_dtype
        self.np_dtype = np.dtype(np_dtype)
        self.padded_rows = self.padded_batches = 0
        self.bucket = bucket
        self.pad_shapes = pad_shapes
        self._dtype_key = self.dtype_key(self.np_dtype, in_dtype)
        self._bases = []
        self._block = None
        self._held = [(0, 0)] * len(self._held)
        self._checked_lanes = set()
        self._careful = in_place and not self.verified and self.serial is None
        self._caller_stream = self.fw.current_stream()

    def use_lanes(self, buffers: list[tuple[int, int]]) -> None:
        """This run's lane buffers, (address, bytes) per lane: batch inputs are cut from
        one tensor per lane (valid until :meth:`release`)."""
        self._bases = [(ptr, self._base_tensor(ptr, nbytes)) for ptr, nbytes in buffers]

    def use_block(self, ptr: int, nbytes: int) -> None:
        """This run's inputs are on the device in one block at ``ptr``: batch inputs are
        cut from one tensor over it (valid until :meth:`release`)."""
        self._block = (ptr, ptr + nbytes, self._base_tensor(ptr, nbytes))

    def _base_tensor(self, ptr: int, nbytes: int) -> Any:
        """A 1-D tensor over [ptr, ptr + nbytes) (no ownership: the run holds the memory).
        Kept for later runs: the lanes' buffers come back at the same addresses from the
        pool, and making the tensor costs 30-50 us (100 us of a small run's ~600, session 20)."""
        key = (ptr, nbytes, self.np_dtype, self.in_dtype)
        t = self._base_cache.get(key)
        if t is None:
            item = self.np_dtype.itemsize
            t = self.fw.tensor(DeviceArray(ptr, (nbytes // item,), self.np_dtype, device_index=self.fw.device_index),
                               self.in_dtype)
            if len(self._base_cache) >= BASE_CACHE_SIZE:
                self._base_cache.clear()
            self._base_cache[key] = t
        return t

    def _input(self, lane: int, ptr: int, shape: tuple[int, ...]) -> Any:
        block = self._block
        if block is not None and block[0] <= ptr < block[1]:  # (batch places are aligned to whole elements)
            return self.fw.cut(block[2], math.prod(shape), shape, (ptr - block[0]) // self.np_dtype.itemsize)
        if self._bases:
            base_ptr, base = self._bases[lane]
            if base_ptr == ptr:
                return self.fw.cut(base, math.prod(shape), shape)
        return self.fw.tensor(DeviceArray(ptr, shape, self.np_dtype, device_index=self.fw.device_index), self.in_dtype)

    def __call__(self, lane: int, stream: Any, ptr: int, b: Any) -> tuple[int, tuple]:
        fw, fs = self.fw, self._fs[lane]
        bucket = self.bucket and self.records is None  # (records.py: a batch's record_bytes is not its fields' shapes)
        pad_to = b.pad_to or (self._bucket(b.in_shape, lane) if bucket else 0)
        keep = 0  # a padded batch: the rows of f's output that are the batch's own
        x_span = (ptr, ptr + b.in_bytes)
        if pad_to:
            xt, in_lane = self._padded_input(lane, fs, ptr, b, pad_to)
            keep, called = b.in_shape[0], (pad_to,) + b.in_shape[1:]
            if in_lane:
                x_span = (ptr, ptr + b.in_bytes // keep * pad_to)
        else:
            xt, called = self._input(lane, ptr, b.in_shape), b.in_shape
        key = (called, self._dtype_key)
        new = key not in self.shapes_seen
        t0 = time.perf_counter()
        g = None
        if self.graphs is not None:  # (a batch of several arrays: its layout is part of its graph's key)
            g = (self.graphs.replay(lane, fs, xt, self.fn) if self.records is None else
                 self.graphs.replay(lane, fs, xt, functools.partial(self.call_fn, index=b.index), self.records(b.index)))
        if g is not None:  # (fullpipe's own graphs: static tensors per lane)
            y, shape, dtype, ptr = fw.output(self._unpad(g, pad_to, keep), fs)
        elif self.serial is not None or self._careful:
            y, shape, dtype, ptr = self._call_serially(lane, fs, xt, x_span, pad_to, keep, b.index)
        else:
            fw.set_current(fs)  # each call runs on its lane's stream; the caller's stream comes back in release()
            trees = fw.graph_trees_state()
            raw = self._unpad(self.call_fn(xt, b.index), pad_to, keep)
            if self._shares(lane, raw, x_span):
                self.serialize(_OUTPUT_SHARED)
                raise ComputeSharesOutput("the compute returned device memory that an earlier batch's output "
                                          "still uses")
            y, shape, dtype, ptr = fw.output(raw, fs)
            if _graphs_ran(trees, fw.graph_trees_state()):
                self.serialize(_GRAPHS_RAN)
                y, ptr = self._copy_for_next(fs, y)  # (this call's output, before any next call)
        self._learn_shape_cost(key, new, time.perf_counter() - t0, lane)
        check_rows(shape, b.in_shape)
        if self._fs_out[lane] is not None:
            fw.keep_for(y, self._fs_out[lane])
        self._keep[lane] = y  # alive until this lane's next batch: its D2H is enqueued by then
        host_dtype, give_back = fw.host_dtype(dtype)
        return ptr, (shape, host_dtype, give_back)

    def _padded_input(self, lane: int, fs: Any, ptr: int, b: Any, rows: int) -> tuple[Any, bool]:
        """Batch ``b`` padded to ``rows`` rows, a batch shape f has seen: its rows, then
        copies of them, in turn. In its lane's buffer after it where the buffer has room
        (True), else a new tensor on the lane's stream (one device copy more)."""
        fw = self.fw
        shape = (rows,) + tuple(b.in_shape[1:])
        n = math.prod(shape)
        fw.set_current(fs)  # (the copies go on the lane's stream, after the batch's H2D)
        with self._shape_lock:
            self.padded_rows += rows - b.in_shape[0]
            self.padded_batches += 1
        if self.records is not None:  # (field after field: each field's rows repeated, records.py)
            return self.records(b.index).padded(fw, self._input(lane, ptr, b.in_shape), rows), False
        if self._bases and self._bases[lane][0] == ptr and n <= math.prod(self._bases[lane][1].shape):
            xt = fw.cut(self._bases[lane][1], n, shape)
            fw.repeat_rows(xt, b.in_shape[0])
            return xt, True
        return fw.tiled_rows(self._input(lane, ptr, b.in_shape), rows), False

    def has_seen(self, shape: tuple[int, ...], dtype_key: tuple) -> bool:
        return (tuple(shape), dtype_key) in self.shapes_seen

    def learn_from_probes(self, new_shape_s: float, compute_s_per_row: float, row_shape: tuple[int, ...],
                          dtype_key: tuple) -> None:
        """chunk="auto"'s probe readings: what a new shape cost the compute, and its GPU time
        per row (kept only until a timed run measures it: :meth:`learn_compute_time`)."""
        self.shape_cost_hint = max(self.shape_cost_hint, new_shape_s)
        key = (tuple(row_shape), dtype_key)
        if compute_s_per_row and key not in self.gpu_row_s:
            self.gpu_row_s[key] = compute_s_per_row

    def learn_compute_time(self, in_shapes: list[tuple[int, ...]], compute_s: float) -> None:
        """A timed run's GPU compute time (its batches' input shapes, as in this run's
        begin_run): per row, the padding's price (:meth:`pays_to_pad`), where the batches
        share one row shape. The padded rows were computed too."""
        row_shapes = {s[1:] for s in in_shapes}
        if len(row_shapes) == 1 and compute_s > 0:
            rows = sum(s[0] for s in in_shapes) + self.padded_rows
            self.gpu_row_s[(row_shapes.pop(), self._dtype_key)] = compute_s / rows

    @property
    def new_shape_s(self) -> float:
        """What a new batch shape costs f's first call (a framework's per-shape setup: cuDNN
        plans, a recompile): the larger of what chunk="auto"'s probes measured and what the
        calls have shown. The calls: the latest shape's first call over its second (a batch
        that is large, or a function that waits for the GPU, takes long at every call, not
        just the first); where it is known, no more than the last two new shapes' first calls
        over the quickest recent call (a hiccup of the host is not a shape's cost). Not the
        first call of all, which carries the compute's one-time costs."""
        measured = 0.0
        with self._shape_lock:  # (calls on compute threads record at once)
            if self._pair_excess is not None:
                measured = self._pair_excess
                if len(self._new_calls) == 2:
                    measured = min(measured, min(self._new_calls) - min(self._call_times))
        return max(self.shape_cost_hint, measured)

    def _learn_shape_cost(self, key: tuple, new: bool, call_s: float, lane: int) -> None:
        """Record a call of f (``key``: its shape and dtypes, ``new``: first seen now) on ``lane``."""
        with self._shape_lock:
            self.last_calls.append(call_s)
            if new:
                self.new_shape_calls += 1
                if len(self.shapes_seen) >= SHAPES_SEEN_SIZE:
                    self.shapes_seen.clear()
                    self._shape_first.clear()
                self.shapes_seen.add(key)
            if not self._timed_first:
                self._timed_first = True
                return
            times = self._call_times
            if new:
                self._new_calls.append(call_s)
                self._shape_first[key] = (call_s, lane)
            else:
                first = self._shape_first.pop(key, None)
                if first is not None:
                    self._pair_excess = first[0] - call_s
            times.append(call_s)

    def pays_to_pad(self, shape: tuple[int, ...], dtype_key: tuple, to_rows: int, mode: bool | str,
                    costly: bool = False) -> bool:
        """Run a batch of ``shape`` at ``to_rows`` rows, a shape f has seen? Always with
        ``mode`` (StreamPipeline's ``pad_shapes``) True; with "auto", where a new shape is costly (``new_shape_s`` at
        least NEW_SHAPE_COSTLY_S, or ``costly``: the caller found it a good part of a run's
        time) and only until what padding this shape has cost adds up to
        one new shape's cost: then it runs at its own shape, seen from then on (rent until
        the rent paid would buy: at most about twice the better of the two in hindsight).
        Padding's cost: the rows added at the compute's GPU time per row (timed runs), or
        their share of a recent call's host time where that is more."""
        if mode is True:
            return True
        new_shape_s = self.new_shape_s
        if mode is False or new_shape_s <= 0.0 or (new_shape_s < NEW_SHAPE_COSTLY_S and not costly):
            return False
        typical_s = statistics.median(self._call_times) if self._call_times else 0.0
        per_row_s = max(self.gpu_row_s.get((tuple(shape[1:]), dtype_key), 0.0), typical_s / to_rows)
        key = (tuple(shape), dtype_key)
        with self._shape_lock:
            paid = self._pad_paid.get(key, 0.0) + (to_rows - shape[0]) * per_row_s
            if paid > new_shape_s:
                return False
            if len(self._pad_paid) >= SHAPES_SEEN_SIZE:
                self._pad_paid.clear()
            self._pad_paid[key] = paid
        return True

    def _bucket(self, shape: tuple[int, ...], lane: int) -> int:
        """run_batches: the rows to run a batch of a shape f has not been called with at,
        or 0: the fewest rows of a seen shape of the same row shape and dtypes, at most
        twice the batch's (so a padded batch costs at most one more batch's compute),
        where :meth:`pays_to_pad`."""
        dkey = self._dtype_key
        if self.pad_shapes is False or (shape, dkey) in self.shapes_seen:
            return 0
        best = self._fewest_rows_above(shape, dkey, self.shapes_seen)
        if best and self.pays_to_pad(shape, dkey, best, self.pad_shapes):
            return best
        return self._trial_rows(shape, dkey, lane)

    @staticmethod
    def _fewest_rows_above(shape: tuple[int, ...], dkey: tuple, among: Any) -> int:
        """The fewest rows of a shape in ``among`` (keys: shape, dtype key) with ``shape``'s
        row shape and dtypes, more than its rows and at most twice them; 0 if none."""
        rows, row_shape = shape[0], shape[1:]
        best = 0
        for s, d in tuple(among):  # (a copy: calls on compute threads add to it)
            if d == dkey and s[1:] == row_shape and rows < s[0] <= 2 * rows and (not best or s[0] < best):
                best = s[0]
        return best

    def _trial_rows(self, shape: tuple[int, ...], dkey: tuple, lane: int) -> int:
        """pad_shapes="auto" where no shape has been called twice yet (a list of batches of
        all different sizes) but the last two new shapes' calls each took a costly shape's
        time: pad this batch (on ``lane``) to a shape called once, and its second call tells
        whether that time was the shape's (a framework's per-shape setup: the call is now
        quick) or the work's (it is as slow as before). A shape first called on the same lane
        where one fits, so that nothing kept per stream (an allocator's blocks, a graph
        captured per lane) is new to the second call; where it is, the call reads slow and
        nothing is padded. Once (on compute threads too): that second call answers it. Costs
        at most one batch's compute; 0 where no such shape fits."""
        if self.pad_shapes != "auto" or self._pair_excess is not None or self._tried:
            return 0
        with self._shape_lock:
            if self._tried or not (len(self._new_calls) == 2 and min(self._new_calls) >= NEW_SHAPE_COSTLY_S):
                return 0
            here = [k for k, (_, first_lane) in self._shape_first.items() if first_lane == lane]
            rows = self._fewest_rows_above(shape, dkey, here) or self._fewest_rows_above(shape, dkey,
                                                                                         self._shape_first)
            self._tried = rows > 0
            return rows

    def _unpad(self, raw: Any, rows: int, keep: int) -> Any:
        """f's output for a padded input: checked for one row per input row, then its
        first ``keep`` rows (a view); as is when nothing was padded."""
        if not keep:
            return raw
        shape = getattr(raw, "shape", None)
        if shape is None:
            return raw  # (output() says what is wrong with it)
        check_rows(tuple(shape), (rows,))  # (f was given ``rows`` rows: the batch's ``keep`` and copies)
        return self.fw.first_rows(raw, keep)

    def _shares(self, lane: int, raw: Any, x_span: tuple[int, int]) -> bool:
        """The first sign: does ``raw`` (f's result, before any contiguous copy) span memory
        of an output another lane still holds (its D2H, or its contiguous copy, may still
        read it)? Records ``raw``'s span for this lane otherwise. A view of the batch's own
        input is fullpipe's memory and never counts."""
        try:
            lo, hi = self.fw.extent(raw)
        except (AttributeError, TypeError):  # not a tensor: output() says what is wrong with it
            return False
        if x_span[0] <= lo and hi <= x_span[1]:
            lo = hi = 0
        own_d2h_in_order = self._fs_out[lane] is None  # (the lane's own D2H is ordered after its calls)
        with self._check_lock:
            if hi > lo:
                for k, (a, z) in enumerate(self._held):
                    if a < hi and lo < z and not (k == lane and own_d2h_in_order):
                        return True
            self._held[lane] = (lo, hi)
            self._checked_lanes.add(lane)
        return False

    def serialize(self, why: str) -> None:
        """From now on, each call waits on the GPU for the one before and its output is
        copied on the device before the next call may write the memory it returned."""
        if self.serial is None:
            self.serial = why

    def _call_serially(self, lane: int, fs: Any, xt: Any, x_span: tuple[int, int], pad_to: int = 0,
                       keep: int = 0, index: int = 0) -> tuple[Any, tuple[int, ...], Any, int]:
        """A call after the one before it on the GPU, its output copied before the next.
        In a careful run (``begin_run``) both signs are still watched, to learn whether the
        function needs this: a sign makes it serial for good; neither, on two lanes or more,
        makes it verified (``release``). Careful calls keep their raw output alive, so new
        memory of the framework's allocator cannot take its place and read as a sign."""
        fw = self.fw
        with self._serial_lock:  # (calls on compute threads take turns)
            if self._serial_done is not None:
                fw.wait(fs, self._serial_done)
            fw.set_current(fs)
            learning = self.serial is None
            trees = fw.graph_trees_state() if learning else None
            raw = self._unpad(self.call_fn(xt, index), pad_to, keep)
            if learning:
                if self._shares(lane, raw, x_span):
                    self.serialize(_OUTPUT_SHARED)
                elif _graphs_ran(trees, fw.graph_trees_state()):
                    self.serialize(_GRAPHS_RAN)
                self._raw[lane] = raw
            y, shape, dtype, _ = fw.output(raw, fs)
            y, ptr = self._copy_for_next(fs, y)
        return y, shape, dtype, ptr

    def _copy_for_next(self, fs: Any, y: Any) -> tuple[Any, int]:
        """``y`` copied on ``fs`` (the memory the function returned is free for its next
        call), and the event the next call waits on recorded after it: (the copy, its address)."""
        y = self.fw.copy(y)
        self._serial_done = self.fw.record(fs, self._serial_done)
        return y, self.fw.address(y)

    def output_of_no_rows(self, x_np: np.ndarray, kind: Any) -> tuple[tuple[int, ...], np.dtype, Any]:
        """(row shape, host NumPy dtype, framework dtype to give back or None) of f's output
        for the input ``x_np`` with no rows: f called once on it, on the caller's stream."""
        xt = self.fw.no_rows(x_np, kind.torch_dtype if kind.reinterpreted else None)
        try:
            y = self.call_fn(xt)
        except Exception as exc:
            exc.add_note("(the input has no rows: f was called once on an empty batch to learn its output's "
                         "row shape and dtype)")
            raise
        y, shape, dtype, _ = self.fw.output(y, self.fw.current_stream())
        check_rows(shape, tuple(x_np.shape))
        host_dtype, give_back = self.fw.host_dtype(dtype)
        return shape[1:], host_dtype, give_back

    def call_fn(self, xt: Any, index: int = 0) -> Any:
        """``f(xt)``, or for batch ``index`` of a run of several arrays per batch, ``f`` of
        them as given, unpacked from ``xt``'s records (records.py); a TypeError from the
        first call gets a note on the framework it was handed (a CuPy function given a
        torch tensor, or the other way round)."""
        if self.records is not None:
            xt = self.records(index).unpack(self.fw, xt)
        try:
            y = self.fn(xt)
        except Exception as exc:
            if isinstance(exc, (TypeError, AttributeError)) and not self.called and self.records is not None:
                self.records(index).note(exc)  # (what f was given: a model of one tensor handed [x, labels])
            elif isinstance(exc, TypeError) and not self.called:
                _note_framework(exc, self.fw.name)
            _note_graph_trees_off_thread(exc)
            raise
        self.called = True
        return y

    def release(self) -> None:
        """Drop the outputs kept for the D2H and the lane tensors (the streams have
        drained; the lane buffers go back to the pool), and make the caller's stream
        current again."""
        if self.serial is None and len(self._checked_lanes) >= 2:
            self.verified = True
        self._careful = False
        self._keep = [None] * len(self._keep)
        self._raw = [None] * len(self._raw)
        self._held = [(0, 0)] * len(self._held)
        self._checked_lanes = set()
        self._bases = []
        self._block = None
        if self._caller_stream is not None:
            self.fw.set_current(self._caller_stream)
            self._caller_stream = None

    def close(self) -> None:
        self.release()
        if self.graphs is not None:
            self.graphs.clear()


def check_rows(shape: tuple[int, ...], in_shape: tuple[int, ...]) -> None:
    if not shape or shape[0] != in_shape[0]:
        raise ValueError(f"the compute returned shape {shape} for an input of shape {in_shape}: a tensor "
                         "function must return one output row per input row (y.shape[0] == x.shape[0])")


def _note_framework(exc: BaseException, given: str) -> None:
    """A TypeError from ``f``'s first call, with the other framework imported: most likely
    ``f`` is that framework's function and was handed the other's tensor (a NumPy input
    goes to PyTorch when both are imported). Say so beside the framework's own message
    (CuPy's reads "The input array a must be a cupy.ndarray")."""
    import sys

    other = "cupy" if given == "torch" else "torch"
    if other in sys.modules and hasattr(exc, "add_note"):
        kind = "torch.Tensor" if given == "torch" else "cupy.ndarray"
        exc.add_note(f"fullpipe handed the compute a {kind}. If it is a "
                     f"{'CuPy' if other == 'cupy' else 'PyTorch'} function, pass form={other!r} to StreamPipeline "
                     "(a NumPy input goes to PyTorch when both are imported).")


_OUTPUT_SHARED = ("the compute returned memory that an earlier batch's output, still being copied out, used (one "
                  "output buffer written again, or a CUDA graph's static output)")
_GRAPHS_RAN = ("the compute runs torch.compile's CUDA graphs (mode='reduce-overhead' or 'max-autotune'), whose "
               "replays share static memory")


def _graphs_ran(before: Any, after: Any) -> bool:
    """The second sign: a CUDA graph tree manager after the call, not where it stood
    before (TorchFramework.graph_trees_state)."""
    return bool(after) and after != before


def _note_graph_trees_off_thread(exc: BaseException) -> None:
    """torch.compile's CUDA graph trees (mode="reduce-overhead", "max-autotune") keep their
    state per thread and fail, with a bare AssertionError, on fullpipe's compute threads
    (compute_threads > 1: session 23). Say so."""
    import traceback

    from .compute_threads import on_compute_thread

    if (on_compute_thread() and hasattr(exc, "add_note")
            and any("cudagraph_trees" in f.filename for f in traceback.extract_tb(exc.__traceback__))):
        exc.add_note("torch.compile's CUDA graphs (mode='reduce-overhead' or 'max-autotune') failed on a compute "
                     "thread: PyTorch keeps their state per thread. Use compute_threads=1 (such a model's calls "
                     "run one after another anyway), or compile it in another mode.")


class TorchGraphs:
    """graph=True for a PyTorch tensor function: one ``torch.cuda.CUDAGraph`` per lane
    and input shape, captured by PyTorch (``capture_begin``/``capture_end`` on the
    lane's stream, ``capture_error_mode="thread_local"`` so that other threads' CUDA
    calls are not disturbed), each with its own private memory pool (graphs of
    different lanes replay concurrently, so they must not share one).

    Per batch: ``static_x.copy_(x)`` and ``replay()`` on the lane's stream; the
    output is ``static_y`` (read by the D2H on the same stream, before the next
    replay of that graph). The first batch of a lane and shape runs ``f`` once
    eagerly first (warm-up: lazy initialisation such as cuBLAS workspaces or cuDNN
    autotuning must not happen inside the capture), then captures, then replays.

    Failures: an exception in ``f`` during the capture ends the capture and is
    re-raised as is (the executor drains and annotates it as for any compute
    error); a capture that PyTorch or the driver refuses (``f`` synchronizes, copies
    to the host, allocates outside the capture's pool ...) raises GraphCaptureError
    (a ValueError). Either way the stream leaves capture mode and nothing is cached.
    More than ``max_graphs`` shapes: the other batches run eagerly (counted)."""

    def __init__(self, max_graphs: int = MAX_TORCH_GRAPHS):
        import torch

        self.torch = torch
        self.max_graphs = max_graphs
        self._cache: dict[tuple, tuple[Any, Any, Any]] = {}
        self.launches = self.captures = self.fallbacks = 0
        self.capture_s = 0.0

    def __len__(self) -> int:
        return len(self._cache)

    def begin_run(self) -> None:
        self.launches = self.captures = self.fallbacks = 0
        self.capture_s = 0.0

    def replay(self, lane: int, fs: Any, xt: Any, fn: Callable[[Any], Any], layout: Any = None) -> Any:
        """The static output after replaying this lane's graph for xt's shape (captured
        now if needed), or None: run f eagerly (the cache is full). ``layout``: the records
        layout ``fn`` unpacks ``xt`` with (records.py), one graph per layout: batches of equal
        bytes per row may hold fields of other shapes, at other offsets."""
        key = (lane, tuple(xt.shape), xt.dtype, layout)
        got = self._cache.get(key)
        torch = self.torch
        if got is None:
            if len(self._cache) >= self.max_graphs:
                self.fallbacks += 1
                return None
            t0 = time.perf_counter()
            got = self._capture(key, fs, xt, fn)
            self.capture_s += time.perf_counter() - t0
        graph, static_x, static_y = got
        with torch.cuda.stream(fs):
            static_x.copy_(xt)
            graph.replay()
        self.launches += 1
        return static_y

    def _capture(self, key: tuple, fs: Any, xt: Any, fn: Callable[[Any], Any]) -> tuple[Any, Any, Any]:
        from .graphs import GraphCaptureError

        torch = self.torch
        with torch.cuda.stream(fs):
            static_x = torch.empty_like(xt)
            static_x.copy_(xt)
            fn(static_x)  # warm-up, eagerly, on this stream
            graph = torch.cuda.CUDAGraph()
            failure: BaseException | None = None
            end_error: BaseException | None = None
            static_y = None
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                static_y = fn(static_x)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the capture ended
                failure = exc
            try:
                graph.capture_end()
            except Exception as exc:  # noqa: BLE001
                end_error = exc
        _leave_capture(fs)
        if failure is not None or end_error is not None:
            _reset_torch_generators(torch)
        if failure is not None:
            if isinstance(failure, Exception) and end_error is not None:
                raise GraphCaptureError(_torch_capture_message(failure)) from failure
            raise failure
        if end_error is not None:
            raise GraphCaptureError(_torch_capture_message(end_error)) from end_error
        if not isinstance(static_y, torch.Tensor):
            raise TypeError(f"the compute returned {type(static_y).__name__}; a tensor function must return one "
                            "torch tensor")
        lo, hi = TorchFramework.extent(static_y)
        for (lane, *_), (_, _, other_y) in self._cache.items():
            a, z = TorchFramework.extent(other_y)
            if lane != key[0] and a < hi and lo < z:  # (one lane's graphs replay in order on its stream)
                raise ValueError("graph=True: the compute returns memory that another stream's graph returns too "
                                 "(one output buffer it writes in every call): the graphs would race on it. Return "
                                 "a new tensor, or pass graph=False (fullpipe then calls it one call after another)")
        self._cache[key] = (graph, static_x, static_y)
        self.captures += 1
        return graph, static_x, static_y

    def clear(self) -> None:
        """Drop every graph and its static tensors (the streams must have drained)."""
        self._cache.clear()

    def run_stats(self, batches: int) -> dict[str, Any]:
        reason = (f"{self.launches} of {batches} batches replayed a PyTorch CUDA graph of the compute "
                  f"({self.captures} captured this run, {len(self._cache)} cached; copies and allocation "
                  "stay outside the graph)")
        if self.fallbacks:
            reason += f"; {self.fallbacks} batches ran eagerly: the cache holds at most {self.max_graphs} graphs"
        return {"kind": "torch", "graphs": len(self._cache), "launches": self.launches, "captures": self.captures,
                "capture_ms": self.capture_s * 1e3, "fallback_batches": self.fallbacks,
                "max_graphs": self.max_graphs, "reason": reason}


def _reset_torch_generators(torch: Any) -> None:
    """After a failed capture, give each CUDA generator a fresh copy of its state.

    capture_begin puts PyTorch's CUDA generators into capture mode and only a
    successful capture_end takes them out; after an invalidated capture every later
    random op of the process raised "Offset increment outside graph capture
    encountered unexpectedly" (seen on the H200 GPU suite). clone_state() copies seed
    and offset into a state that is not capturing. Best effort: older PyTorch lacks it."""
    try:
        for gen in torch.cuda.default_generators:
            gen.graphsafe_set_state(gen.clone_state())
    except Exception:  # noqa: BLE001 - the capture's own error is what the user sees
        pass


def _leave_capture(fs: Any) -> None:
    """Make sure the stream is not left capturing (a capture_end that raised early)."""
    from ..cuda import driver as drv

    try:
        handle = fs.cuda_stream
        status = drv.call("cuStreamIsCapturing", handle)
        if int(status) != 0:
            graph = drv.call("cuStreamEndCapture", handle)
            if graph is not None and int(graph) != 0:
                drv.call("cuGraphDestroy", graph)
    except Exception:  # noqa: BLE001 - best effort: the error that brought us here is reported
        pass


def _torch_capture_message(exc: BaseException) -> str:
    return (
        f"graph=True: capturing the PyTorch compute into a CUDA graph failed ({exc}). With graph=True a "
        "torch tensor function is captured once per stream and input shape with torch.cuda.CUDAGraph: it must "
        "only enqueue capturable GPU work (no .item(), .cpu(), .tolist(), printing tensors, synchronization, "
        "or data-dependent shapes). Use graph=False for this compute.")
