"""CPU tests of imap's windows (fullpipe.pipeline.imap) with a stand-in for run_batches
that records each window; the executor itself under imap is tested against the fake
driver in test_pipeline_fakecuda.py."""

from __future__ import annotations

import math
import queue
import threading
import time

import numpy as np
import pytest

from fullpipe.pipeline import imap as W


class Runner:
    """run_batches stand-in: y = 2 * x per batch; records each window's sizes."""

    def __init__(self, sleep_s=0.0, fail_at=None):
        self.windows: list[list[int]] = []
        self.sleep_s, self.fail_at = sleep_s, fail_at

    def __call__(self, items, whole):
        self.windows.append([len(x) for x in items])
        time.sleep(self.sleep_s)
        for i, x in enumerate(items):
            if self.fail_at is not None and sum(map(len, self.windows)) - len(items) + i == self.fail_at:
                exc = RuntimeError("compute failed on purpose")
                exc.batch_index = i
                raise exc
        return [np.asarray(x) * 2 for x in items]


def _imap(run, it, window="64MiB", read_ahead=True, min_batches=4, totals=None):
    wb, wn = W.parse_window(window)
    return W.imap(run, it, window_bytes=wb, window_batches=wn, min_batches=min_batches,
                  read_ahead=read_ahead, totals=totals if totals is not None else W.new_totals())


@pytest.mark.parametrize("read_ahead", [True, False])
def test_outputs_in_order_one_per_batch_in_windows_of_bytes_or_batches(read_ahead):
    rng = np.random.default_rng(0)
    xs = [rng.integers(0, 100, int(n), dtype=np.int32) for n in rng.integers(1, 5000, 103)]
    run = Runner()
    totals = W.new_totals()
    got = list(_imap(run, (x for x in xs), window="40KiB", read_ahead=read_ahead, totals=totals))
    assert len(got) == len(xs)
    for x, y in zip(xs, got):
        np.testing.assert_array_equal(y, 2 * x)
    # no window past full: 40 KiB and >= 4 batches (reading ahead, the caller may take less)
    for sizes in run.windows:
        nbytes = [4 * n for n in sizes]
        assert len(sizes) <= 4 or sum(nbytes[:-1]) < 40 * 1024
        if not read_ahead and sizes is not run.windows[-1]:
            assert len(sizes) >= 4 and sum(nbytes) >= 40 * 1024
    assert sum(map(len, run.windows)) == 103
    assert totals["windows"] == len(run.windows) and totals["batches"] == 103
    assert totals["bytes_in"] == sum(x.nbytes for x in xs)
    run = Runner()
    assert len(list(_imap(run, iter(xs), window=10, read_ahead=read_ahead))) == 103
    assert max(len(w) for w in run.windows) == 10 and sum(map(len, run.windows)) == 103
    if not read_ahead:
        assert [len(w) for w in run.windows] == [10] * 10 + [3]


def test_the_floor_of_batches_per_window():
    run = Runner()
    list(_imap(run, [np.zeros(1 << 20, np.uint8)] * 9, window="1KiB", min_batches=4, read_ahead=False))
    assert [len(w) for w in run.windows] == [4, 4, 1]


def test_windows_size_themselves_to_the_slower_side():
    def source(n, delay):
        for i in range(n):
            time.sleep(delay)
            yield np.full(8, i, np.int64)

    # a slow iterable, a fast GPU: the first window is one batch, later ones small (what was
    # read meanwhile; the wait for about sqrt(k) of them lasts at most about a run's time)
    run = Runner(sleep_s=0.002)
    assert len(list(_imap(run, source(30, 0.01), window=8))) == 30
    counts = [len(w) for w in run.windows]
    taken = np.cumsum([0] + counts[:-1])
    assert counts[0] == 1 and all(c <= max(np.sqrt(k).astype(int), 1) + 2 for c, k in zip(counts, taken)), counts
    # a fast iterable, a slow GPU: full windows after the first
    run = Runner(sleep_s=0.05)
    assert len(list(_imap(run, source(40, 0.0), window=8))) == 40
    assert all(len(w) == 8 for w in run.windows[1:-1]) and len(run.windows) <= 6, run.windows


def test_reading_ahead_overlaps_the_iterable_with_the_runs():
    def slow_source(n):
        for i in range(n):
            time.sleep(0.01)  # a file read: lets the GIL go
            yield np.full(8, i, np.int64)

    walls = {}
    for read_ahead in (False, True):
        totals = W.new_totals()
        t0 = time.perf_counter()
        out = list(_imap(Runner(sleep_s=0.04), slow_source(16), window=4, read_ahead=read_ahead, totals=totals))
        walls[read_ahead] = time.perf_counter() - t0
        assert [int(y[0]) for y in out] == [2 * i for i in range(16)]
    # serial: 16 x 10 ms reading + 4 x 40 ms running = 320 ms; read ahead: ~40 + 4 x 40 = 200 ms
    assert walls[True] < 0.8 * walls[False], walls


