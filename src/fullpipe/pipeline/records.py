"""Batches of several arrays: token ids and their mask, images and their labels.

A model often takes more than one input per row: ``model(input_ids, attention_mask)``, a
DataLoader's ``[images, labels]``, a tokenizer's ``{"input_ids": ..., "attention_mask":
...}``. fullpipe moves one block of host memory per batch (one staging copy, one H2D), so
such a batch travels as *records*: ``rows x record_bytes`` bytes, field after field (each
field's rows together, ``rows x offset`` bytes in, ``offset`` aligned to its element size).
On the device every field is then a contiguous view of the batch's bytes, no copy:

    host batch (tuple, list or dict of arrays, equal rows)
        -> its records' place on the host, and where each field's rows are      (:func:`pack`)
        -> the staging copy gathers the fields into the pinned slot or block,
           field after field, on the copier's threads                            (:meth:`Packed.parts`)
        -> one H2D
        -> ``f`` gets the batch as it was given: a tuple, list or dict of device tensors
                                                                                 (:meth:`Records.unpack`)

so ``f`` sees what the naive loop's ``f([t.cuda() for t in batch])`` would, and the host
copies each field once, as it copies one array: the staging's own memmove (pageable.py,
bulk.py) takes the fields where they are instead of one packed array. Packing into one host
array first cost a serial copy on the calling thread: 0.64x the one-array pipeline for a
DataLoader's 10 MB batches of images with their labels, and 0.28x the naive loop for a
``run()`` of two 256 MiB arrays, whose rows were interleaved at ~2.4 GB/s (session 30).

``run()`` cuts the records into chunks of rows, and a chunk is field after field too: each
field's rows ``[a, b)`` are contiguous in the field, so a chunk is gathered from one span
per field, like a batch. A chunk run at more rows than it has (``pad_shapes``) has each
field's rows repeated on the device (:meth:`Records.padded`).

Where every field is pinned (by its owner, as a DataLoader's ``pin_memory=True`` does, or
in place by the pin cache, as a list seen again is), no host copy is made at all: each
batch's H2D reads its fields where they are, one copy per field (executor's
``_direct_records``, ``Batch.h2d_parts``). Where the host array itself is read (a short list
that may go plainly, or pageable fields with ``staging="direct"``), it is filled first
(:meth:`Packed.fill`). imap's reader finds each batch's layout and fills a small batch
(up to ``pageable.INLINE_MAX_BYTES``) itself, off the enqueueing thread, which would copy it
otherwise: 1.3x faster for an encoder's ids and masks than gathered by the run; a large batch
is gathered by its window's run (1.2x faster for 10 MB images with labels than filled by the
reader), its fields sampled so that a refilled buffer is caught as for one array (session 31).
A batch of one field is not copied at all: its bytes are its records already (a pinned tensor
stays pinned).

Packing needs equal rows (axis 0) in every field: rows are what fullpipe checks the output
against (and cuts and pads). A field's other dimensions may differ from batch to batch
(sequence lengths), and so may the layout: each batch carries its own.
"""

from __future__ import annotations

import bisect
import ctypes
import dataclasses
import itertools
import math
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np

from ..cuda.interop import HostKind, _is_torch_tensor, host_view
from .plan import align_up, check_dtype


@dataclasses.dataclass(frozen=True)
class Field:
    """One array of a record: where its bytes sit in a row, and what they are."""

    key: Any  # its position (tuple, list) or key (dict)
    offset: int  # bytes from the start of a record
    row_shape: tuple[int, ...]
    dtype: np.dtype  # as the host holds it (bfloat16 travels as uint16)
    torch_dtype: Any  # the torch dtype it was, or None (a NumPy or buffer input)
    row_bytes: int


