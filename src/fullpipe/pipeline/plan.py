"""Checking a pipeline's inputs and cutting them into batches: pure host logic.

Everything here runs before any GPU work, so that a user mistake (wrong dtype,
empty input, output of the wrong size, chunk <= 0, streams < 1) is a clear
``ValueError``/``TypeError`` and nothing has been allocated or enqueued yet.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from typing import Any, Sequence

import numpy as np

OUTPUT_SAME = "same"

_char_over = ctypes.c_char.from_buffer


def host_address(a: np.ndarray) -> int:
    """The address of a host array's first byte. Through the buffer protocol (0.7 us) for a
    writable C-contiguous array of at least one byte, else ``ctypes.data``: NumPy builds that
    one in Python, 1.5-3 us here and 5-6 us on an H200 host, where reading it twice an output
    was a third of fullpipe's own time a batch over 4000 tiny batches (session 54)."""
    try:
        return ctypes.addressof(_char_over(a))
    except (TypeError, ValueError, BufferError):  # read-only, not contiguous, no bytes
        return a.ctypes.data


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """What one batch's output looks like: ``row_shape`` None means "like the input
    row", ``dtype`` None means "like the input dtype"; ``none`` means no output."""

    none: bool = False
    row_shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None

    def shape_for(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        row = in_shape[1:] if self.row_shape is None else self.row_shape
        return (in_shape[0],) + tuple(row)

    def dtype_for(self, in_dtype: np.dtype) -> np.dtype:
        return in_dtype if self.dtype is None else self.dtype


def parse_output(output: Any) -> OutputSpec:
    """``"same"`` (default), ``None`` (no output: compute consumes the batch), or
    ``(row_shape, dtype)`` for an output whose rows differ from the input's."""
    if output is None:
        return OutputSpec(none=True)
    if isinstance(output, str):
        if output != OUTPUT_SAME:
            raise ValueError(f"output must be 'same', None or (row_shape, dtype), got {output!r}")
        return OutputSpec()
    if isinstance(output, tuple) and len(output) == 2:
        row, dtype = output
        row = (row,) if isinstance(row, (int, np.integer)) else tuple(row)
        if any(int(r) <= 0 for r in row):
            raise ValueError(f"output row shape must be positive, got {row}")
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"output dtype {dtype!r} is not a NumPy dtype") from exc
        check_dtype(dt, "output")
        return OutputSpec(row_shape=tuple(int(r) for r in row), dtype=dt)
    raise ValueError(f"output must be 'same', None or (row_shape, dtype), got {output!r}")


def check_positive_int(value: Any, what: str, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}" + (f"; {hint}" if hint else ""))
    return int(value)


def check_dtype(dtype: np.dtype, what: str) -> None:
    if dtype.hasobject or dtype.kind not in "biufcV" or dtype.itemsize == 0:
        raise ValueError(
            f"{what} dtype {dtype} cannot go to the GPU: use a numeric dtype (e.g. float32, uint8)"
        )


def as_host_array(x: Any, what: str = "input") -> np.ndarray:
    """A C-contiguous, non-empty NumPy array with at least one dimension, or ValueError."""
    if isinstance(x, np.ndarray):
        arr = x
    elif hasattr(x, "__cuda_array_interface__") or hasattr(x, "__cuda_stream__"):
        raise TypeError(f"{what} is a device array; StreamPipeline takes host (NumPy) arrays")
    else:
        try:
            arr = np.asarray(memoryview(x))
        except TypeError as exc:
            raise TypeError(
                f"{what} must be a NumPy array or an object with the buffer protocol, "
                f"got {type(x).__name__}"
            ) from exc
    if arr.ndim == 0:
        raise ValueError(f"{what} is a scalar; pass an array with at least one dimension")
    if arr.size == 0:
        raise ValueError(f"{what} is empty (shape {arr.shape}); there is nothing to run")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous; pass np.ascontiguousarray({what})")
    check_dtype(arr.dtype, what)
    return arr


def check_output(out: Any, shape: tuple[int, ...], dtype: np.dtype, what: str = "out") -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{what} must be a NumPy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise ValueError(f"{what} has dtype {out.dtype}, the pipeline writes {dtype}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{what} has shape {out.shape}, the pipeline writes shape {tuple(shape)}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous")
    if not out.flags.writeable:
        raise ValueError(f"{what} is read-only")
    return out


