"""GPU tests: PyTorch models and CuPy functions through StreamPipeline with its
defaults (issue 14, points 1-5): a torch MLP and a small convnet (torch.nn layers) on
pageable and pinned torch CPU tensors and NumPy arrays, checked against the naive
loop (``.cuda()`` ... ``.cpu()`` per batch) within bf16/fp16 tolerance; variable-size
run_batches (rows and sequence lengths); a CuPy function; pinned bytes per run;
PyTorch CUDA-graph capture and its failure path; threads.

Fresh random inputs, outputs given as ``out=`` are poisoned (NaN) first."""

from __future__ import annotations

import re

import threading
import warnings

import numpy as np
import pytest

from fullpipe import StreamPipeline
from fullpipe.cuda.pool import DevicePool
from fullpipe.pipeline import PipelineWarning
from fullpipe.pipeline.list_paths import PIPELINED, ListPaths

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
nn = torch.nn
BF16_TOL = dict(rtol=3e-2, atol=3e-2)
FP16_TOL = dict(rtol=1e-2, atol=1e-2)


@pytest.fixture(scope="module", autouse=True)
def _torch_cuda(device):
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    torch.manual_seed(0)


@pytest.fixture
def pool(device):
    p = DevicePool(device, release_threshold="max")
    yield p
    p.close()


def mlp(d_in=256, d_hidden=1024, d_out=128):
    m = nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_out))
    return m.to("cuda", torch.bfloat16).eval()


def convnet():
    m = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10))
    return m.to("cuda", torch.float16).to(memory_format=torch.channels_last).eval()


def mlp_fn(model):
    @torch.inference_mode()
    def f(x):  # float32 rows in, float32 rows out, bf16 inside
        return model(x.to(torch.bfloat16)).float()

    return f


def conv_fn(model):
    @torch.inference_mode()
    def f(x):  # uint8 NCHW images in, float32 logits out
        h = x.to(torch.float16).div_(255).contiguous(memory_format=torch.channels_last)
        return model(h).float()

    return f


def naive(f, x, chunk):
    """The naive loop: .cuda(), f, .cpu() per chunk, on the current stream."""
    xt = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    return torch.cat([f(xt[i:i + chunk].cuda()).cpu() for i in range(0, len(xt), chunk)])


def host_input(kind, array):
    if kind == "numpy":
        return array
    t = torch.from_numpy(array)
    return t.pin_memory() if kind == "pinned" else t.clone()


@pytest.mark.parametrize("kind", ["numpy", "pageable", "pinned"])
def test_mlp_with_defaults(device, pool, kind):
    model = mlp()
    f = mlp_fn(model)
    x = host_input(kind, np.random.default_rng(1).standard_normal((50_000, 256), dtype=np.float32))
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        y = pipe.run(x)
        st = pipe.stats
    ref = naive(f, x, 4096)
    got = torch.from_numpy(y) if kind == "numpy" else y
    assert isinstance(y, np.ndarray) == (kind == "numpy")
    assert got.shape == (50_000, 128) and got.dtype == torch.float32
    if kind == "pinned":
        assert y.is_pinned()
    torch.testing.assert_close(got, ref, **BF16_TOL)
    assert st.chunk["source"] in ("tuned", "even split") and st.batches >= 3
    print(st)


@pytest.mark.parametrize("kind", ["numpy", "pageable", "pinned"])
def test_convnet_with_defaults(device, pool, kind):
    model = convnet()
    f = conv_fn(model)
    x = host_input(kind, np.random.default_rng(2).integers(0, 256, (1536, 3, 64, 64), dtype=np.uint8))
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        y = pipe.run(x)
    ref = naive(f, x, 256)
    got = torch.from_numpy(y) if kind == "numpy" else y
    assert got.shape == (1536, 10)
    torch.testing.assert_close(got, ref, **FP16_TOL)


def test_out_is_poisoned_then_filled_and_pinned_bytes_stop_after_run_one(device, pool):
    model = mlp()
    f = mlp_fn(model)
    x = torch.randn(40_000, 256)  # pageable: the ring's slots come from the pinned pool
    out = torch.full((40_000, 128), float("nan"))
    with StreamPipeline(f, pool=pool, device=device, chunk="2MiB") as pipe:
        allocated = []
        for _ in range(3):
            out.fill_(float("nan"))
            assert pipe.run(x, out=out) is out
            allocated.append(pipe.stats.pinned["allocated_bytes"])
            torch.testing.assert_close(out, naive(f, x, 4096), **BF16_TOL)
        assert allocated[1] == allocated[2] == 0, allocated
        xp = x.pin_memory()  # pinned input: the output is pinned, from the pool
        y = pipe.run(xp)
        assert y.is_pinned()
        del y
        y = pipe.run(xp)
        assert pipe.stats.pinned["allocated_bytes"] == 0, pipe.stats.pinned
        torch.testing.assert_close(y, naive(f, x, 4096), **BF16_TOL)


def test_variable_size_batches(device, pool):
    model = mlp()
    f = mlp_fn(model)
    rng = np.random.default_rng(3)
    batches = [torch.from_numpy(rng.standard_normal((int(rng.integers(1, 3000)), 256), dtype=np.float32))
               for _ in range(40)]
    with StreamPipeline(f, streams=3, pool=pool, device=device) as pipe:
        ys = pipe.run_batches(batches)
        again = pipe.run_batches(batches[::-1])
    for b, y in zip(batches, ys):
        torch.testing.assert_close(y, f(b.cuda()).cpu(), **BF16_TOL)
    torch.testing.assert_close(again[0], ys[-1], rtol=0, atol=0)


class _Images(torch.utils.data.Dataset):
    """Random uint8 images made on demand (a dataset read from disk, in miniature)."""

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g), i % 10


@pytest.mark.parametrize("pin_memory", [False, True])
def test_imap_over_a_dataloader_and_a_generator(device, pool, pin_memory):
    """imap takes a DataLoader's batches (pinned or not, with workers) and a generator that
    makes a new array per batch; its outputs are run_batches' on the same batches, in order."""
    model = convnet()
    f = conv_fn(model)
    loader = torch.utils.data.DataLoader(_Images(), batch_size=64, num_workers=2, pin_memory=pin_memory)
    with StreamPipeline(f, streams=3, pool=pool, device=device) as pipe:
        got = list(pipe.imap((x for x, _ in loader), window=5))
        assert pipe.imap_stats["batches"] == 16 and 4 <= pipe.imap_stats["windows"] <= 16  # windows of <= 5
        xs = [x for x, _ in loader]
        want = pipe.run_batches(xs)
        assert [y.is_pinned() for y in got] == [pin_memory] * 16
        for y, w, x in zip(got, want, xs):
            torch.testing.assert_close(y, w, rtol=0, atol=0)
            torch.testing.assert_close(y, f(x.cuda()).cpu(), **FP16_TOL)
    rng = np.random.default_rng(7)
    sizes = [int(n) for n in rng.integers(1, 3000, 50)]
    gen = (np.random.default_rng(i).standard_normal((n, 256), dtype=np.float32) for i, n in enumerate(sizes))
    fm = mlp_fn(mlp())
    with StreamPipeline(fm, streams=3, pool=pool, device=device) as pipe:
        ys = list(pipe.imap(gen))  # the default window: 64 MiB, at least 12 batches
        assert pipe.imap_stats["batches"] == 50 and [len(y) for y in ys] == sizes
    for i, (n, y) in enumerate(zip(sizes, ys)):
        x = np.random.default_rng(i).standard_normal((n, 256), dtype=np.float32)
        torch.testing.assert_close(torch.from_numpy(y), fm(torch.from_numpy(x).cuda()).cpu(), **BF16_TOL)


