"""Batches of several arrays (pipeline/records.py) against the fake drivers: a tuple,
list or dict of arrays per batch travels as records, gathered from its fields by the
staging copy (ring, bulk or direct staging, chunks, padding), and reaches ``f`` as it was
given, each field a device tensor of its own; the errors a user meets on the way."""

from __future__ import annotations

import numpy as np
import pytest

import fullpipe.pipeline.executor as fexec
from fullpipe.pipeline import StreamPipeline, records
from tests.test_pipeline_fakecuda import _assert_clean, fake  # noqa: F401 - fixture
from tests.test_pipeline_tensors import FakeFramework, FakeTensor, OneBuffer, _current


class FieldTensor(FakeTensor):
    """A field of fake records: ``t[:rows] = other`` copies rows on the current stream (as
    Records.padded writes them)."""

    def __setitem__(self, key, other):
        assert key.start is None and key.step is None

        def op():
            self.host()[:key.stop] = other.host()

        _current.stream.put(op)


class RecordFramework(FakeFramework):
    """The fake framework with TorchFramework.record_field's semantics: a field is a view
    of its rows' span of the records."""

    def record_field(self, t, f, record_bytes):
        rows = t.shape[0]
        return FieldTensor(t.ptr + rows * f.offset, (rows,) + f.row_shape, f.dtype, owner=t)


@pytest.fixture
def recfw(fake, monkeypatch):
    made = []
    monkeypatch.setattr(fexec, "make_framework", lambda name, index: made.append(RecordFramework(index)) or made[-1])
    return made


class MaskedSum:
    """y[i] = (sum of ids[i] where mask[i], count of mask[i]) as float64, from a batch
    given as (ids, mask), [ids, mask] or {"ids": ..., "mask": ...}. Records what it got."""

    def __init__(self):
        self.got, self.outputs = [], []

    def __call__(self, batch):
        self.got.append(type(batch).__name__)
        ids, mask = (batch["ids"], batch["mask"]) if isinstance(batch, dict) else batch
        assert isinstance(ids, FakeTensor) and isinstance(mask, FakeTensor)
        y = FakeTensor.empty((ids.shape[0], 2), np.float64)
        self.outputs.append(y)

        def op():
            i, m = ids.host(), mask.host()
            y.host()[:, 0] = np.where(m, i, 0).reshape(len(i), -1).sum(axis=1)
            y.host()[:, 1] = m.reshape(len(m), -1).sum(axis=1)

        _current.stream.put(op)
        return y


def masked_sum(ids, mask):
    return np.stack([np.where(mask, ids, 0).reshape(len(ids), -1).sum(axis=1),
                     mask.reshape(len(mask), -1).sum(axis=1)], axis=1).astype(np.float64)