@pytest.mark.parametrize("read_ahead", [True, False])
def test_a_refilled_buffer_is_refused_and_nothing_of_it_is_yielded(read_ahead):
    buf = np.zeros(4096, np.float32)

    def refill(n):
        for i in range(n):
            buf[:] = np.random.default_rng(i).standard_normal(4096)
            yield buf

    run = Runner(sleep_s=0.01)
    got = []
    with pytest.raises(ValueError, match="memory of batch 0 changed"):
        for y in _imap(run, refill(8), window=4, read_ahead=read_ahead):
            got.append(y)
    assert got == []
    if not read_ahead:
        assert run.windows == []  # refused before the window ran
    # the same array yielded again unchanged is fine (a benchmark's repeat)
    x = np.arange(1000, dtype=np.float32)
    assert all(np.array_equal(y, 2 * x) for y in _imap(Runner(), [x] * 10, window=4, read_ahead=read_ahead))


def test_a_buffer_refilled_while_its_window_runs_is_refused_before_its_outputs():
    bufs = [np.zeros(4096, np.float32) for _ in range(2)]

    def two_buffers(n):  # double buffering by the iterable: a buffer comes back two items later
        for i in range(n):
            time.sleep(0.02)  # the next refill comes while the window runs (50 ms)
            b = bufs[i % 2]
            b[:] = i
            yield b

    got = []
    with pytest.raises(ValueError, match="memory of batch 0 changed while its window ran"):
        for y in _imap(Runner(sleep_s=0.1), two_buffers(8), window=2, read_ahead=True):
            got.append(y)
    assert got == []


@pytest.mark.parametrize("read_ahead", [True, False])
def test_the_iterables_error_comes_after_every_output_before_it(read_ahead):
    def failing():
        for i in range(11):
            yield np.full(4, i, np.int32)
        raise OSError("disk read failed")

    got = []
    with pytest.raises(OSError, match="disk read failed"):
        for y in _imap(Runner(), failing(), window=4, read_ahead=read_ahead):
            got.append(int(y[0]))
    assert got == [2 * i for i in range(11)]


def test_an_item_that_is_not_a_batch_names_it_and_a_pair_gets_a_hint():
    """A tuple or dict is a batch of several arrays (records.py); one whose field is not an
    array (a label left a Python int) is named, with what such a batch must be."""
    items = [np.zeros(4, np.int32)] * 5 + [(np.zeros(4, np.int32), 3)]
    got = []
    with pytest.raises(TypeError, match=r"batch 5\[1\] must be a NumPy array") as info:
        for y in _imap(Runner(), items, window=4):
            got.append(y)
    assert len(got) == 5
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "item 5 of the iterable is not a host batch" in notes and "tuple, list or dict of host arrays" in notes
    with pytest.raises(TypeError, match=r"batch 0\['label'\] must be") as info:
        list(_imap(Runner(), [{"input_ids": np.zeros(4, np.int32), "label": 1}]))
    assert "It is a dict" in " ".join(info.value.__notes__)
    with pytest.raises(TypeError) as info:
        list(_imap(Runner(), [object()]))
    assert "item 0 of the iterable is not a host batch." in " ".join(info.value.__notes__)
    assert list(_imap(Runner(), [])) == []


def test_a_compute_error_names_the_item_in_the_iterable():
    with pytest.raises(RuntimeError) as info:
        list(_imap(Runner(fail_at=9), (np.zeros(4, np.int32) for _ in range(20)), window=4))
    assert "item 9)" in " ".join(info.value.__notes__)


def test_closing_early_stops_the_reader_thread():
    read = []

    def endless():
        i = 0
        while True:
            read.append(i)
            yield np.full(16, i, np.int32)
            i += 1

    before = {t.ident for t in threading.enumerate()}
    gen = _imap(Runner(), endless(), window=4)
    for k, y in enumerate(gen):
        if k == 5:
            break
    gen.close()
    time.sleep(4 * W._POLL_S)
    n = len(read)
    time.sleep(4 * W._POLL_S)
    assert len(read) == n <= 4 * 4  # at most the window in hand, the next one, and one item
    assert not [t for t in threading.enumerate() if t.ident not in before and t.name == "fullpipe-imap-reader"]


@pytest.mark.parametrize("window, error", [(0, ValueError), (True, TypeError), ("auto", ValueError),
                                           ("256 rows", ValueError), (2.5, TypeError)])