def test_variable_sequence_lengths_through_an_encoder_layer(device, pool, monkeypatch):
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True,
                                       dropout=0.0).to("cuda").eval()

    @torch.inference_mode()
    def f(x):
        return layer(x)

    rng = np.random.default_rng(4)
    batches = [torch.from_numpy(rng.standard_normal((int(rng.integers(1, 16)), int(rng.integers(8, 200)), 128),
                                                    dtype=np.float32)) for _ in range(30)]
    # at most 4 x 199 x 128 floats: small batches (<= 1 MiB), ~18 MB in all (a list of at most 8 MiB
    # runs plainly from a pipeline's second run on: test_a_short_list_after_the_first_run_goes_plainly...)
    small = [b[:4].clone() for b in batches for _ in range(3)]
    # (the pipelined run's staging is what is tested here: a long list of small batches runs
    # plainly where that measured faster, test_a_long_list_of_small_batches_runs_the_way_measured_faster)
    monkeypatch.setattr(ListPaths, "next_path", lambda self, key, may_thread=False: PIPELINED)
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        ys = pipe.run_batches(batches)  # some batches over 1 MiB: through the ring
        assert pipe.stats.staging == {"input": "ring", "output": "ring"}
        ys_small = pipe.run_batches(small)
        # outputs made from each y: placed in the run's pinned block as they are made; the
        # inputs go to the GPU in groups, each x cut from one tensor over them
        assert pipe.stats.staging == {"input": "bulk", "output": "bulk"} and pipe.stats.bulk_uploads >= 1
        outs = [torch.full_like(b, float("nan")) for b in small]
        pipe.run_batches(small, outs=outs)  # outs given: in bulk both ways
        assert pipe.stats.staging == {"input": "bulk", "output": "bulk"}
        pipe.run_batches(small, outs=outs)
        assert pipe.stats.pinned["allocated_bytes"] == 0  # the bulk blocks come back from the pinned pool
        # pinned batches: pinned outputs cut from one block for the run, sized from the first
        # batch's rows (a later, longer sequence that does not fit gets a block of its own)
        pinned = [b.pin_memory() for b in batches]
        yp = pipe.run_batches(pinned)
        assert pipe.stats.staging == {"input": "direct", "output": "direct"}
        assert all(y.is_pinned() for y in yp)
        assert pipe.stats.pinned["allocations"] + pipe.stats.pinned["reuses"] < len(batches) // 2
    for y, z in zip(ys, yp):
        torch.testing.assert_close(z, y, rtol=1e-3, atol=1e-3)
    for b, y in zip(batches, ys):
        assert y.shape == b.shape
        torch.testing.assert_close(y, f(b.cuda()).cpu(), rtol=1e-3, atol=1e-3)
    for b, y, o in zip(small, ys_small, outs):
        torch.testing.assert_close(y, f(b.cuda()).cpu(), rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(o, y, rtol=0, atol=0)


def test_cupy_function(device, pool):
    cp = pytest.importorskip("cupy")
    x = np.random.default_rng(5).random((300_000, 8))
    with StreamPipeline(lambda a: cp.sqrt(a).sum(axis=1), form="cupy", pool=pool, device=device, chunk=10_000) as pipe:
        y = pipe.run(x)
        assert pipe.stats.staging["input"] == "bulk" and pipe.stats.bulk_uploads >= 1  # each x cut from one array
    assert y.shape == (300_000,)
    np.testing.assert_allclose(y, np.sqrt(x).sum(axis=1), rtol=1e-12)


def test_auto_chunk_is_reused(device, pool):
    f = mlp_fn(mlp())
    x = torch.randn(200_000, 256)  # 200 MB: probed
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        pipe.run(x)
        first = pipe.stats.chunk
        pipe.run(x)  # x seen again: pinned in place, the ring's models without its host copies
        second, staged = pipe.stats.chunk, pipe.stats.staging["input"]
        pipe.run(x)
        third = pipe.stats.chunk
    # (a first call that cost a good part of the run, as the first of a fresh process: the first run at the
    # larger probe size alone, the second probes the smaller; else both sizes in the first run)
    one_size = "a second probe size on the next" in first["reason"]
    assert first["source"] == "tuned" and first["probe_batches"] >= (2 if one_size else 4)
    assert staged == "pinned in place"
    if one_size:
        assert second["source"] == "tuned" and second["probe_batches"] == 2
    else:
        assert second["source"] == "reused from the ring" and second["probe_batches"] == 0
    assert third["source"] == "reused" and third["probe_batches"] == 0
    print(first["reason"])


def test_torch_graph_capture(device, pool):
    model = mlp()
    f = mlp_fn(model)
    x = torch.randn(30_000, 256)
    start = pool.stats().used_bytes
    with StreamPipeline(f, graph=True, streams=3, chunk=4096, pool=pool, device=device) as pipe:
        y = pipe.run(x)
        g = pipe.stats.graph
        # 8 batches on 3 lanes: 4096 rows on lanes 0, 1, 2; the 1328-row tail (batch 7) on lane 1
        assert g["kind"] == "torch" and g["captures"] == 4
        assert g["launches"] == pipe.stats.batches
        torch.testing.assert_close(y, naive(f, x, 4096), **BF16_TOL)
        y2 = pipe.run(x)  # replays only
        assert pipe.stats.graph["captures"] == 0
        torch.testing.assert_close(y2, y, rtol=0, atol=0)
    assert pool.stats().used_bytes == start


def test_torch_graph_capture_failure_is_clean(device, pool):
    from fullpipe.pipeline import GraphCaptureError

    @torch.inference_mode()
    def syncs(x):
        if x.sum().item() > 1e30:  # .item() synchronizes: not capturable
            return x
        return x * 2

    x = torch.randn(10_000, 64)
    start = pool.stats().used_bytes
    with StreamPipeline(syncs, graph=True, streams=2, chunk=1000, pool=pool, device=device) as pipe:
        with pytest.raises(GraphCaptureError) as info:
            pipe.run(x)
        assert info.value.batch_index == 0
        assert pool.stats().used_bytes == start and not pipe.resources()["running"]
    with StreamPipeline(syncs, streams=2, chunk=1000, pool=pool, device=device) as eager:
        torch.testing.assert_close(eager.run(x), x * 2)
    # PyTorch's random generators left capture mode with the failed capture: random ops
    # on the GPU still work in this process (they raised "Offset increment outside graph
    # capture" in later tests before the generators were reset).
    assert torch.isfinite(torch.randn(1000, device="cuda")).all()


@pytest.mark.parametrize("compute_threads", [1, 2])
def test_threads_each_with_a_torch_pipeline_on_one_pool(device, pool, compute_threads):
    """8 threads, each with its own pipeline on one pool; with compute_threads=2 their
    calls all go to the process's shared compute threads."""
    model = mlp()
    f = mlp_fn(model)
    start = pool.stats().used_bytes
    errors, results = [], {}

    def worker(i):
        try:
            x = torch.randn(20_000 + 1000 * i, 256)
            with StreamPipeline(f, streams=2, chunk="1MiB", pool=pool, device=device,
                                compute_threads=compute_threads) as pipe:
                results[i] = (x, pipe.run(x))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    for x, y in results.values():
        torch.testing.assert_close(y, naive(f, x, 4096), **BF16_TOL)
    assert pool.stats().used_bytes == start


def test_bfloat16_tensors_in_and_out(device, pool):
    model = mlp()

    @torch.inference_mode()
    def f(x):  # bf16 in, bf16 out
        return model(x)

    x = torch.randn(20_000, 256).to(torch.bfloat16)
    with StreamPipeline(f, pool=pool, device=device, chunk=2048) as pipe:
        y = pipe.run(x)
        assert y.dtype == torch.bfloat16 and y.shape == (20_000, 128)
        torch.testing.assert_close(y, naive(f, x, 2048), **BF16_TOL)
    with StreamPipeline(lambda a: a.to(torch.bfloat16), form="torch", pool=pool, device=device) as pipe:
        with pytest.raises(TypeError, match="NumPy output cannot hold"):
            pipe.run(np.ones((100, 256), np.float32))  # a NumPy input: a bfloat16 y has nowhere to go


def test_each_call_runs_on_its_lane_stream_and_the_callers_stream_comes_back(device, pool):
    caller = torch.cuda.Stream()
    seen, fail_at = [], [None]

    def f(x):
        seen.append(torch.cuda.current_stream().cuda_stream)
        if len(seen) == fail_at[0]:
            raise RuntimeError("failed on purpose")
        return x * 2

    x = torch.randn(40_000, 64)
    with torch.cuda.stream(caller), StreamPipeline(f, streams=3, chunk=1000, pool=pool, device=device) as pipe:
        y = pipe.run(x)
        assert torch.cuda.current_stream() == caller
        lanes = {int(s.handle) for s in pipe.streams}
        assert set(seen) == lanes and caller.cuda_stream not in seen
        torch.testing.assert_close(y, x * 2)
        fail_at[0] = len(seen) + 13
        with pytest.raises(RuntimeError, match="on purpose"):
            pipe.run(x)
        assert torch.cuda.current_stream() == caller


def test_compute_threads_carry_the_callers_modes_and_run_on_the_lane_streams(device, pool):
    model = mlp()
    seen = []  # per call: (thread, grad, inference mode, autocast, current stream)

    def f(x):
        seen.append((threading.current_thread().name, torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
                     torch.is_autocast_enabled("cuda"), torch.cuda.current_stream().cuda_stream))
        return model(x.to(torch.bfloat16)).float()

    x = torch.randn(40_000, 256)
    ref = naive(mlp_fn(model), x, 1000)
    with StreamPipeline(f, streams=3, chunk=1000, compute_threads=2, pool=pool, device=device) as pipe:
        with torch.inference_mode():
            y = pipe.run(x)
        lanes = {int(s.handle) for s in pipe.streams}
        assert pipe.stats.compute_threads["threads"] == 2 and "compute calls: on 2 host threads" in str(pipe.stats)
        assert len({s[0] for s in seen}) == 2 and all(s[0].startswith("fullpipe-compute-") for s in seen)
        assert all(s[2] for s in seen) and {s[4] for s in seen} == lanes
        seen.clear()
        with torch.no_grad():
            y_no_grad = pipe.run(x)
        assert not any(s[1] or s[2] for s in seen)
        seen.clear()
        y_grad = pipe.run(x)  # the caller records autograd: so do the calls
        assert all(s[1] and not s[2] for s in seen)
        seen.clear()
        with torch.autocast("cuda", dtype=torch.float16), torch.no_grad():
            pipe.run(x)
        assert all(s[3] for s in seen)
    for out in (y, y_no_grad, y_grad):
        torch.testing.assert_close(out, ref, **BF16_TOL)


def test_an_exception_on_a_compute_thread_is_clean(device, pool):
    def f(x):
        if x.shape[0] == 117:
            raise RuntimeError("failed on purpose")
        return x * 2

    batches = [torch.randn(100 + i, 64) for i in range(40)]
    start = pool.stats().used_bytes
    with StreamPipeline(f, streams=3, compute_threads=3, pool=pool, device=device) as pipe:
        with pytest.raises(RuntimeError, match="on purpose") as info:
            pipe.run_batches(batches)
        assert info.value.batch_index == 17
        assert pool.stats().used_bytes == start and not pipe.resources()["running"]
        pipe.compute = lambda x: x * 3
        ys = pipe.run_batches(batches[:20])
    torch.testing.assert_close(ys[19], batches[19] * 3)


def test_a_small_request_runs_plainly_with_the_pipelines_guarantees(device, pool):
    """run() of one small batch through a PyTorch function (pipeline/plain.py): upload, call,
    download on the caller's stream, no ring. Against the naive call: NumPy and torch,
    pageable and pinned (a pinned output for a pinned input), bfloat16 carried both ways,
    out=; a wrong row count and an exception in f are reported as in a pipelined run; an
    input of 16 MiB goes through the pipeline (its own streams)."""
    seen = []

    def f(t):
        seen.append(torch.cuda.current_stream())
        return t * 2

    caller = torch.cuda.current_stream()
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        x = torch.randn(256, 256)
        for xin in (x, x.pin_memory(), x.numpy(), x.to(torch.bfloat16)):
            y = pipe.run(xin)
            assert pipe.stats.staging == {"input": "plain", "output": "plain"}, pipe.stats.staging
            want = torch.as_tensor(xin) * 2
            assert type(y) is type(xin) and y.dtype == xin.dtype
            torch.testing.assert_close(torch.as_tensor(y), want, rtol=0, atol=0)
            if isinstance(xin, torch.Tensor):
                assert y.is_pinned() == xin.is_pinned()
            assert seen[-1] == caller and torch.cuda.current_stream() == caller
        ro = np.frombuffer(x.numpy().tobytes(), np.float32).reshape(256, 256)  # read-only: pipelined, so that
        with warnings.catch_warnings():  # PyTorch's "not writable" warning is never raised
            warnings.filterwarnings("error", message=".*not writable.*")
            torch.testing.assert_close(torch.as_tensor(pipe.run(ro)), x * 2, rtol=0, atol=0)
        assert pipe.stats.staging["input"] != "plain"
        out = torch.full((256, 256), float("nan"))
        assert pipe.run(x, out=out) is out
        torch.testing.assert_close(out, x * 2, rtol=0, atol=0)
        with pytest.raises(ValueError, match="out has shape"):
            pipe.run(x, out=torch.empty(256, 128))
        big = torch.randn(16 << 20 >> 10, 256)  # 16 MiB: cut into chunks, pipelined
        torch.testing.assert_close(pipe.run(big), big * 2, rtol=0, atol=0)
        assert pipe.stats.staging["input"] != "plain" and pipe.stats.batches > 1 and seen[-1] != caller
    with StreamPipeline(lambda t: t[::2], pool=pool, device=device) as pipe:
        with pytest.raises(ValueError, match="one output row per input row"):
            pipe.run(x)

    def broken(t):
        raise RuntimeError("inside f")

    with StreamPipeline(broken, pool=pool, device=device) as pipe:
        with pytest.raises(RuntimeError, match="inside f") as info:
            pipe.run(x)
        assert info.value.batch_index == 0 and "run plainly" in " ".join(info.value.__notes__)
        assert torch.cuda.current_stream() == caller
        assert pipe.resources()["running"] is False


def test_a_small_request_after_the_first_takes_the_short_way_with_the_same_results(device, pool):
    """From a pipeline's second run on, a small input (pageable, or pinned by its owner) into
    a new output skips the rest of run() (StreamPipeline._run_small): the same output, stats
    and errors as the first run's plain path, which went through all of it."""
    calls = {"n": 0, "fail_at": None, "rows": None, "pipe": None}
    w = torch.randn(64, 64, device="cuda", requires_grad=True)  # outputs that require grad

    def f(t):
        calls["n"] += 1
        if calls["n"] == calls["fail_at"]:
            raise RuntimeError("inside f")
        if calls["pipe"] is not None:
            calls["pipe"].run(t.cpu())  # a nested run on the same pipeline: refused
        y = t.float() @ w
        return y[:calls["rows"]] if calls["rows"] else y

    x = torch.randn(300, 64)
    for xin in (x, x.numpy(), x.to(torch.bfloat16), x.pin_memory()):
        with StreamPipeline(f, pool=pool, device=device) as pipe:
            first = pipe.run(xin)  # the first run: the long way (the adapter is made)
            assert pipe._stats_later is None
            long_way = pipe.stats.as_dict()
            y = pipe.run(xin)
            assert pipe._stats_later is not None  # the short way: stats made when read
            st = pipe.stats.as_dict()
            assert type(y) is type(xin) is type(first) and tuple(y.shape) == (300, 64)
            if isinstance(xin, np.ndarray):
                assert y.dtype == np.float32
            else:
                assert y.dtype == torch.float32 and not y.requires_grad and y.is_pinned() == xin.is_pinned()
            torch.testing.assert_close(torch.as_tensor(y), torch.as_tensor(first), rtol=0, atol=0)
            want = (torch.as_tensor(xin).cuda().float() @ w).detach().cpu()
            torch.testing.assert_close(torch.as_tensor(y), want, rtol=0, atol=0)
            assert set(st) == set(long_way) and st["staging"] == long_way["staging"] == {"input": "plain", "output": "plain"}
            for k in ("chunk", "batches", "bytes_in", "bytes_out", "streams", "timed_batches"):
                assert repr(st[k]) == repr(long_way[k]), (k, st[k], long_way[k])  # (repr: the chunk's nan)
            assert st["pinned"].keys() == long_way["pinned"].keys()
            pinned_in = isinstance(xin, torch.Tensor) and xin.is_pinned()  # (its output: from the pinned pool)
            assert st["pinned"]["allocations"] + st["pinned"]["reuses"] == (1 if pinned_in else 0)
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        pipe.run(x)
        # the errors of the long way, at the same batch
        calls["rows"] = 299
        with pytest.raises(ValueError, match="one output row per input row") as info:
            pipe.run(x)
        assert info.value.batch_index == 0 and "run plainly" in " ".join(info.value.__notes__)
        calls["rows"], calls["fail_at"] = None, calls["n"] + 1
        with pytest.raises(RuntimeError, match="inside f"):
            pipe.run(x)
        calls["pipe"] = pipe
        with pytest.raises(RuntimeError, match="while a run is in progress"):
            pipe.run(x)
        calls["pipe"] = None
        assert pipe.resources()["running"] is False
        torch.testing.assert_close(pipe.run(x), (x.cuda() @ w).detach().cpu(), rtol=0, atol=0)
    with StreamPipeline(lambda t: t.to(torch.bfloat16), pool=pool, device=device) as pipe:
        pipe.run(x)
        with pytest.raises(TypeError, match="a NumPy output cannot hold"):
            pipe.run(x.numpy())  # the short way's message is the long way's
        assert pipe.run(x).dtype == torch.bfloat16


def test_a_short_list_of_large_outputs_is_copied_out_on_the_copy_threads(device, pool, monkeypatch):
    """A short list run plainly whose outputs are large (an LM head's logits: small inputs,
    outputs 16x larger): after the wait, the pinned stages go to the pageable outputs, new or
    given, on the pipeline's copy threads (pageable.HostCopier.copy_many, an array to a
    thread), every byte right."""
    from fullpipe.pipeline import pageable

    gen = torch.Generator().manual_seed(11)
    w = torch.randn(256, 4096, generator=gen).cuda()

    def f(t):
        return t @ w

    xs = [torch.randn(int(n), 256, generator=gen) for n in (100, 37, 257, 64, 199, 8)]  # 0.1-4 MiB out each
    threads_used = []
    real = pageable.HostCopier.copy_many

    def spy(self, copies):
        threads_used.append(len(self._runs(copies, self.threads)) if self._pool is not None else 1)
        return real(self, copies)

    monkeypatch.setattr(pageable.HostCopier, "copy_many", spy)
    with StreamPipeline(f, pool=pool, device=device, copy_threads=4) as pipe:
        pipe.run_batches(xs)  # (the first run goes the long way)
        for inputs, outs in ((xs, None), (xs, [torch.full((x.shape[0], 4096), float("nan")) for x in xs]),
                             ([x.numpy() for x in xs], [np.full((x.shape[0], 4096), np.nan, np.float32) for x in xs])):
            threads_used.clear()
            ys = pipe.run_batches(inputs, outs=outs)
            assert pipe.stats.staging == {"input": "plain", "output": "plain"}, pipe.stats.staging
            assert threads_used and threads_used[-1] > 1  # (runs of about equal bytes; the last output goes straight in)
            for x, y in zip(xs, ys):
                torch.testing.assert_close(torch.as_tensor(y), f(x.cuda()).cpu(), rtol=1e-5, atol=1e-4)


def test_a_short_list_after_the_first_run_goes_plainly_with_the_same_results(device, pool):
    """From a pipeline's second run on, run_batches of a list small in all (at most 8 MiB)
    skips the pipelined run (StreamPipeline._run_small_list; f on the caller's stream): the same
    outputs as the first run's long way (row shapes that vary, NumPy, bfloat16, pinned
    inputs with pinned outputs, outs=), the long way's errors at the same batch; a list with
    pinned and pageable batches, or a larger list, still goes the long way."""
    gen = torch.Generator().manual_seed(7)
    shapes = [(37, 64), (5, 64), (300, 16), (1, 8), (129, 64)]
    base = [torch.randn(*s, generator=gen) for s in shapes]
    lists = {"torch": base, "numpy": [t.numpy() for t in base], "bfloat16": [t.to(torch.bfloat16) for t in base],
             "pinned": [t.pin_memory() for t in base]}

    seen = []

    def f(t):
        seen.append(torch.cuda.current_stream())
        return t.cumsum(dim=1) * 2

    caller = torch.cuda.current_stream()
    for name, xs in lists.items():
        with StreamPipeline(f, pool=pool, device=device) as pipe:
            long_way = pipe.run_batches(xs)
            assert pipe._stats_later is None and pipe.stats.staging["input"] != "plain", name
            ys = pipe.run_batches(xs)
            assert pipe._stats_later is not None, name  # the short way: stats made when read
            assert all(s == caller for s in seen[-len(xs):]) and torch.cuda.current_stream() == caller
            st = pipe.stats
            assert st.staging == {"input": "plain", "output": "plain"} and st.batches == len(xs), st
            assert st.bytes_in == sum(np.asarray(x).nbytes if name == "numpy" else x.nbytes for x in xs)
            for x, y, z in zip(xs, ys, long_way):
                assert type(y) is type(x) is type(z) and y.dtype == z.dtype and tuple(y.shape) == tuple(x.shape)
                torch.testing.assert_close(torch.as_tensor(y), torch.as_tensor(z), rtol=0, atol=0)
                if name != "numpy":
                    assert y.is_pinned() == (name == "pinned")
            if name in ("torch", "numpy"):  # (new pageable outputs: views of one array, each its own memory)
                arrays = [np.asarray(y) for y in ys]
                for k, a in enumerate(arrays):
                    a[...] = k
                assert all((a == k).all() for k, a in enumerate(arrays)), name
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        pipe.run_batches(base)
        mixed = [base[0].pin_memory(), *base[1:]]
        for y, x in zip(pipe.run_batches(mixed), mixed):
            torch.testing.assert_close(y, f(x.cuda()).cpu(), rtol=0, atol=0)
        assert pipe.stats.staging["input"] != "plain"  # (a mix of pinned and pageable: the long way)
        big = [torch.randn(1024, 1024, generator=gen) for _ in range(3)]  # 12 MiB in all
        for y, x in zip(pipe.run_batches(big), big):
            torch.testing.assert_close(y, f(x.cuda()).cpu(), rtol=0, atol=0)
        assert pipe.stats.staging["input"] != "plain"
        outs = [torch.full_like(x, float("nan")) for x in base]  # outs=: the short way too
        assert pipe.run_batches(iter(base), outs=iter(outs)) == outs and pipe.stats.staging["input"] == "plain"
        for x, o in zip(base, outs):
            torch.testing.assert_close(o, f(x.cuda()).cpu(), rtol=0, atol=0)
        npouts = [np.full(x.shape, np.nan, np.float32) for x in base]
        assert pipe.run_batches([x.numpy() for x in base], outs=npouts) == npouts
        assert pipe.stats.staging["input"] == "plain" and not np.isnan(np.concatenate([o.ravel() for o in npouts])).any()

    # errors: the long way's (a fresh pipeline's first run), then the short way's
    def failing(kind):
        def g(t):
            if kind == "raise" and t.shape[0] == 300:
                raise RuntimeError("inside f")
            if kind == "rows" and t.shape[0] == 5:
                return t[1:]
            if kind == "dtype" and t.shape[0] == 300:
                return t.double()
            return t * 2
        return g

    wrong = [torch.empty_like(x) for x in base]
    wrong[3] = torch.empty(1, 9)  # outs[3]: the right rows, the wrong row shape
    for kind, exc_type, batch, outs in (("raise", RuntimeError, 2, None), ("rows", ValueError, 1, None),
                                        ("dtype", ValueError, 2, None), ("none", ValueError, 3, wrong)):
        with StreamPipeline(failing(kind), pool=pool, device=device) as pipe:
            with pytest.raises(exc_type) as long_info:
                pipe.run_batches(base, outs=outs)
            assert pipe.resources()["running"] is False
            with pytest.raises(exc_type) as short_info:
                pipe.run_batches(base, outs=outs)
            assert short_info.value.args == long_info.value.args, (kind, short_info.value, long_info.value)
            assert short_info.value.batch_index == long_info.value.batch_index == batch
            assert "a list of small batches" in " ".join(short_info.value.__notes__)
            assert pipe.resources()["running"] is False and torch.cuda.current_stream() == torch.cuda.default_stream()


def test_a_long_list_of_small_batches_runs_the_way_measured_faster(device, pool):
    """run_batches of more than 16 small batches (list_paths.py): the runs of a kind of list
    alternate pipelined and plain (each batch on the caller's stream, pageable inputs up in
    groups through pinned memory) until each way ran four times, then keep one;
    every run's outputs equal the naive loop's, for each kind of input and with outs=;
    retune() measures again; an error in a plain run names the batch as a pipelined one
    does; a larger list, larger batches or pad_shapes=True are not tried plainly."""
    gen = torch.Generator().manual_seed(21)
    rows = [int(r) for r in torch.randint(1, 40, (60,), generator=gen)]
    base = [torch.randn(r, 96, generator=gen) for r in rows]
    lists = {"torch": base, "numpy": [t.numpy() for t in base], "bfloat16": [t.to(torch.bfloat16) for t in base],
             "pinned": [t.pin_memory() for t in base],
             "row shapes vary": [torch.randn(r, 48 + 16 * (r % 3), generator=gen) for r in rows]}

    def f(t):
        return (t.float().cumsum(dim=1) * 2)[:, :48]

    for name, xs in lists.items():
        want = [f(torch.as_tensor(x).cuda()).cpu() for x in xs]
        # (compute_threads=1: on a slow host these calls may set the pace, and the trial then
        # measures threads too: the next test)
        with StreamPipeline(f, pool=pool, device=device, compute_threads=1) as pipe:
            pipe.run_batches(xs)  # (the first run makes the adapter: the trial starts with the second)
            paths = []
            for run in range(10):
                outs = None
                if run == 3:  # outs=, NaN first
                    outs = [torch.full((x.shape[0], 48), float("nan")) for x in xs]
                    if name == "numpy":
                        outs = [o.numpy() for o in outs]
                ys = pipe.run_batches(xs, outs=outs)
                st = pipe.stats
                paths.append(st.list_path["path"])
                assert st.batches == len(xs), (name, run, st)
                assert (st.staging["input"] == "plain") == (paths[-1] == "plain"), (name, run, st.staging)
                assert (outs is None) or ys == outs
                for x, y, w in zip(xs, ys, want):
                    assert type(y) is type(x), (name, run)
                    torch.testing.assert_close(torch.as_tensor(y), w, rtol=1e-6, atol=1e-5)
                    if name != "numpy" and outs is None:
                        assert y.is_pinned() == (name == "pinned"), (name, run)
            assert paths[:8] == ["pipelined", "plain"] * 4, (name, paths)
            assert paths[8] == paths[9] and "chosen" in st.list_path["source"], (name, st.list_path)
            assert set(st.list_path) >= {"plain_us_per_batch", "pipelined_us_per_batch"}
            assert f"run {paths[9]}" in str(st)
            pipe.retune()
            pipe.run_batches(xs)
            assert pipe.stats.list_path["path"] == "pipelined" and "trial run 1" in pipe.stats.list_path["source"]

    def failing(t):
        if t[0, 0].item() == 1234.0:
            raise RuntimeError("inside f")
        return t * 2

    marked = list(base)
    marked[33] = base[33].clone()
    marked[33][0, 0] = 1234.0
    with StreamPipeline(failing, pool=pool, device=device) as pipe:
        pipe.run_batches(base)
        for run_first in ("pipelined", "plain"):
            pipe.run_batches(base)  # (the trial's next run: a failed run is not measured)
            with pytest.raises(RuntimeError, match="inside f") as info:
                pipe.run_batches(marked)  # the other way
            assert info.value.batch_index == 33 and pipe.resources()["running"] is False
            assert ("run plainly" in " ".join(info.value.__notes__)) == (run_first == "pipelined")
            assert torch.cuda.current_stream() == torch.cuda.default_stream()
    with StreamPipeline(f, pool=pool, device=device, compute_threads=1) as pipe:
        big = [torch.randn(2048, 256, generator=gen) for _ in range(20)]  # 2 MiB a batch
        pipe.run_batches(big)
        for _ in range(3):
            pipe.run_batches(big)
            assert pipe.stats.list_path is None and pipe.stats.staging["input"] != "plain"
    with StreamPipeline(f, pool=pool, device=device) as pipe:  # (measured for threads only: the next test)
        pipe.run_batches(big)
        for _ in range(6):
            pipe.run_batches(big)
            lp = pipe.stats.list_path
            assert lp["path"] != "plain" and pipe.stats.staging["input"] != "plain"
            assert "plain_us_per_batch" not in lp and re.search(r"of [48]\b|chosen", lp["source"]), lp
    with StreamPipeline(f, pool=pool, device=device, pad_shapes=True) as pipe:  # (padding is the pipelined way's)
        for _ in range(4):
            pipe.run_batches(base)
            assert pipe.stats.list_path is None and pipe.stats.staging["input"] != "plain"


def test_a_long_list_whose_calls_set_the_pace_keeps_them_on_threads_where_faster(device, pool):
    """compute_threads="auto" (the default): a long list whose calls take most of a
    pipelined run's time is measured with its calls on 3 threads too (list_paths.py), and
    keeps them unless they were slower; the outputs are the naive loop's in every
    run. A call that sleeps lets the GIL go, as PyTorch's operators do: 3 threads call it
    about 3x as often. Not inside ``with torch.device(...)`` (per-thread state the threads
    would not see); a call failing on a thread runs the list again here, with a warning,
    and the pipeline's calls stay here."""
    import time

    gen = torch.Generator().manual_seed(35)
    xs = [torch.randn(int(r), 64, generator=gen) for r in torch.randint(1, 30, (40,), generator=gen)]
    want = [x * 3 for x in xs]

    def slow(t):  # (a host-bound call: 1 ms on the host for a tiny kernel)
        time.sleep(1e-3)
        return t * 3

    def check(ys):
        for y, w in zip(ys, want):
            torch.testing.assert_close(y, w, rtol=0, atol=0)

    with StreamPipeline(slow, pool=pool, device=device) as pipe:
        pipe.run_batches(xs)
        paths = []
        for _ in range(14):
            check(pipe.run_batches(xs))
            paths.append(pipe.stats.list_path["path"])
        assert paths[:12] == ["pipelined", "plain", "pipelined", "threads", "plain", "threads"] + [
            "pipelined", "plain", "threads"] * 2, paths
        assert paths[12:] == ["threads", "threads"] and pipe.stats.list_path["source"].startswith("chosen")
        lp = pipe.stats.list_path
        assert lp["threads_us_per_batch"] < 0.6 * lp["pipelined_us_per_batch"], lp
        assert pipe.stats.compute_threads["threads"] == 3 and "run threads" in str(pipe.stats)
        with torch.device("cuda", 0):  # (a torch function mode)
            check(pipe.run_batches(xs))
            assert pipe.stats.list_path["path"] == "pipelined" and pipe.stats.compute_threads is None

    with StreamPipeline(slow, pool=pool, device=device) as pipe, torch.device("cuda"):
        for _ in range(10):  # (the first run makes the adapter: no list_path)
            check(pipe.run_batches(xs))
            assert (pipe.stats.list_path or {}).get("path") != "threads"
        assert "chosen" in pipe.stats.list_path["source"]

    calls, here = [], threading.get_ident()

    def here_only(t):
        calls.append(1)
        if threading.get_ident() != here:
            raise RuntimeError("not on this thread")
        return slow(t)

    with StreamPipeline(here_only, pool=pool, device=device) as pipe:
        for _ in range(4):  # (the adapter's run, then pipelined, plain, pipelined: the calls set the pace)
            check(pipe.run_batches(xs))
        n = len(calls)
        with pytest.warns(RuntimeWarning, match="failed when called from 3 threads") as said:
            check(pipe.run_batches(xs))  # (the threads' first run: it fails, and runs again here)
        ours = [w for w in said if "failed when called from" in str(w.message)]
        assert len(ours) == 1 and ours[0].filename == __file__ and "not on this thread" in str(ours[0].message)
        assert pipe.stats.list_path["path"] == "pipelined" and len(calls) - n > len(xs)
        for _ in range(6):
            check(pipe.run_batches(xs))
            assert pipe.stats.list_path["path"] != "threads"
        assert "chosen" in pipe.stats.list_path["source"]
    with StreamPipeline(slow, pool=pool, device=device, compute_threads=1) as pipe:
        for _ in range(8):
            pipe.run_batches(xs)
            assert (pipe.stats.list_path or {}).get("path") != "threads"

    def fails_on_a_mark(t):  # (a failure of the compute's own, on any thread)
        if t[0, 0].item() == 1234.0:
            raise RuntimeError("inside f")
        return slow(t)

    marked = [x.clone() for x in xs]
    marked[17][0, 0] = 1234.0
    with StreamPipeline(fails_on_a_mark, pool=pool, device=device) as pipe:
        for _ in range(4):
            pipe.run_batches(xs)
        with pytest.raises(RuntimeError, match="inside f") as info:  # (the threads' first run: raised as is)
            pipe.run_batches(marked)
        assert info.value.batch_index == 17 and pipe.resources()["running"] is False
        check(pipe.run_batches(xs))
        assert pipe.stats.list_path["path"] == "threads"  # (not turned off: it fails on one thread too)
    in_place = [x.clone() for x in xs]
    with StreamPipeline(slow, pool=pool, device=device) as pipe:  # (a failed run could not run again)
        for _ in range(14):
            pipe.run_batches(in_place, outs=in_place)
            assert (pipe.stats.list_path or {}).get("path") != "threads"


def test_a_long_list_of_larger_batches_measures_threads_where_its_calls_set_the_pace(device, pool):
    """A list of more than 16 batches of over 1 MiB each is not a list of small batches (it
    never runs plainly), but where its calls set the pace its trial measures them on 3
    threads too, and keeps them unless slower (a resnet18 over lists of 1-16 images:
    1.48x, session 36); the outputs are exact in every run. Calls that do not set the pace:
    pipelined throughout."""
    import time

    gen = torch.Generator().manual_seed(36)
    xs = [torch.randn(int(r), 4096, generator=gen) for r in torch.randint(64, 128, (24,), generator=gen)]
    want = [x * 3 for x in xs]

    def slow(t):  # (a host-bound call, letting the GIL go as PyTorch's operators do)
        time.sleep(2e-3)
        return t * 3

    def fast(t):
        return t * 3

    for compute, expected in ((slow, ["pipelined", "pipelined", "threads", "threads", "pipelined", "threads",
                                      "pipelined", "threads", "threads", "threads"]),
                              (fast, ["pipelined"] * 10)):
        with StreamPipeline(compute, pool=pool, device=device) as pipe:
            pipe.run_batches(xs)  # (the first run makes the adapter)
            paths = []
            for _ in range(10):
                for y, w in zip(pipe.run_batches(xs), want):
                    torch.testing.assert_close(y, w, rtol=0, atol=0)
                paths.append(pipe.stats.list_path["path"])
            lp = pipe.stats.list_path
            assert paths == expected, (compute.__name__, paths, lp)
            assert lp["source"].startswith("chosen") and "plain_us_per_batch" not in lp, lp
            if compute is slow:
                assert lp["threads_us_per_batch"] < 0.6 * lp["pipelined_us_per_batch"], lp
    outs = [torch.empty_like(x) for x in xs]
    with StreamPipeline(slow, pool=pool, device=device) as pipe:  # outs= apart from the inputs: the same trial
        pipe.run_batches(xs, outs=outs)
        paths = [pipe.run_batches(xs, outs=outs) and pipe.stats.list_path["path"] for _ in range(10)]
        assert paths[-1] == "threads" and "plain" not in paths, paths
        for y, w in zip(outs, want):
            torch.testing.assert_close(y, w, rtol=0, atol=0)
    in_place = [x.clone() for x in xs]
    with StreamPipeline(slow, pool=pool, device=device) as pipe:  # (a failed run could not run again)
        for _ in range(10):
            pipe.run_batches(in_place, outs=in_place)
            assert pipe.stats.list_path is None
    with StreamPipeline(slow, pool=pool, device=device, timing=True) as pipe:  # (not the defaults: as before)
        for _ in range(10):
            pipe.run_batches(xs)
            assert pipe.stats.list_path is None


def test_short_lists_read_each_output_before_the_next_call_and_resolve_lazy_conjugates(device, pool):
    """The short way of a list copies each y to pinned memory right after its call: a compute
    that returns one buffer it writes again in every call gets each batch's own result. A y
    with a lazy conjugate bit comes back conjugated, the long way (a D2H of its bytes) and the
    short way alike."""
    gen = torch.Generator().manual_seed(9)
    same = [torch.randn(16, 64, generator=gen) for _ in range(6)]
    buf = torch.empty(16, 64, device="cuda")

    def reuse(t):
        return torch.mul(t, 2, out=buf)

    with StreamPipeline(reuse, pool=pool, device=device) as pipe:
        ys = pipe.run_batches(same)  # the long way (see the next test for many batches)
        for x, y in zip(same, ys):
            torch.testing.assert_close(y, x * 2, rtol=0, atol=0)
        ys = pipe.run_batches(same)
        assert pipe.stats.staging["input"] == "plain"
        for x, y in zip(same, ys):
            torch.testing.assert_close(y, x * 2, rtol=0, atol=0)

    def conj(t):
        return (t.to(torch.complex64) * 1j).conj()  # a view with the conjugate bit set

    want = [conj(x.cuda()).resolve_conj().cpu() for x in same]
    with StreamPipeline(conj, pool=pool, device=device) as pipe:
        for _ in range(2):  # the long way, then the short way
            for y, w in zip(pipe.run_batches(same), want):
                assert not y.is_conj()
                torch.testing.assert_close(y, w, rtol=0, atol=0)
            y1 = pipe.run(same[0])
            assert not y1.is_conj() and type(y1) is torch.Tensor
            torch.testing.assert_close(y1, want[0], rtol=0, atol=0)


@pytest.mark.parametrize("case", ["reused buffer", "reduce-overhead", "reduce-overhead, float()",
                                  "reduce-overhead, 3 threads"])
def test_a_compute_that_writes_the_same_memory_every_call_gets_every_batchs_own_result(device, pool, case):
    """Session 23 (p140): the long way gave thousands of wrong rows per run for a compute
    returning one buffer it writes again, or torch.compile(mode="reduce-overhead")'s output.
    Now its calls turn serial (a warning, stats.compute_serial) and every row is right, for
    run() of a large pageable array and run_batches of many batches of mixed sizes, on the
    first run (a new user's) and later ones."""
    torch._dynamo.reset()
    model = mlp(256, 2048, 256)
    threads = 3 if "threads" in case else 1  # (compute threads)
    if case == "reused buffer":
        bufs: dict = {}

        @torch.inference_mode()
        def f(x):
            buf = bufs.get(x.shape[0])
            if buf is None:
                buf = bufs[x.shape[0]] = torch.empty(x.shape[0], 256, device="cuda", dtype=torch.bfloat16)
            torch.matmul(x.to(torch.bfloat16), model[0].weight[:256].t(), out=buf)
            return buf
        ref_f = f
        tol = dict(rtol=0, atol=0)
    else:
        compiled = torch.compile(model, mode="reduce-overhead")

        @torch.inference_mode()
        def f(x):
            y = compiled(x.to(torch.bfloat16))
            return y.float() if "float()" in case else y

        @torch.inference_mode()
        def ref_f(x):
            y = model(x.to(torch.bfloat16))
            return y.float() if "float()" in case else y
        tol = BF16_TOL
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(32768, 256, generator=gen)  # 32 MiB pageable
    want = naive(ref_f, x, 4096)
    sizes = [(300, 700, 1100, 1500, 1900)[int(v)] for v in torch.randint(0, 5, (40,), generator=gen)]
    xs = [torch.randn(n, 256, generator=gen) for n in sizes]
    want_list = [ref_f(b.cuda()).cpu() for b in xs]
    if threads > 1:  # PyTorch keeps CUDA graph trees per thread: a clean failure that says so
        with StreamPipeline(f, pool=pool, device=device, chunk="2MiB", compute_threads=threads) as pipe:
            with pytest.raises(Exception) as info:
                pipe.run(x)
            assert "compute_threads=1" in " ".join(getattr(info.value, "__notes__", []))
    with StreamPipeline(f, pool=pool, device=device, chunk="2MiB") as pipe:
        with pytest.warns(UserWarning, match="one after another"):
            y = pipe.run(x)
        torch.testing.assert_close(y.float(), want.float(), **tol)
        assert pipe.stats.compute_serial and pipe.stats.batches == 16
        for _ in range(2):
            y = pipe.run(x)
            torch.testing.assert_close(y.float(), want.float(), **tol)
            for got, w in zip(pipe.run_batches(xs), want_list):
                torch.testing.assert_close(got.float(), w.float(), **tol)
        assert pipe.stats.compute_serial
    # an eager function in the same thread, after those graphs ran, stays concurrent
    with StreamPipeline(mlp_fn(model), pool=pool, device=device, chunk="2MiB") as pipe:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PipelineWarning)
            pipe.run(x)
        assert pipe.stats.compute_serial is None