def token_batches(n, seed=0):
    """Variable-length batches: int64 ids (B, L) and a bool mask (B, L), L from batch to
    batch: the layout (the mask's place in a record) differs between batches."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b, seq = int(rng.integers(1, 40)), int(rng.choice([3, 8, 17, 64]))
        out.append((rng.integers(0, 1000, (b, seq)), rng.random((b, seq)) < 0.7))
    return out


@pytest.mark.parametrize("staging", ["bulk", "ring"])
@pytest.mark.parametrize("container", ["tuple", "list", "dict"])
def test_run_batches_of_several_arrays_reach_f_as_given(fake, recfw, monkeypatch, staging, container):
    if staging == "ring":
        from fullpipe.pipeline import bulk

        monkeypatch.setattr(bulk, "BULK_MAX_BYTES", 0)
    pairs = token_batches(40)
    make = {"tuple": tuple, "list": list, "dict": lambda p: {"ids": p[0], "mask": p[1]}}[container]
    f = MaskedSum()
    pipe = StreamPipeline(f, form="torch", streams=3)
    ys = pipe.run_batches([make(p) for p in pairs])
    for (ids, mask), y in zip(pairs, ys):
        np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert set(f.got) == {container}
    _assert_clean(pipe)
    ys = pipe.run_batches([make(p) for p in pairs])  # (a second run: the adapter kept, the layouts new)
    np.testing.assert_array_equal(ys[-1], masked_sum(*pairs[-1]))


@pytest.mark.parametrize("staging", ["bulk", "ring", "direct"])
def test_records_are_gathered_by_the_staging_copy_not_packed_before_it(fake, recfw, monkeypatch, staging):
    """A long list of records is not packed on the calling thread: the ring's or the bulk
    block's copy gathers each batch from its fields (records.fill_parts never runs); with
    staging="direct" each host array is filled first, then copied as it is."""
    from fullpipe.pipeline import bulk

    if staging == "ring":
        monkeypatch.setattr(bulk, "BULK_MAX_BYTES", 0)
    filled = []
    real = records.fill_parts
    monkeypatch.setattr(records, "fill_parts", lambda dst, parts: filled.append(dst) or real(dst, parts))
    pairs = token_batches(40, seed=7)
    pipe = StreamPipeline(MaskedSum(), form="torch", streams=3, staging="direct" if staging == "direct" else "auto")
    for (ids, mask), y in zip(pairs, pipe.run_batches(pairs)):
        np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert pipe.stats.staging["input"] == staging and not filled
    rng = np.random.default_rng(4)
    big = (rng.integers(0, 9, (600_000, 3)).astype(np.int32), rng.random((600_000, 3)) < 0.5)  # (> 8 MiB)
    pipe.chunk = 75_000
    np.testing.assert_array_equal(pipe.run(big), masked_sum(*big))
    assert pipe.stats.batches == 8 and not filled
    _assert_clean(pipe)


def test_pinned_fields_are_copied_to_the_gpu_where_they_are(fake, recfw, monkeypatch):
    """Every field pinned (a DataLoader's pin_memory=True): no host copy at all, each batch's
    H2D reads its fields where they are, one copy per field (run_batches, imap, run()); one
    pageable field and the batches are gathered through the ring again."""
    from fullpipe.pipeline import pageable

    copies = []
    real_parts, real_fill = pageable.HostCopier.copy_parts, records.fill_parts
    monkeypatch.setattr(pageable.HostCopier, "copy_parts", lambda *a: copies.append(a) or real_parts(*a))
    monkeypatch.setattr(records, "fill_parts", lambda *a: copies.append(a) or real_fill(*a))
    pairs = token_batches(40, seed=8)
    fake.pinned.update(a.ctypes.data for pair in pairs for a in pair)
    pipe = StreamPipeline(MaskedSum(), form="torch", streams=3)
    for (ids, mask), y in zip(pairs, pipe.run_batches(pairs)):
        np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert pipe.stats.staging["input"] == "direct" and not copies
    for (ids, mask), y in zip(pairs, pipe.imap(iter(pairs), window=6)):  # (small: filled by imap's reader)
        np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert len(copies) == len(pairs)
    copies.clear()
    rng = np.random.default_rng(5)
    big = (rng.integers(0, 9, (600_000, 3)).astype(np.int32), rng.random((600_000, 3)) < 0.5)
    fake.pinned.update(a.ctypes.data for a in big)
    pipe.chunk = 75_000
    np.testing.assert_array_equal(pipe.run(big), masked_sum(*big))
    assert pipe.stats.staging["input"] == "direct" and pipe.stats.batches == 8 and not copies
    large = [(big[0][i:i + 75_000].copy(), big[1][i:i + 75_000].copy()) for i in range(0, 600_000, 75_000)]
    fake.pinned.update(a.ctypes.data for pair in large for a in pair)  # (1.2 MB batches: gathered by the run)
    for (ids, mask), y in zip(large, pipe.imap(iter(large), window=3)):
        np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert pipe.stats.staging["input"] == "direct" and not copies
    fake.pinned.discard(pairs[3][1].ctypes.data)
    for (ids, mask), y in zip(pairs, pipe.run_batches(pairs)):
        np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert pipe.stats.staging["input"] == "bulk"
    _assert_clean(pipe)


class WarmsIntoOneBuffer(OneBuffer):
    """y = 2x + 1 of a batch's first field: new tensors for the first 6 calls, then one
    output buffer in every call (a compute that starts reusing its output once warmed up:
    fullpipe then runs the whole run again, its calls one after another)."""

    def __call__(self, batch):
        x = batch[0]
        if self.calls >= 6:
            return super().__call__(x)
        self.calls += 1
        y = FakeTensor.empty(x.shape, np.float32)
        self.buf.setdefault("fresh", []).append(y)
        _current.stream.put(lambda: y.host().__setitem__(..., x.host() * 2 + 1))
        return y


def test_an_output_over_a_field_gets_the_fields_as_they_were(fake, recfw, monkeypatch):
    """An out= that shares memory with a field (over it, or shifted against it), which the
    run may write before the field is read: the fields are copied first (Packed.detach), and
    the outputs are those of the fields as given, also when the run is done again."""
    from fullpipe.pipeline import bulk

    monkeypatch.setattr(bulk, "BULK_MAX_BYTES", 0)
    rng = np.random.default_rng(2)
    buf = np.zeros(3000 * 8, np.float32)
    x = buf[:12000].reshape(3000, 4)
    x[:] = rng.random((3000, 4), dtype=np.float32)
    m = rng.random((3000, 4)) < 0.5
    keep = []

    def twice(batch):
        xt = batch[0]
        y = FakeTensor.empty((xt.shape[0], 8), np.float32)
        keep.append(y)
        _current.stream.put(lambda: y.host().__setitem__(..., np.concatenate([xt.host(), xt.host()], axis=1) + 1))
        return y

    want = np.concatenate([x, x], axis=1) + 1
    pipe = StreamPipeline(twice, form="torch", streams=3, chunk=200)
    np.testing.assert_array_equal(pipe.run((x, m), out=buf.reshape(3000, 8)), want)  # (shifted: rows 0-1499 over x)
    x2 = rng.random((3000, 4), dtype=np.float32)
    want2 = x2 * 2 + 1
    pipe = StreamPipeline(WarmsIntoOneBuffer(), form="torch", streams=3, chunk=200)
    with pytest.warns(fexec.PipelineWarning):  # (its calls turned serial: the run was done again)
        np.testing.assert_array_equal(pipe.run((x2, m), out=x2), want2)
    pairs = [(rng.random((500, 4), dtype=np.float32), rng.random((500, 4)) < 0.5) for _ in range(10)]
    wants = [p[0] * 2 + 1 for p in pairs]
    pipe = StreamPipeline(WarmsIntoOneBuffer(), form="torch", streams=3)
    with pytest.warns(fexec.PipelineWarning):
        got = pipe.run_batches(pairs, outs=[p[0] for p in pairs[1:]] + [pairs[0][0]])  # (each over another's field)
    for g, w in zip(got, wants):
        np.testing.assert_array_equal(g, w)
    _assert_clean(pipe)


def test_a_field_of_no_bytes_leaves_the_others_pinned(fake, recfw):
    """A (rows, 0) field is copied by nobody: pinned ids and mask still go to the GPU where
    they are."""
    rng = np.random.default_rng(4)
    ids, mask = rng.integers(0, 9, (600_000, 3)).astype(np.int32), rng.random((600_000, 3)) < 0.5
    empty = np.zeros((600_000, 0), np.float32)
    masked = MaskedSum()
    pipe = StreamPipeline(lambda b: masked((b[0], b[1])), form="torch", streams=3, chunk=75_000)
    np.testing.assert_array_equal(pipe.run((ids, mask, empty)), masked_sum(ids, mask))
    assert pipe.stats.staging["input"] == "ring"
    fake.pinned.update(a.ctypes.data for a in (ids, mask))
    np.testing.assert_array_equal(pipe.run((ids, mask, empty)), masked_sum(ids, mask))
    assert pipe.stats.staging["input"] == "direct"
    _assert_clean(pipe)


def test_one_array_per_batch_after_records_on_the_same_pipeline(fake, recfw):
    """Nothing of a run of records is left behind: the next run's arrays reach f as they are."""
    f = MaskedSum()

    def either(batch):
        return f(batch) if isinstance(batch, tuple) else f((batch, batch))

    pipe = StreamPipeline(either, form="torch", streams=2)
    pairs = token_batches(8, seed=1)
    pipe.run_batches(pairs)
    ids = [p[0] for p in pairs]
    for x, y in zip(ids, pipe.run_batches(ids)):
        np.testing.assert_array_equal(y, masked_sum(x, x))
    _assert_clean(pipe)


def test_run_cuts_a_dict_of_arrays_into_chunks_of_records(fake, recfw):
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 50, (5000, 6)).astype(np.int32)
    mask = rng.random((5000, 6)) < 0.5
    f = MaskedSum()
    pipe = StreamPipeline(f, form="torch", streams=3, chunk=700)
    y = pipe.run({"ids": ids, "mask": mask})
    np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert pipe.stats.batches == 8 and set(f.got) == {"dict"}
    _assert_clean(pipe)


