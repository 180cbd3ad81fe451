"""GPU tests of the measured plans of gemm(variant="hopper"): every candidate plan gives the
product (poisoned outputs, against float64), tune_gemm remembers a choice that gemm then
runs, FULLPIPE_GEMM_TUNE measures at a first call but never inside a CUDA graph capture,
and the stream gate holds a stream until the host opens it."""

from __future__ import annotations

import json

import pytest

from fullpipe.kernels import gemm, gemm_tuning, tune_gemm
from fullpipe.kernels._operands import operand

from ._torch import needs_torch
from .test_hopper_gemm import _inputs, _rel

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)

# (the products whose plans differ: few rows, a partial wave with long K, several waves)
SHAPES = [(40, 1032, 4104), (94, 2056, 8200), (501, 2536, 2056), (1000, 1032, 520)]


@pytest.fixture(autouse=True)
def own_tuning_file(tmp_path, monkeypatch):
    monkeypatch.setenv(gemm_tuning.ENV_FILE, str(tmp_path / "plans.json"))
    monkeypatch.delenv(gemm_tuning.ENV_TUNE, raising=False)
    gemm_tuning.forget()
    yield tmp_path / "plans.json"
    gemm_tuning.forget()


def _sms():
    import torch

    return torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("transposed", [False, True], ids=["b", "w.T"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_candidate_plan_gives_the_product(shape, transposed):
    import torch

    m, n, k = shape
    a, b = _inputs(m, n, k, torch.bfloat16, seed=m + n + k)
    if transposed:
        b = b.T.contiguous().T
    ref = a.double() @ b.double()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    plans = gemm_tuning.candidates(m, n, k, _sms(), transposed)
    assert any(p.stream_k == "all" for p in plans) or m > 900  # (the partial waves measure stream-K over all SMs)
    for p in plans:
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        gemm_tuning.run_plan(p, A, B, out, torch.cuda.current_stream())
        torch.cuda.synchronize()
        assert _rel(out, ref) < 1e-2, p.label


def test_tune_gemm_remembers_a_plan_that_gemm_then_runs(own_tuning_file):
    import torch

    m, n, k = 94, 2056, 8200
    results = tune_gemm([(m, n, k)], dtype="float16", b_transposed=True)
    (r,) = results
    assert (r.m, r.n, r.k, r.dtype, r.b_transposed) == (m, n, k, "float16", True)
    assert r.chosen_us > 0 and r.rule_us > 0 and r.speedup >= 1.0
    saved = json.loads(own_tuning_file.read_text())
    assert saved["sources"] == gemm_tuning.sources_digest()
    (key,) = saved["plans"]
    assert key.endswith("|float16|w.T|94x2056x8200")
    assert len(saved["plans"][key]["us"]) == len(gemm_tuning.candidates(m, n, k, _sms(), True))

    gemm_tuning.forget()  # (a new process: the plan comes from the file)
    g = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(m, k, device="cuda", generator=g).half()
    w = torch.randn(n, k, device="cuda", generator=g).half()  # (as an nn.Linear holds its weight)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    gemm(a, w.T, variant="hopper", stream=torch.cuda.current_stream(), out=out)
    torch.cuda.synchronize()
    assert _rel(out, a.double() @ w.T.double()) < 1e-2
    A, B = operand(a, "a"), operand(w.T, "b", transposed_ok=True)
    assert gemm_tuning.lookup(A, B, m, n, k).label == r.chosen


def test_first_call_tunes_under_the_env_but_not_inside_a_graph_capture(monkeypatch, own_tuning_file):
    import torch

    monkeypatch.setenv(gemm_tuning.ENV_TUNE, "1")
    m, n, k = 501, 2536, 2056
    a, b = _inputs(m, n, k, torch.bfloat16, seed=5)
    ref = a.double() @ b.double()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = gemm(a, b, variant="hopper", stream=s)
    s.synchronize()
    assert _rel(out, ref) < 1e-2
    assert len(json.loads(own_tuning_file.read_text())["plans"]) == 1

    m2 = 502  # (an untuned shape met inside a capture: the rule's plan, nothing measured)
    a2 = a.new_empty(m2, k).normal_()
    out2 = torch.empty(m2, n, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gemm(a2, b, variant="hopper", stream=torch.cuda.current_stream(), out=out2)
    out2.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert _rel(out2, a2.double() @ b.double()) < 1e-2
    assert len(json.loads(own_tuning_file.read_text())["plans"]) == 1
    assert tune_gemm() and len(json.loads(own_tuning_file.read_text())["plans"]) == 2  # (the shape left for later)


def test_stream_gate_holds_work_until_the_host_opens_it(device):
    import time

    from fullpipe.cuda.events import record
    from fullpipe.cuda.streams import create_stream
    from fullpipe.cuda.timing import StreamGate

    s = create_stream(device)
    gate = StreamGate.for_device(0)
    for _ in range(2):  # (each hold waits for a new value: the second holds too)
        with gate.hold(s):
            done = record(s)
            time.sleep(0.05)  # (no device-wide sync here: it would wait for the held stream)
            assert not done.is_done
        s.sync()
        assert done.is_done
    with gate.hold(s, at_most_s=0.2):  # (a block that waits on the held stream itself: the watchdog opens it)
        record(s).sync()


def test_first_call_on_the_default_stream_and_bad_operands_under_the_env(monkeypatch, own_tuning_file):
    import torch

    monkeypatch.setenv(gemm_tuning.ENV_TUNE, "1")
    m, n, k = 333, 3000, 1000
    a, b = _inputs(m, n, k, torch.bfloat16, seed=7)
    out = gemm(a, b, variant="hopper", stream=torch.cuda.current_stream())  # (torch's legacy default stream)
    torch.cuda.synchronize()
    assert _rel(out, a.double() @ b.double()) < 1e-2
    assert len(json.loads(own_tuning_file.read_text())["plans"]) == 1
    view = a.flatten()[1:1 + 320 * 1000].view(320, 1000)  # (2 bytes off: no TMA map; the same error as untuned)
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemm(view, b, variant="hopper", stream=torch.cuda.current_stream())