def test_a_reused_buffer_returned_as_a_view_or_captured_with_graph_true(device, pool):
    """A buffer written in every call and returned transposed (fullpipe's contiguous copy of
    it, on one stream, would race with the next call's write on another) is seen from its
    own span and called serially, every row right; with graph=True each stream's graph would
    write that one buffer: refused at the second stream's capture, cleanly."""
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(16384, 64, generator=gen)
    buf = torch.empty(64, 4096, device="cuda")

    @torch.inference_mode()
    def transposed(t):
        b = buf[:, :t.shape[0]]
        torch.mul(t.t(), 2, out=b)
        return b.t()  # (rows, 64), not contiguous

    with StreamPipeline(transposed, pool=pool, device=device, chunk=4096) as pipe:
        with pytest.warns(UserWarning, match="one after another"):
            y = pipe.run(x)
        torch.testing.assert_close(y, x * 2, rtol=0, atol=0)

    out = torch.empty(4096, 64, device="cuda")

    @torch.inference_mode()
    def into_out(t):
        return torch.mul(t, 2, out=out[:t.shape[0]])

    start = pool.stats().used_bytes
    with StreamPipeline(into_out, pool=pool, device=device, chunk=4096, graph=True) as pipe:
        with pytest.raises(ValueError, match="another stream's graph"):
            pipe.run(x)
        assert pool.stats().used_bytes == start and not pipe.resources()["running"]