@pytest.mark.parametrize("pad", [True, False])
def test_padding_repeats_each_fields_rows_and_leaves_whole_batches_alone(fake, recfw, pad):
    """pad_shapes=True: run() pads its short last chunk of records with copies of each
    field's rows (f sees 200 rows: the 50 of the chunk, then those again, in turn);
    run_batches' batches are never padded."""
    rng = np.random.default_rng(9)
    ids, mask = rng.integers(0, 9, (1050, 4)), rng.random((1050, 4)) < 0.5
    seen, masked = [], MaskedSum()

    def f(batch):
        i, m = batch

        def op(i=i, m=m):
            seen.append((i.host().copy(), m.host().copy()))

        _current.stream.put(op)
        return masked((i, m))

    pipe = StreamPipeline(f, form="torch", streams=2, chunk=200, pad_shapes=pad)
    np.testing.assert_array_equal(pipe.run((ids, mask)), masked_sum(ids, mask))
    assert (pipe.stats.padded or {}).get("rows", 0) == (150 if pad else 0)
    last = [(i, m) for i, m in seen if np.array_equal(i[:50], ids[1000:])]
    assert len(last) == 1 and len(last[0][0]) == (200 if pad else 50)
    np.testing.assert_array_equal(last[0][0], np.tile(ids[1000:], (4, 1))[:len(last[0][0])])
    np.testing.assert_array_equal(last[0][1], np.tile(mask[1000:], (4, 1))[:len(last[0][1])])
    pairs = token_batches(30, seed=2)
    for (i, m), y in zip(pairs, pipe.run_batches(pairs)):
        np.testing.assert_array_equal(y, masked_sum(i, m))
    assert not pipe.stats.padded
    _assert_clean(pipe)