def test_window_is_checked(window, error):
    with pytest.raises(error, match="window"):
        W.parse_window(window)
    assert W.parse_window("2MiB") == (2 << 20, None) and W.parse_window(7) == (None, 7)


def test_samples_see_a_change_anywhere_they_look_and_not_elsewhere():
    x = np.random.default_rng(1).integers(0, 255, 1 << 20, dtype=np.uint8)
    s = W.sample(x)
    assert s is not None and len(s) == 8 * W.SAMPLES
    spots = W._spots(x.nbytes)
    y = x.copy()
    y[spots[100]] ^= 1
    assert W.sample(y) != s
    others = np.setdiff1d(np.arange(x.nbytes), spots)
    y = x.copy()
    y[others[:1000]] ^= 1
    assert W.sample(y) == s
    small = np.arange(13, dtype=np.uint8)  # fewer bytes than spots: every byte
    assert W.sample(small) == small.tobytes()
    assert W.sample(x[::2]) is None  # not one block: not sampled


def test_after_k_batches_the_caller_waits_for_about_sqrt_k_of_them_within_its_patience():
    def source(n):
        for i in range(n):
            time.sleep(0.01)
            yield np.full(8, i, np.int64)

    reader = W.WindowReader(source(40), None, 100, 1, read_ahead=True)
    try:
        w, _ = reader.next()  # the first batch, at once
        assert len(w.items) == 1
        taken = 1
        while taken < 16:  # take what is there, without waiting for more
            w, _ = reader.next(patience_s=0.0)
            taken += len(w.items)
        t0 = time.perf_counter()
        w, _ = reader.next(patience_s=5.0)  # after >= 16: waits for isqrt(k) >= 4 of them
        assert len(w.items) >= math.isqrt(taken) and time.perf_counter() - t0 < 2.0
        w, _ = reader.next(patience_s=0.0)  # no patience: whatever was read (at least one)
        assert 1 <= len(w.items) < math.isqrt(taken + 4)
    finally:
        reader.close()


def test_a_window_of_small_batches_fits_the_bulk_staging():
    """Batches of at most 1 MiB: a window closes before it outgrows run_batches' bulk block
    (a 256 MiB window of them would go through the ring, batch by batch)."""
    from fullpipe.pipeline import bulk

    rng = np.random.default_rng(2)
    for sizes in (rng.integers(1, 1 << 20, 400), np.full(400, 1 << 20), rng.integers(1, 300, 260_000)):
        xs = [np.zeros(int(n), np.uint8) for n in sizes]
        run = Runner()
        list(_imap(run, xs, window="256MiB", read_ahead=False))
        assert len(run.windows) > 1 and all(bulk.fits(w, W.SMALL_BATCH_BYTES) for w in run.windows), sizes[:3]
        # and not much smaller: the next batch would not have fit
        assert all(not bulk.fits(w + [W.SMALL_BATCH_BYTES], W.SMALL_BATCH_BYTES) for w in run.windows[:-1])
    run = Runner()
    list(_imap(run, [np.zeros((1 << 20) + 1, np.uint8)] * 80, window="256MiB", read_ahead=False))
    assert [len(w) for w in run.windows] == [80]  # larger batches: the window's bytes


@pytest.mark.parametrize("read_ahead", [True, False])
def test_an_object_array_is_refused_by_the_run_not_a_hang(read_ahead):
    """An object array is not sampled (its bytes are pointers); the run refuses it, and
    nothing waits for a reader thread that died."""

    def refuse(items, whole):
        if any(np.asarray(x).dtype.hasobject for x in items):
            raise TypeError("object arrays cannot go to the GPU")
        return [np.asarray(x) * 2 for x in items]

    items = [np.zeros(4, np.int32)] * 3 + [np.array([1, "a"], dtype=object)]
    with pytest.raises(TypeError, match="object arrays"):
        list(_imap(refuse, items, window=2, read_ahead=read_ahead))


def test_a_failure_inside_the_reader_thread_reaches_the_caller(monkeypatch):
    calls = {"n": 0}
    real = W.sample

    def broken(arr):  # the reader's third sample fails (the caller samples too: not counted)
        if threading.current_thread().name == "fullpipe-imap-reader":
            calls["n"] += 1
            if calls["n"] == 3:
                raise MemoryError("out of memory in the reader")
        return real(arr)

    monkeypatch.setattr(W, "sample", broken)
    got = []
    with pytest.raises(MemoryError, match="in the reader"):
        for y in _imap(Runner(), [np.full(4, i, np.int32) for i in range(6)], window=8):
            got.append(int(y[0]))
    assert got == [0, 2]  # the batches read before it, then the error