def test_pad_shapes_runs_every_chunk_at_one_shape_with_the_same_results(device, pool):
    """pad_shapes=True: the last chunk runs at the chunk's rows (copies of its rows after it);
    only its own rows come back: a convnet, an in-place MLP, graph=True and CuPy."""
    shapes = []
    model = convnet()
    f_conv = conv_fn(model)

    def f(u8):
        shapes.append(tuple(u8.shape))
        return f_conv(u8)

    x = np.random.default_rng(12).integers(0, 256, (1000, 3, 64, 64), dtype=np.uint8)
    with StreamPipeline(f, chunk=256, pad_shapes=True, pool=pool, device=device) as pipe:
        y = pipe.run(x)
        assert pipe.stats.padded == {"batches": 1, "rows": 24} and set(shapes) == {(256, 3, 64, 64)}
    torch.testing.assert_close(torch.from_numpy(y), naive(f_conv, x, 256), **FP16_TOL)

    square = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda().eval()
    f_sq = torch.inference_mode()(lambda t: square(t))
    xt = torch.randn(10_000, 256)
    ref = naive(f_sq, xt.numpy(), 4096)
    with StreamPipeline(f_sq, chunk=4096, pad_shapes=True, pool=pool, device=device) as pipe:
        for _ in range(2):  # (the first in-place run of a pipeline calls serially, still padded)
            x_run = xt.clone()
            assert pipe.run(x_run, out=x_run) is x_run
            assert pipe.stats.padded == {"batches": 1, "rows": 4096 - 10_000 % 4096}
            torch.testing.assert_close(x_run, ref, rtol=1e-4, atol=1e-4)

    f_mlp = mlp_fn(mlp())
    x = torch.randn(30_000, 256)
    with StreamPipeline(f_mlp, graph=True, streams=3, chunk=4096, pad_shapes=True, pool=pool, device=device) as pipe:
        y = pipe.run(x)
        assert pipe.stats.graph["captures"] == 3  # one shape on 3 lanes (4 without padding)
        torch.testing.assert_close(y, naive(f_mlp, x, 4096), **BF16_TOL)
    with StreamPipeline(f_mlp, streams=3, chunk=4096, pad_shapes=True, copy_streams=True, pool=pool,
                        device=device) as pipe:
        y = pipe.run(x)  # (no lane buffers: the last chunk padded in a new tensor)
        assert pipe.stats.padded == {"batches": 1, "rows": 4096 - 30_000 % 4096}
        torch.testing.assert_close(y, naive(f_mlp, x, 4096), **BF16_TOL)

    shapes.clear()
    images = [torch.from_numpy(x) for x in np.split(np.random.default_rng(14).integers(
        0, 256, (300, 3, 64, 64), dtype=np.uint8), [40, 65, 105, 126, 176])]  # 40, 25, 40, 21, 50, 124 images
    with StreamPipeline(f, pad_shapes=True, pool=pool, device=device) as pipe:
        ys = pipe.run_batches(images)
        assert [s[0] for s in shapes] == [40, 40, 40, 40, 50, 124]
        assert pipe.stats.padded == {"batches": 2, "rows": 15 + 19}
    for y, im in zip(ys, images):
        torch.testing.assert_close(y, naive(f_conv, im, 256), **FP16_TOL)

    cp = pytest.importorskip("cupy")
    x = np.random.default_rng(13).random((100_500, 64))
    with StreamPipeline(lambda a: cp.sqrt(a).sum(axis=1), form="cupy", chunk=10_000, pad_shapes=True, pool=pool,
                        device=device) as pipe:
        y = pipe.run(x)
        assert pipe.stats.padded == {"batches": 1, "rows": 9_500}
    np.testing.assert_allclose(y, np.sqrt(x).sum(axis=1), rtol=1e-12)