def test_imap_takes_a_loaders_lists(fake, recfw):
    """A DataLoader of (input, label) samples yields lists [inputs, labels]: packed on the
    reader thread, handed to f as lists."""
    pairs = token_batches(30, seed=5)
    got, masked = [], MaskedSum()

    def f(batch):
        got.append(type(batch).__name__)
        return masked(tuple(batch))

    pipe = StreamPipeline(f, form="torch", streams=2)
    ys = list(pipe.imap(([ids, mask] for ids, mask in pairs), window=7))
    for (ids, mask), y in zip(pairs, ys):
        np.testing.assert_array_equal(y, masked_sum(ids, mask))
    assert set(got) == {"list"} and pipe.imap_stats["windows"] >= 4
    _assert_clean(pipe)


def test_pack_aligns_each_field_and_keeps_one_field_in_place():
    a = np.arange(10, dtype=np.int8).reshape(5, 2)
    b = np.arange(5, dtype=np.float64)
    c = np.ones((5, 3), np.float16)
    cols = records.pack((a, b, c))  # (field after field: b's five rows from byte 5 x 8 on)
    fields = cols.layout.fields
    assert [f.offset for f in fields] == [0, 8, 16] and cols.layout.record_bytes == 24
    assert cols.array.shape == (5, 24) and cols.copied and cols.parts() is None
    assert cols.array.reshape(-1)[40:80].view(np.float64).tolist() == b.tolist()
    assert cols.array.reshape(-1)[:10].tolist() == a.ravel().tolist()
    one = records.pack((b,))
    assert not one.copied and np.shares_memory(one.array, b) and one.layout.container is tuple
    assert one.parts() is None