@dataclasses.dataclass
class Batch:
    """One batch as the executor sees it: where its bytes are on the host, and the
    shapes of its device views."""

    index: int
    src: np.ndarray  # host input (a view into the user's array)
    dst: np.ndarray | None  # host output (a view), None without output
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...] | None
    rows: tuple[int, int] | None = None  # (start, stop) when cut from one array
    src_address: dataclasses.InitVar[int | None] = None  # src's address when the caller has it already
    # run(): the last chunk, shorter than the others, may be run at their rows (copies of its
    # own rows after it; only its rows come back): a batch shape the compute has seen. 0: as is.
    pad_to: int = 0
    # a batch of several arrays whose fields are pinned (records.py): its H2D reads each field
    # where it is, (bytes into the batch, host address, bytes) per field, instead of src_addr
    h2d_parts = None

    def __post_init__(self, src_address: int | None) -> None:
        # Read once here, not per enqueue: the executor's loop counts microseconds.
        self.in_bytes = self.src.nbytes
        self.out_bytes = 0 if self.dst is None else self.dst.nbytes
        self.src_addr = host_address(self.src) if src_address is None else src_address
        self.dst_addr = 0 if self.dst is None else host_address(self.dst)
        self.drain_bytes = self.out_bytes  # what the drain thread copies out of the ring slot


def chunk_bounds(rows: int, chunk_rows: int, start: int = 0) -> list[tuple[int, int]]:
    """[(start, stop), ...] covering rows [start, rows) in pieces of chunk_rows (the
    last one shorter)."""
    check_positive_int(chunk_rows, "chunk (rows)")
    return [(a, min(a + chunk_rows, rows)) for a in range(start, rows, chunk_rows)]


def batches_from_array(
    x: np.ndarray, out: np.ndarray | None, bounds: Sequence[tuple[int, int]], first_index: int = 0
) -> list[Batch]:
    """Batches that view rows of ``x`` (and the same rows of ``out``)."""
    result = []
    for k, (a, b) in enumerate(bounds):
        src = x[a:b]
        dst = None if out is None else out[a:b]
        result.append(
            Batch(first_index + k, src, dst, tuple(src.shape), None if dst is None else tuple(dst.shape), (a, b))
        )
    return result


def batches_from_list(
    batches: Sequence[Any], outs: Sequence[Any] | None, spec: OutputSpec, addresses: Sequence[int] | None = None
) -> tuple[list[Batch], list[np.ndarray] | None, bool]:
    """Check a sequence of batches (and outputs) and return (batches, outs, outs_given).
    ``addresses``: the batches' host addresses, when the caller has read them already."""
    if isinstance(batches, np.ndarray):
        raise TypeError("run_batches takes a sequence of arrays; for one array use run(x)")
    try:
        items = list(batches)
    except TypeError as exc:
        raise TypeError(f"batches must be a sequence of arrays, got {type(batches).__name__}") from exc
    if not items:
        raise ValueError("no batches given; pass at least one array")
    arrays = [as_host_array(items[0], "batch 0")]
    dtype = arrays[0].dtype
    for i, b in enumerate(items[1:], 1):
        # (the usual batch, one C-contiguous array of batch 0's dtype, without as_host_array's call)
        a = b if type(b) is np.ndarray and b.dtype is dtype and b.ndim and b.size and b.flags.c_contiguous else \
            as_host_array(b, f"batch {i}")
        if a.dtype != dtype:
            raise ValueError(f"batch {i} has dtype {a.dtype}, batch 0 has {dtype}: all batches must share one dtype")
        arrays.append(a)
    outs_given = outs is not None
    out_arrays: list[np.ndarray] | None = None
    if spec.none:
        if outs_given:
            raise ValueError("outs given, but the pipeline has output=None")
    elif outs_given:
        outs = list(outs)  # type: ignore[arg-type]
        if len(outs) != len(arrays):
            raise ValueError(f"{len(outs)} outputs for {len(arrays)} batches")
        out_arrays = [
            check_output(o, spec.shape_for(a.shape), spec.dtype_for(a.dtype), f"outs[{i}]")
            for i, (o, a) in enumerate(zip(outs, arrays))
        ]
    else:
        out_arrays = [np.empty(spec.shape_for(a.shape), spec.dtype_for(a.dtype)) for a in arrays]
    result = []
    for i, a in enumerate(arrays):
        dst = None if out_arrays is None else out_arrays[i]
        result.append(Batch(i, a, dst, tuple(a.shape), None if dst is None else tuple(dst.shape), None,
                            None if addresses is None else addresses[i]))
    return result, out_arrays, outs_given


def nbytes_of(shape: Sequence[int], dtype: np.dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def align_up(n: int, alignment: int = 256) -> int:
    return (n + alignment - 1) // alignment * alignment