def test_inputs_with_no_rows_give_outputs_with_no_rows_of_the_models_row_shape(device, pool):
    """A request window with nothing in it: run() of no rows gives the model's output row
    shape and dtype with no rows (f called once on an empty batch, as a loop would), in the
    input's kind (bf16 tensor in, bf16 tensor out); run_batches puts one in each empty
    batch's place beside the others' real outputs; an f that fails on no rows says so."""
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 8)).to("cuda", torch.bfloat16).eval()

    @torch.inference_mode()
    def f(x):
        return model(x).float()

    x = torch.randn(500, 16).to(torch.bfloat16)
    with StreamPipeline(f, pool=pool, device=device) as pipe:
        y = pipe.run(x[:0])
        assert isinstance(y, torch.Tensor) and y.shape == (0, 8) and y.dtype == torch.float32
        ys = pipe.run_batches([x[:0], x[:200], x[200:200], x[200:]])
        assert [tuple(t.shape) for t in ys] == [(0, 8), (200, 8), (0, 8), (300, 8)]
        ref = f(x.cuda()).cpu()
        torch.testing.assert_close(torch.cat(ys), ref, **BF16_TOL)
        out = torch.empty(0, 8)
        assert pipe.run(x[:0], out=out) is out
        with pytest.raises(ValueError, match="rows"):
            pipe.run(x[:0], out=torch.empty(3, 8))
    with StreamPipeline(torch.inference_mode()(lambda t: model(t)), pool=pool, device=device) as pipe:
        y16 = pipe.run(x[:0])
        assert y16.dtype == torch.bfloat16 and y16.shape == (0, 8)

    def picky(t):
        if t.shape[0] == 0:
            raise RuntimeError("cannot take an empty batch")
        return t * 2

    with StreamPipeline(picky, pool=pool, device=device) as pipe:
        with pytest.raises(RuntimeError, match="cannot take an empty batch") as info:
            pipe.run(np.zeros((0, 4), np.float32))
        assert any("no rows" in n for n in getattr(info.value, "__notes__", []))