def test_an_iterable_that_waits_for_the_last_output_is_not_waited_for_forever():
    """A request loop: batch k+1 is made only once output k is back. The sqrt(k) wait for
    more batches lasts at most about a run's time."""
    q = queue.Queue()
    q.put(np.zeros(4, np.int32))

    def requests(n):
        for _ in range(n):
            yield q.get()

    got = []

    def serve():
        for y in _imap(Runner(sleep_s=0.002), requests(40), window="64MiB"):
            got.append(y)
            q.put(np.full(4, len(got), np.int32))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and [int(y[0]) for y in got] == [2 * i for i in range(40)]


def test_ctrl_c_while_reading_on_the_callers_thread_comes_at_once():
    def source():
        for i in range(3):
            yield np.full(4, i, np.int32)
        raise KeyboardInterrupt

    run = Runner()
    with pytest.raises(KeyboardInterrupt):
        list(_imap(run, source(), window=8, read_ahead=False))
    assert run.windows == []  # not after running what was read


def test_closing_drops_what_was_read_ahead_and_frees_the_iterable(monkeypatch):
    import gc
    import weakref

    monkeypatch.setattr(W, "CLOSE_WAIT_S", 0.2)
    made = []
    gate = threading.Event()

    def slow_after_some():  # reads ahead 6 batches, then blocks (a queue with nothing in it)
        for i in range(100):
            if i == 7:
                gate.wait()
            x = np.full(1 << 18, i, np.int32)
            made.append(weakref.ref(x))
            yield x

    gen = _imap(Runner(sleep_s=0.05), slow_after_some(), window=4)
    next(gen)
    time.sleep(0.3)  # the reader fills its pending window, then blocks in the iterable
    gen.close()
    gc.collect()
    alive = [r for r in made[1:] if r() is not None]
    assert len(made) >= 5 and len(alive) <= 1, (len(made), len(alive))  # (at most the item being made)
    gate.set()

    src = (np.full(4, i, np.int32) for i in range(50))  # a fast iterable: free right after close
    gen = _imap(Runner(), src, window=4)
    next(gen)
    gen.close()
    assert int(next(src)[0]) > 0  # no "generator already executing"


def _loader_class(module: str, name: str = "DataLoader") -> type:
    """A class named like PyTorch's DataLoader (no torch here): iterates a list of batches,
    recording the thread each batch is made on, as an in-process loader's collate runs."""

    def __init__(self, batches, num_workers=0):
        self.batches, self.num_workers, self.threads = batches, num_workers, []

    def __iter__(self):
        for b in self.batches:
            self.threads.append(threading.current_thread())
            yield b

    return type(name, (), {"__module__": module, "__init__": __init__, "__iter__": __iter__})


def test_read_ahead_auto_reads_an_in_process_dataloader_on_the_callers_thread():
    DataLoader = _loader_class("torch.utils.data.dataloader")
    Sub = type("MyLoader", (DataLoader,), {"__module__": "user_code"})  # a subclass counts
    # iter(loader): PyTorch's iterator classes derive from _BaseDataLoaderIter, which keeps _num_workers
    BaseIter = type("_BaseDataLoaderIter", (), {"__module__": "torch.utils.data.dataloader"})
    SingleIter = type("_SingleProcessDataLoaderIter", (BaseIter,), {"__module__": "torch.utils.data.dataloader"})

    def loader_iter(workers):
        it = SingleIter()
        it._num_workers = workers
        return it

    for loader, expect in ((DataLoader([], 0), False), (Sub([], 0), False), (DataLoader([], 4), True),
                           (_loader_class("other.lib")([], 0), True), (iter([]), True), ([], True),
                           (loader_iter(0), False), (loader_iter(2), True)):
        got, why = W.choose_read_ahead(loader, "auto")
        assert got is expect and why.startswith("auto")
    assert W.choose_read_ahead(DataLoader([], 0), True) == (True, "given")  # an explicit choice stands
    with pytest.raises(TypeError, match="True, False or 'auto'"):
        W.choose_read_ahead([], "yes")

    # the caller's choice, through imap: every batch of a loader without workers is made on this thread
    xs = [np.full(100, i, np.float32) for i in range(40)]
    for workers, here in ((0, True), (4, False)):
        loader = DataLoader(xs, workers)
        read_ahead, _ = W.choose_read_ahead(loader, "auto")
        got = list(_imap(Runner(), loader, window=8, read_ahead=read_ahead))
        assert all(np.array_equal(y, 2 * x) for y, x in zip(got, xs)) and len(got) == 40
        assert all(t is threading.current_thread() for t in loader.threads) is here