@dataclasses.dataclass(frozen=True)
class Records:
    """A batch's record layout: its container (the batch's class: a tuple, a namedtuple, a
    list, a dict or another mapping), its fields in order, and the bytes of one record.
    A batch of ``rows`` records holds field ``f``'s rows at ``rows x f.offset`` bytes in."""

    container: type
    fields: tuple[Field, ...]
    record_bytes: int

    def __post_init__(self) -> None:
        # (a key of PyTorch graphs, looked up once a batch: hashing every field each time took ~2 us)
        object.__setattr__(self, "_hash", hash((self.container, self.fields, self.record_bytes)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __reduce__(self) -> tuple:  # (pickled without the hash: another process hashes its strings anew)
        return Records, (self.container, self.fields, self.record_bytes)

    def unpack(self, fw: Any, t: Any) -> Any:
        """The batch as ``f`` takes it, from ``t``: its records on the device (a 2-D uint8
        tensor or CuPy array, ``rows x record_bytes``, contiguous): every field a view."""
        parts = [fw.record_field(t, f, self.record_bytes) for f in self.fields]
        return _rebuild(self.container, [f.key for f in self.fields], parts)

    def padded(self, fw: Any, t: Any, rows: int) -> Any:
        """New records of ``rows`` rows (more than ``t`` has): each field's rows of ``t``,
        then copies of them, in turn (pad_shapes). On the framework's current stream."""
        out = fw.tiled_rows(t, rows)  # (a new rows x record_bytes block; its bytes are set below)
        have = t.shape[0]
        for f in self.fields:
            if f.row_bytes:
                into = fw.record_field(out, f, self.record_bytes)
                into[:have] = fw.record_field(t, f, self.record_bytes)
                fw.repeat_rows(into, have)
        return out

    def note(self, exc: BaseException) -> None:
        """A note for ``f``'s first call failing with a TypeError or AttributeError: what it
        was given."""
        mapping = issubclass(self.container, Mapping)
        keys = f" (keys {', '.join(repr(f.key) for f in self.fields)})" if mapping else ""
        given = f"a {self.container.__name__} of {len(self.fields)} tensors{keys}"
        exc.add_note(f"fullpipe.StreamPipeline: the compute was given {given}: each batch as it came, on the device. "
                     "To pass only some of it, pick them before the pipeline (e.g. (x for x, _ in loader)) or in "
                     "the compute (lambda b: model(b[0])).")


def _rebuild(cls: type, keys: list, parts: list) -> Any:
    """The device tensors ``parts`` in a container of the batch's class ``cls``: a tuple, a
    list or a dict as such; a namedtuple by its fields; another tuple, list or mapping
    class from the plain one, or as the plain one where its constructor will not take it."""
    if cls is tuple:
        return tuple(parts)
    if cls is list:
        return parts
    mapping = issubclass(cls, Mapping)
    plain: Any = dict(zip(keys, parts)) if mapping else (tuple(parts) if issubclass(cls, tuple) else parts)
    if cls is dict:
        return plain
    try:
        return cls._make(parts) if hasattr(cls, "_make") else cls(plain)  # (a namedtuple; a subclass)
    except Exception:  # noqa: BLE001 - a constructor of its own: f gets the plain container
        return plain


def is_record(batch: Any) -> bool:
    """A batch of several arrays: a tuple, a list or a mapping (of arrays). An array, a
    tensor or a buffer is one batch of one array."""
    return isinstance(batch, (tuple, list, Mapping))


def several(batch: Any) -> bool:
    """A batch of several arrays, packed already (imap's reader packs them) or not."""
    if isinstance(batch, np.ndarray) or _is_torch_tensor(batch):  # (the common case: no Mapping ABC check)
        return False
    return isinstance(batch, Packed) or is_record(batch)


@dataclasses.dataclass
class Packed:
    """A record batch as fullpipe moves it: ``array``, its records' place on the host
    (``rows x record_bytes`` bytes, of the first field's kind: a torch tensor for torch
    fields, else a NumPy array), its ``layout``, whether ``array`` is new memory
    (``copied``; False: the one field's own bytes), and where each field's rows are
    (``sources``: their host addresses; None where ``array`` is the field itself).
    ``array`` holds the records only once :meth:`fill` ran (``filled``); the staging
    copies gather them from the fields instead (:meth:`parts`)."""

    array: Any
    layout: Records
    copied: bool = True
    sources: tuple[int, ...] | None = None
    filled: bool = True
    host: Any = None  # ``array`` as a NumPy array
    keep: tuple = ()  # the field arrays (host views) ``sources`` point into, alive as long as this
    objects: tuple = ()  # the fields as given (for the pin-down cache: pinned in place, they are copied directly)

    def parts(self, start: int = 0, stop: int | None = None) -> list[tuple[int, int, int]] | None:
        """Rows ``[start, stop)`` (all by default) as the staging copies them: per field,
        (bytes into those rows' records, the host address of the field's rows, bytes),
        field after field. None where ``array``'s own bytes are those records: the one
        field's own memory, or all rows once filled (a chunk of a filled batch, laid out
        for its own rows, is still gathered from the fields)."""
        rows = self.host.shape[0] if self.host is not None else 0
        stop = rows if stop is None else stop
        if self.sources is None or (self.filled and (start, stop) == (0, rows)):
            return None
        n = stop - start
        return [(n * f.offset, at + start * f.row_bytes, n * f.row_bytes)
                for f, at in zip(self.layout.fields, self.sources) if f.row_bytes]

    def fields(self) -> list[tuple[Any, np.ndarray, int]]:
        """(the field as given, its host view, its address) of each field with bytes, for
        the run's pinned check (a field of no bytes is copied by nobody)."""
        if self.sources is None:
            return []
        return [(o, a, at) for o, a, at in zip(self.objects, self.keep, self.sources) if a.nbytes]

    def detach(self) -> "Packed":
        """Gather from copies of the fields made now, not from the fields: for an output
        that shares memory with one, which the run may write before all of it is read
        (a batch packed before the run, as session 30 packed every batch, is safe so).
        Returns self."""
        if self.sources is not None:
            copies = tuple(np.array(a, copy=True) for a in self.keep)
            self.keep = self.objects = copies
            self.sources = tuple(a.__array_interface__["data"][0] for a in copies)
        return self

    def fill(self) -> "Packed":
        """Copy the fields into ``array``, the whole batch field after field (for what reads
        it as it is: a plain run; imap's reader, for a small batch). Returns self."""
        if not self.filled:
            fill_parts(int(self.host.ctypes.data), self.parts() or [])
            self.filled = True
        return self


def detach_from(packed: Sequence[Packed], outs: Sequence[Any]) -> bool:
    """If any of ``outs`` (host arrays, or None) shares memory with a field the batches are
    gathered from, detach every batch (:meth:`Packed.detach`). Returns whether it did.
    Address ranges, sorted: O(n log n)."""
    spans = sorted((at, at + a.nbytes) for p in packed for _, a, at in p.fields())
    if not spans or not any(o is not None for o in outs):
        return False
    starts = [lo for lo, _ in spans]
    reach = list(itertools.accumulate((hi for _, hi in spans), max))
    for o in outs:
        if o is None or not o.nbytes:
            continue
        lo = o.__array_interface__["data"][0]
        hi = lo + o.nbytes
        k = bisect.bisect_left(starts, hi) - 1
        if k >= 0 and reach[k] > lo:  # (some span starting before hi ends after lo)
            for p in packed:
                p.detach()
            return True
    return False


def fill_parts(dst: int, parts: Sequence[tuple[int, int, int]]) -> None:
    """One batch's records at host address ``dst``, from :meth:`Packed.parts` (one memmove
    per field, the GIL let go during each)."""
    for at, src, n in parts:
        ctypes.memmove(dst + at, src, n)


def pack(batch: Any, what: str = "batch", fill: bool = True) -> Packed:
    """``batch`` (a tuple, list or mapping of host arrays with equal rows) as records: its
    layout, each field's place, and a host array for them, filled now (``fill``) or left
    for the staging copy to gather into its pinned memory (:class:`Packed`). Raises
    TypeError or ValueError naming the field for anything else."""
    container = type(batch)
    items = list(batch.items()) if isinstance(batch, Mapping) else list(enumerate(batch))
    if not items:
        raise ValueError(f"{what} is an empty {container.__name__}: a batch of several arrays needs at least one")
    views: list[tuple[Any, np.ndarray, HostKind]] = []
    objects, addresses = [], []
    copied = False  # (a field made contiguous is a copy already)
    for key, value in items:
        name = f"{what}[{key!r}]"
        if is_record(value):
            raise TypeError(f"{name} is a {type(value).__name__}: the fields of a batch must be arrays "
                            "(nested containers are not taken)")
        if _is_torch_tensor(value) and value.device.type == "cpu" and not value.is_contiguous():
            value, copied = value.contiguous(), True  # (a slice such as ids[:, :L]: it is copied anyway)
        arr, kind = host_view(value, name)
        if arr.ndim == 0:
            raise ValueError(f"{name} is 0-dimensional: every field needs rows (axis 0)")
        check_dtype(arr.dtype, name)
        if not arr.flags.c_contiguous:
            arr, copied = np.ascontiguousarray(arr), True
            value = arr
        views.append((key, arr, kind))
        objects.append(value)
        # (a tensor's data_ptr(): 0.1 us; an array's ctypes.data: 4 us, twice a batch's own packing work)
        addresses.append(value.data_ptr() if kind.library == "torch" and value is not arr
                         else arr.__array_interface__["data"][0])
    rows = views[0][1].shape[0]
    for key, arr, _ in views:
        if arr.shape[0] != rows:
            first = views[0][0]
            raise ValueError(f"{what}: field {key!r} has {arr.shape[0]} rows and field {first!r} has {rows}: the "
                             "arrays of one batch must have equal rows (axis 0), one row each per output row")
    if not rows:
        raise ValueError(f"{what} has 0 rows (fields of shapes {[tuple(a.shape) for _, a, _ in views]}): "
                         "a batch needs at least one row")
    signature = (container, tuple((type(key), key, arr.dtype, arr.shape[1:],  # (True and 1: two keys)
                                   kind.torch_dtype if kind.library == "torch" else None)
                                  for key, arr, kind in views))
    layout = _layout(signature)
    first_kind = views[0][2]
    if len(views) == 1 and layout.fields[0].row_bytes == layout.record_bytes:  # (its bytes are the records)
        host = views[0][1].reshape(rows, -1).view(np.uint8)
        return Packed(_of_kind(host, first_kind), layout, copied, host=host)
    host = np.empty((rows, layout.record_bytes), np.uint8)  # (not touched until filled: no page is made)
    arrays = tuple(arr for _, arr, _ in views)
    packed = Packed(_of_kind(host, first_kind), layout, True, tuple(addresses), filled=False, host=host,
                    keep=arrays, objects=tuple(objects))
    return packed.fill() if fill else packed


_LAYOUTS: dict[tuple, Records] = {}  # a batch's signature -> its layout (lists repeat a few)
LAYOUTS_KEPT = 1024


def _layout(signature: tuple) -> Records:
    """The layout of a batch of ``signature`` (its container; per field: key, host dtype,
    row shape, torch dtype), kept for the next batch like it: each field at the next
    multiple of its element size (so that at any rows, ``rows x offset`` is one too), the
    record a multiple of the largest."""
    layout = _LAYOUTS.get(signature)
    if layout is not None:
        return layout
    container, described = signature
    fields, offset, align = [], 0, 1
    for _, key, dtype, row_shape, torch_dtype in described:
        size = dtype.itemsize
        offset = align_up(offset, size)
        row_bytes = math.prod(row_shape) * size
        fields.append(Field(key, offset, tuple(row_shape), dtype, torch_dtype, row_bytes))
        offset += row_bytes
        align = max(align, size)
    layout = Records(container, tuple(fields), max(align_up(offset, align), 1))
    if len(_LAYOUTS) >= LAYOUTS_KEPT:
        _LAYOUTS.clear()
    _LAYOUTS[signature] = layout
    return layout


def _of_kind(host: np.ndarray, kind: HostKind) -> Any:
    """The records ``host`` as the first field's library holds arrays (a torch field's
    batch gives torch outputs back), sharing its memory."""
    if kind.library != "torch":
        return host
    import torch

    return torch.from_numpy(host)


@dataclasses.dataclass
class RunRecords:
    """What a run of batches of several arrays needs besides the host arrays it is handed
    (:func:`for_run`): ``layout_of(batch index)``, each batch's layout, to unpack it on the
    device; ``parts_of(batch)``, where the staging copy gathers a batch's input from (None:
    its host array holds it); ``fields``, (objects, host views, addresses) of every field
    the batches are gathered from, for the run's pinned check, or None (the host arrays are
    checked); ``fill()``, which writes every batch's records into its host array, for a run
    that reads those as they are (the plain runs); ``copied``: the host arrays the run
    reads are fullpipe's (not worth pinning in place); ``fields_pinned``: every field is
    page-locked for this run (set by the executor's pinned check: each batch's H2D then
    reads its fields where they are)."""

    layout_of: Callable[[int], Records]
    parts_of: Callable[[Any], list | None]
    fill: Callable[[], Any]
    fields: tuple[list, list, list] | None
    copied: bool
    fields_pinned: bool = False


def for_run(packed: list[Packed], outs: Sequence[Any] | None, by_rows: bool) -> RunRecords:
    """The run of ``packed``: one batch cut into chunks of rows (``by_rows``: run(), each
    chunk gathered from its rows, batches known by ``rows``) or a list of batches
    (run_batches, known by ``index``). Outputs (``outs``, or None) that share memory with a
    field get the fields as they were (:func:`detach_from`)."""
    detached = outs is not None and detach_from(packed, [_host_array_or_none(o) for o in outs])
    fields = None
    if not detached and all(p.sources is not None and not p.filled for p in packed):
        got = [f for p in packed for f in p.fields()]
        fields = ([o for o, _, _ in got], [a for _, a, _ in got], [at for _, _, at in got])
    if by_rows:
        one = packed[0]
        layout_of: Callable[[int], Records] = lambda _index: one.layout  # noqa: E731
        parts_of: Callable[[Any], list | None] = lambda b: one.parts(*b.rows)  # noqa: E731
    else:
        layout_of = [p.layout for p in packed].__getitem__
        parts_of = lambda b: packed[b.index].parts()  # noqa: E731
    return RunRecords(layout_of, parts_of, lambda: [p.fill() for p in packed], fields,
                      any(p.copied for p in packed) and fields is None)


def _host_array_or_none(x: Any) -> np.ndarray | None:
    """``x``'s host view, or None (no output, or not one the run would take: it says why)."""
    if x is None:
        return None
    try:
        return host_view(x, "out")[0]
    except (TypeError, ValueError):
        return None


def pack_all(batches: Sequence[Any], what: Callable[[int], str] = lambda i: f"batch {i}",
             fill: bool = False) -> list[Packed] | None:
    """The batches of a run as fullpipe moves them (:func:`pack`; not filled by default, as
    a run's staging copy gathers them), or None when none is a record. Packed batches
    (imap's reader packs them) are taken as they are. A list mixing records and single
    arrays is refused."""
    records = [several(b) for b in batches]
    if not any(records):
        return None
    if not all(records):
        i = records.index(False) if records[0] else records.index(True)
        exc = TypeError(f"{what(i)} is {'one array' if records[0] else 'several arrays'} and {what(0)} is "
                        f"{'several arrays' if records[0] else 'one array'}: the batches of a run are all one array "
                        "each, or all several (a tuple, list or dict of arrays) each")
        exc.batch_index = i  # type: ignore[attr-defined] - (imap names the item in the iterable from it)
        raise exc
    return [b if isinstance(b, Packed) else pack(b, what(i), fill) for i, b in enumerate(batches)]
