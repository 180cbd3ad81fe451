"""Batches of several arrays: token ids and their mask, images and their labels.

A model often takes more than one input per row: ``model(input_ids, attention_mask)``, a
DataLoader's ``[images, labels]``, a tokenizer's ``{"input_ids": ..., "attention_mask":
...}``. fullpipe moves one block of host memory per batch (one staging copy, one H2D), so
such a batch travels as *records*, ``rows x record_bytes`` bytes in which every field has
its place (aligned to its element size), in one of two orders:

- **field after field** (``columns``; run_batches and imap): each field's rows together,
  ``rows x offset`` bytes in. On the device every field is a view of the batch's bytes,
  contiguous, with no copy. A batch in this order is never padded (pad_shapes): copies of
  its rows would not be rows of its fields.
- **row after row** (run() of a tuple or dict of arrays): row ``r`` of every field side by
  side, so that the records are cut into chunks and padded as any one array is. On the
  device each field is copied out of its columns (one small copy each, on the batch's
  stream), contiguous.

    host batch (tuple, list or dict of arrays, equal rows)
        -> packed, one host copy of each field             (:func:`pack`)
        -> staged, copied to the device as one array
        -> ``f`` gets the batch as it was given: a tuple, list or dict of device tensors
                                                           (:meth:`Records.unpack`)

so ``f`` sees what the naive loop's ``f([t.cuda() for t in batch])`` would. The host pays
one packing copy of the batch (~20-40 us for a few KiB of token ids and mask on an H100
host), on imap's reader thread where it can. A batch of one field is not copied: its bytes
are the records already (a pinned tensor stays pinned).

Packing needs equal rows (axis 0) in every field: rows are what fullpipe checks the output
against (and cuts and pads, row after row). A field's other dimensions may differ from
batch to batch (sequence lengths), and so may the layout: each batch carries its own.
"""

from __future__ import annotations

import dataclasses
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
    list, a dict or another mapping), its fields in order, the bytes of one record, and
    the order of the bytes: ``columns`` False, row
    after row (each row holds every field's: a batch may be cut into chunks or padded
    with copies of its rows); True, field after field (``rows x offset`` bytes in, each
    field's rows together: on the device every field is a view, no copy; for whole
    batches, run_batches and imap, which are neither cut nor padded)."""

    container: type
    fields: tuple[Field, ...]
    record_bytes: int
    columns: bool

    def unpack(self, fw: Any, t: Any) -> Any:
        """The batch as ``f`` takes it, from ``t``: its records on the device (a 2-D uint8
        tensor or CuPy array, ``rows x record_bytes``, contiguous). On the framework's
        current stream."""
        parts = [fw.record_field(t, f, self.record_bytes, self.columns) for f in self.fields]
        return _rebuild(self.container, [f.key for f in self.fields], parts)

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
    return isinstance(batch, Packed) or is_record(batch)


@dataclasses.dataclass
class Packed:
    """A record batch packed: ``array`` (``rows x record_bytes`` bytes, of the first field's
    kind: a torch tensor for torch fields, else a NumPy array), its ``layout``, and whether
    ``array`` is a copy (False: the one field's own memory)."""

    array: Any
    layout: Records
    copied: bool = True


def pack(batch: Any, what: str = "batch", columns: bool = True) -> Packed:
    """``batch`` (a tuple, list or mapping of host arrays with equal rows) as records, field
    after field (``columns``) or row after row (Records says which is for what). Raises
    TypeError or ValueError naming the field for anything else."""
    container = type(batch)
    items = list(batch.items()) if isinstance(batch, Mapping) else list(enumerate(batch))
    if not items:
        raise ValueError(f"{what} is an empty {container.__name__}: a batch of several arrays needs at least one")
    views: list[tuple[Any, np.ndarray, HostKind]] = []
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
        views.append((key, arr, kind))
    rows = views[0][1].shape[0]
    for key, arr, _ in views:
        if arr.shape[0] != rows:
            first = views[0][0]
            raise ValueError(f"{what}: field {key!r} has {arr.shape[0]} rows and field {first!r} has {rows}: the "
                             "arrays of one batch must have equal rows (axis 0), one row each per output row")
    if not rows:
        raise ValueError(f"{what} has 0 rows (fields of shapes {[tuple(a.shape) for _, a, _ in views]}): "
                         "a batch needs at least one row")
    signature = (container, columns, tuple((type(key), key, arr.dtype, arr.shape[1:],  # (True and 1: two keys)
                                            kind.torch_dtype if kind.library == "torch" else None)
                                           for key, arr, kind in views))
    layout = _layout(signature)
    first_kind = views[0][2]
    if len(views) == 1 and layout.fields[0].row_bytes == layout.record_bytes:  # (its bytes are the records)
        return Packed(_of_kind(views[0][1].reshape(rows, -1).view(np.uint8), first_kind), layout, copied)
    host = np.empty((rows, layout.record_bytes), np.uint8)
    if columns:
        flat = host.reshape(-1)
        for f, (_, arr, _) in zip(layout.fields, views):
            if f.row_bytes:
                flat[rows * f.offset:rows * (f.offset + f.row_bytes)] = arr.reshape(-1).view(np.uint8)
    else:
        for f, (_, arr, _) in zip(layout.fields, views):
            if f.row_bytes:
                host[:, f.offset:f.offset + f.row_bytes] = arr.reshape(rows, -1).view(np.uint8)
    return Packed(_of_kind(host, first_kind), layout)


_LAYOUTS: dict[tuple, Records] = {}  # a batch's signature -> its layout (lists repeat a few)
LAYOUTS_KEPT = 1024


def _layout(signature: tuple) -> Records:
    """The layout of a batch of ``signature`` (its container, the byte order; per field:
    key, host dtype, row shape, torch dtype), kept for the next batch like it: each field
    at the next multiple of its element size, the record a multiple of the largest (so
    that in either order every field starts at a multiple of its element size)."""
    layout = _LAYOUTS.get(signature)
    if layout is not None:
        return layout
    container, columns, described = signature
    fields, offset, align = [], 0, 1
    for _, key, dtype, row_shape, torch_dtype in described:
        size = dtype.itemsize
        offset = align_up(offset, size)
        row_bytes = math.prod(row_shape) * size
        fields.append(Field(key, offset, tuple(row_shape), dtype, torch_dtype, row_bytes))
        offset += row_bytes
        align = max(align, size)
    layout = Records(container, tuple(fields), max(align_up(offset, align), 1), columns)
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


def pack_all(batches: Sequence[Any], what: Callable[[int], str] = lambda i: f"batch {i}"
             ) -> tuple[list[Any], list[Records] | None, bool]:
    """The batches of a run as fullpipe moves them: (the arrays, each batch's layout,
    whether any was copied), or (``batches``, None, False) when none is a record. Packed
    batches (imap's reader packs them) are taken as they are. A list mixing records and
    single arrays is refused."""
    records = [several(b) for b in batches]
    if not any(records):
        return list(batches), None, False
    if not all(records):
        i = records.index(False) if records[0] else records.index(True)
        exc = TypeError(f"{what(i)} is {'one array' if records[0] else 'several arrays'} and {what(0)} is "
                        f"{'several arrays' if records[0] else 'one array'}: the batches of a run are all one array "
                        "each, or all several (a tuple, list or dict of arrays) each")
        exc.batch_index = i  # type: ignore[attr-defined] - (imap names the item in the iterable from it)
        raise exc
    packed = [b if isinstance(b, Packed) else pack(b, what(i), columns=True) for i, b in enumerate(batches)]
    return [p.array for p in packed], [p.layout for p in packed], any(p.copied for p in packed)
