"""The tracer on a real GPU: the known pattern's order, consistent timestamps, no
overlap in a serial pipeline, mostly 2+ engines busy in a balanced 3-stream one,
and tracing costing at most 5 % of that pipeline's throughput."""

from __future__ import annotations

import importlib.util
import statistics

import pytest

from fullpipe import trace
from fullpipe.pipeline.workload import KERNEL_NAME, TracedPipeline

pytestmark = pytest.mark.gpu

HAVE_CUPTI = importlib.util.find_spec("cupti") is not None
BATCHES = 12
BATCH_BYTES = 16 << 20  # ~0.3 ms per copy at ~55 GB/s


@pytest.fixture(scope="module")
def wl(device):
    w = TracedPipeline(device, batches=BATCHES, batch_bytes=BATCH_BYTES)
    cal = w.calibrate()
    print(f"calibration: {cal}")
    for streams in (1, 3):
        w.run(streams)  # warm-up, untraced
    w.verify()
    yield w
    w.close()


def traced(fn, **kwargs):
    with trace.capture(**kwargs) as tl:
        fn()
    print(tl.summary())
    return tl


def test_cupti_is_used_when_installed(wl):
    if not HAVE_CUPTI:
        pytest.skip("cupti-python is not installed here")
    tl = traced(wl.known_pattern)
    assert tl.backend == "cupti", tl.notes


def test_known_pattern_order_and_consistent_timestamps(wl):
    ids = {}

    def work():
        ids["upload"] = trace.current().stream_id(wl.streams[0])
        ids["compute"] = trace.current().stream_id(wl.streams[1])
        wl.known_pattern()

    tl = traced(work)
    assert tl.problems() == []
    assert all(r.end_ns >= r.start_ns for r in tl.records)
    copies = [r for r in tl.timeline.device_records() if r.engine == "h2d"]
    kernels = [r for r in tl.timeline.device_records() if r.kind == "kernel"]
    assert len(copies) == 1 and len(kernels) == 1, tl.records
    up, k = copies[0], kernels[0]
    assert up.stream == ids["upload"] and k.stream == ids["compute"]
    assert up.end_ns <= k.start_ns, f"kernel starts {up.end_ns - k.start_ns} ns before its input arrived"
    assert up.bytes == wl.batch_bytes
    assert tl.timeline.streams[up.stream] == "upload"
    if tl.backend == "cupti":
        assert k.name == KERNEL_NAME and k.info["grid"][0] == wl.grid
        assert up.pinned is True


def test_cupti_records_carry_batch_tags(wl):
    if not HAVE_CUPTI:
        pytest.skip("cupti-python is not installed here")
    tl = traced(lambda: wl.run(3))
    ops = [r for r in tl.timeline.device_records() if r.engine in ("h2d", "compute", "d2h")]
    assert sorted({r.tag for r in ops}, key=str) == sorted(range(BATCHES), key=str), \
        "external correlation did not carry the batch tags to the records"


def test_serial_pipeline_has_no_copy_compute_overlap(wl):
    wl.reset_output()
    tl = traced(lambda: wl.run(1))
    wl.verify()
    assert tl.problems() == []
    s = tl.summary()
    ops = [r for r in tl.timeline.device_records() if r.engine in ("h2d", "compute", "d2h")]
    assert len(ops) == 3 * BATCHES
    assert s.copy_compute_overlap_fraction < 0.01
    assert s.at_least_2_fraction < 0.01


def test_three_stream_balanced_pipeline_keeps_two_engines_busy(wl, tmp_path):
    wl.reset_output()
    tl = traced(lambda: wl.run(3))
    wl.verify()
    assert tl.problems() == []
    s = tl.summary()
    assert s.at_least_2_fraction > 0.5, str(s)
    assert s.all_3_fraction > 0.2, str(s)
    assert tl.save(tmp_path / "t.json").stat().st_size > 0
    assert tl.plot(tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_event_fallback_on_the_gpu(wl):
    wl.reset_output()
    tl = traced(lambda: wl.run(3), backend="events")
    wl.verify()
    assert tl.backend == "events" and any("coarse timeline" in n for n in tl.notes)
    assert len(tl.records) == 3 * BATCHES
    assert tl.problems() == []
    assert tl.summary().at_least_2_fraction > 0.3


def test_tracing_costs_at_most_5_percent_of_throughput(device):
    """The target's own workload: the overlap experiment's balanced pipeline (96 batches
    of 8 MiB, compute as long as a copy, 3 streams, the executor), timed with and
    without a CUPTI capture around it, interleaved, 9 pairs, medians compared."""
    if not HAVE_CUPTI:
        pytest.skip("cupti-python is not installed here: the target is for CUPTI tracing")
    import numpy as np

    from fullpipe.cuda.memory import pinned_empty
    from fullpipe.cuda.pool import DevicePool
    from fullpipe.cuda.streams import create_stream
    from fullpipe.pipeline import StreamPipeline
    from fullpipe.pipeline.workload import MixKernel, calibrate_rounds

    n, batches = (8 << 20) // 4, 96
    x = pinned_empty(batches * n, np.uint32)
    y = pinned_empty(batches * n, np.uint32)
    x[:] = np.random.default_rng(5).integers(0, 2**32, x.size, dtype=np.uint32)
    pool = DevicePool(device)
    s = create_stream(device)
    da, db = pool.empty(n, np.uint32, s), pool.empty(n, np.uint32, s)
    kernel = MixKernel(device)
    calibrate_rounds(kernel, s, da, db, 0.17)  # ~ one 8 MiB copy each way at once
    pool.free_array(da, s)
    pool.free_array(db, s)
    s.sync()
    plain, under = [], []
    with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=device) as pipe:
        pipe.run(x, out=y)
        for _ in range(9):
            pipe.run(x, out=y)
            plain.append(pipe.stats.wall_ms)
            with trace.capture() as tl:
                pipe.run(x, out=y)
            under.append(pipe.stats.wall_ms)
            assert tl.backend == "cupti"
    ratio = statistics.median(under) / statistics.median(plain)
    print(f"pipeline ms: plain {plain}, traced {under}; traced/plain = {ratio:.4f}")
    assert ratio <= 1.05


def test_capture_sees_pytorch_kernels():
    torch = pytest.importorskip("torch")
    if not HAVE_CUPTI:
        pytest.skip("only CUPTI sees other libraries' kernels")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    s = torch.cuda.Stream()
    a = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    with trace.capture() as tl:
        with torch.cuda.stream(s), trace.tag("matmul"):
            b = a @ a
            b.cpu()
    kernels = [r for r in tl.records if r.kind == "kernel"]
    assert kernels, tl.records
    assert any(r.engine == "d2h" for r in tl.records)
    assert tl.problems() == []