def test_an_unfilled_batch_is_gathered_from_its_fields_and_a_chunk_from_their_rows():
    """Not filled, a batch's host array is left alone: the staging copy gathers it from
    each field's rows (parts), a chunk of rows [a, b) from rows [a, b) of every field, in
    the same order (field after field) as a whole batch."""
    a = np.arange(30, dtype=np.int16).reshape(10, 3)
    b = np.arange(10, dtype=np.float64) * 0.5
    lazy = records.pack({"a": a, "b": b}, fill=False)
    assert not lazy.filled and lazy.layout.record_bytes == 16  # (a's 6 bytes, b at 8)
    def fields(flat, rows):  # (the bytes between a's rows and b's are nobody's)
        return flat[:rows * 6].view(np.int16).tolist(), flat[rows * 8:].view(np.float64).tolist()

    whole = np.zeros(160, np.uint8)
    records.fill_parts(whole.ctypes.data, lazy.parts())
    assert fields(whole, 10) == (a.ravel().tolist(), b.tolist())
    chunk = np.zeros(4 * 16, np.uint8)
    records.fill_parts(chunk.ctypes.data, lazy.parts(3, 7))
    assert fields(chunk, 4) == (a[3:7].ravel().tolist(), b[3:7].tolist())
    assert lazy.fill().filled and lazy.parts() is None and lazy.parts(3, 7) is not None
    assert fields(lazy.host.reshape(-1), 10) == fields(whole, 10)


def test_a_namedtuple_or_mapping_class_comes_back_as_itself():
    """f gets the batch's own container: a namedtuple by its fields, a dict subclass as
    itself; the layout cache keeps keys of other types apart (True and 1)."""
    import collections

    Pair = collections.namedtuple("Pair", "ids mask")
    ids, mask = np.arange(6).reshape(3, 2), np.ones((3, 2), bool)
    parts = ["device ids", "device mask"]  # (what record_field would make)
    fw = type("Fw", (), {"record_field": lambda self, t, f, rb: parts[f.key if isinstance(f.key, int) else
                                                                              ["a", "b"].index(f.key)]})()
    got = records.pack(Pair(ids, mask)).layout.unpack(fw, None)
    assert type(got) is Pair and got.mask == "device mask"
    od = records.pack(collections.OrderedDict(a=ids, b=mask)).layout.unpack(fw, None)
    assert type(od) is collections.OrderedDict and list(od) == ["a", "b"]
    assert list(records.pack({True: ids}).layout.unpack(fw, None)) == [True]
    assert list(records.pack({1: ids}).layout.unpack(fw, None)) == [1]


def test_fields_are_checked_and_named():
    ids = np.zeros((4, 3), np.int64)
    with pytest.raises(ValueError, match=r"batch\['s'\] dtype <U1 cannot go to the GPU"):
        records.pack({"x": ids, "s": np.array(list("abcd"))})
    with pytest.raises(ValueError, match=r"batch has 0 rows \(fields of shapes \[\(0, 3\), \(0,\)\]\)"):
        records.pack((ids[:0], np.zeros(0)))
    strided = records.pack((ids[:, :2],))  # (a non-contiguous field: a copy, said so)
    assert strided.copied and strided.array.shape == (4, 16)


def test_what_a_user_gets_wrong(fake, recfw):
    pipe = StreamPipeline(MaskedSum(), form="torch", streams=2)
    ids = np.zeros((4, 3), np.int64)
    pipe.run_batches([(ids, ids > 0)] * 4)
    with pytest.raises(ValueError, match=r"batch 1: field 'mask' has 3 rows and field 'ids' has 4"):
        pipe.run_batches([{"ids": ids, "mask": ids > 0}, {"ids": ids, "mask": ids[:3] > 0}])
    with pytest.raises(TypeError, match="batch 1 is one array and batch 0 is several arrays") as info:
        pipe.run_batches([(ids, ids > 0), ids])
    assert info.value.batch_index == 1
    with pytest.raises(TypeError, match=r"batch 0\[1\] is a tuple: the fields of a batch must be arrays"):
        pipe.run_batches([(ids, (ids, ids))])
    with pytest.raises(ValueError, match="at least one"):
        pipe.run_batches([()])
    with pytest.raises(TypeError, match=r"got a dict: for one batch of several arrays use run\(batch\)"):
        pipe.run_batches({"ids": ids, "mask": ids > 0})
    with pytest.raises(ValueError, match="0-dimensional"):
        pipe.run((ids, np.float32(1.0)))
    _assert_clean(pipe)

    def stream_form(stream, x, y):
        pass

    with pytest.raises(TypeError, match="several arrays .* are for a tensor function"):
        StreamPipeline(stream_form, streams=2).run_batches([(ids, ids)])
    with pytest.raises(TypeError, match=r"pass \(x for x, _ in loader\)"):  # (before packing: rows unequal here)
        StreamPipeline(stream_form, streams=2).run((ids, ids[:1]))

    def wants_one_tensor(x):
        raise TypeError("linear(): argument 'input' must be Tensor, not tuple")

    pipe = StreamPipeline(wants_one_tensor, form="torch", streams=2)
    with pytest.raises(TypeError) as info:
        pipe.run_batches([(ids, ids > 0)] * 4)
    assert "the compute was given a tuple of 2 tensors" in " ".join(info.value.__notes__)
    _assert_clean(pipe)


def test_torch_fields_are_views_of_the_packed_records_at_any_place_in_their_buffer():
    """TorchFramework.record_field over records packed on the host by the real layout (the
    device side's view arithmetic, on CPU tensors): each field a contiguous view of its
    rows, equal to the batch's own array, for fields of 1, 2 and no row dimensions, bool,
    int32, float16, bfloat16 and int64, records placed at an aligned offset in a larger
    buffer (a lane buffer's cut has a storage offset), and a batch of one field."""
    torch = pytest.importorskip("torch")
    from fullpipe.pipeline.records import pack
    from fullpipe.pipeline.tensors import TorchFramework

    fw = TorchFramework(0)  # (record_field reads no device)
    g = torch.Generator().manual_seed(55)
    for rows in (1, 3, 7, 32):
        L = 5 + rows
        batches = [
            {"ids": torch.randint(0, 1000, (rows, L), dtype=torch.int32, generator=g),
             "mask": torch.rand(rows, L, generator=g) < 0.5},
            (torch.randn(rows, 3, 4, generator=g).half(), torch.randint(0, 9, (rows,), generator=g)),
            [torch.randn(rows, L, generator=g).bfloat16(), torch.randint(0, 255, (rows, 2), dtype=torch.uint8,
                                                                         generator=g)],
            (torch.rand(rows, 6, generator=g) < 0.3,),
        ]
        for batch in batches:
            packed = pack(batch)
            rb = packed.layout.record_bytes
            records = torch.from_numpy(np.ascontiguousarray(packed.host)).view(torch.uint8).reshape(rows, rb)
            for at in (0, 64, 4096):  # (aligned as a lane buffer's cuts are: 256 B in practice)
                buffer = torch.zeros(at + rows * rb + 64, dtype=torch.uint8)
                t = buffer.narrow(0, at, rows * rb).view(rows, rb)
                t.copy_(records)
                got = packed.layout.unpack(fw, t)
                want = list(batch.values()) if isinstance(batch, dict) else list(batch)
                got = list(got.values()) if isinstance(got, dict) else list(got)
                assert type(packed.layout.unpack(fw, t)) is type(batch)
                for g_, w in zip(got, want):
                    assert g_.dtype == w.dtype and g_.shape == w.shape and g_.is_contiguous()
                    assert torch.equal(g_, w)
                    assert buffer.data_ptr() <= g_.data_ptr() < buffer.data_ptr() + buffer.numel()  # (a view)
