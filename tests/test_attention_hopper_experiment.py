"""The attention-hopper experiment's rules, ncu parsing, figure and skips on hand-made
results (no GPU).

The numbers are shaped like an H200 run (cuDNN the fastest SDPA backend, the Hopper
kernel about 0.9x of it and about 1.9x the mma.sync kernel, tensor pipe 71 % vs 48 %);
each test moves one of them across a target and checks that the claim it feeds moves
with it, and that the experiment's verdict is the summary of its VERDICT_FROM claims.
tests/report judges the rules again on a recorded run once there is one."""

from __future__ import annotations

import copy
import sys
import types

import pytest

from fullpipe.experiments import attention_hopper as A
from fullpipe.experiments.claims import NOT_MEASURED, UNJUDGED, derive, with_claims
from fullpipe.experiments.ncu import parse_ncu_csv
from fullpipe.experiments.result import Result

# TFLOP/s per (head dim, causal): Hopper, mma.sync, SDPA flash, efficient, cuDNN
SPEEDS = {
    (128, False): {"hopper": 540.0, "mma_sync": 273.0, "FLASH_ATTENTION": 300.0, "EFFICIENT_ATTENTION": 170.0,
                   "CUDNN_ATTENTION": 570.0},
    (128, True): {"hopper": 527.0, "mma_sync": 283.0, "FLASH_ATTENTION": 293.0, "EFFICIENT_ATTENTION": 150.0,
                  "CUDNN_ATTENTION": 549.0},
    (64, False): {"hopper": 375.0, "mma_sync": 262.0, "FLASH_ATTENTION": 271.0, "EFFICIENT_ATTENTION": 140.0,
                  "CUDNN_ATTENTION": 423.0},
    (64, True): {"hopper": 372.0, "mma_sync": 259.0, "FLASH_ATTENTION": 278.0, "EFFICIENT_ATTENTION": 130.0,
                 "CUDNN_ATTENTION": 430.0},
}
NCU = [{"kernel": "fullpipe Hopper", "kernel_name": "flash_attention_hopper_d128_f16", "tensor_pipe_pct": 71.4,
        "issue_active_pct": 40.0, "time_us": 1010.0},
       {"kernel": "fullpipe mma.sync", "kernel_name": "flash_attention_d128_f16", "tensor_pipe_pct": 48.3,
        "issue_active_pct": 34.0, "time_us": 1990.0}]


def result(speeds: dict | None = None, ncu: list | None = None, ncu_skipped: str | None = None) -> dict:
    """A result dict as run() writes it; ``speeds`` replaces some configurations' numbers
    (a kernel left out of a configuration was not timed there)."""
    speeds = {**SPEEDS, **(speeds or {})}
    heads = dict(A.CONFIGS)
    table, metrics = [], {}
    for (dim, causal), tf in speeds.items():
        cfg = A.config_name(dim, heads[dim], causal)
        fastest = max(tf.get(b, 0) for b in A.SDPA_BACKENDS)
        flop = 4 * A.SEQ**2 * dim * heads[dim] * A.BATCH / (2 if causal else 1)
        for n in (*A.FULLPIPE, *A.SDPA_BACKENDS):
            x = tf.get(n)
            ms = flop / (x * 1e12) * 1e3 if x else None
            table.append({"config": cfg, "kernel": A.LABELS[n], "TFLOP/s": x, "ms": ms, "spread": 0.02 if x else None,
                          "vs_fastest_sdpa": x / fastest if x else None,
                          "vs_mma_sync": x / tf["mma_sync"] if x and tf.get("mma_sync") else None,
                          "rel_err": 4e-4 if x else None, "note": "" if x else "not run: RuntimeError: no kernel"})
            if x:
                metrics[A.metric_key(dim, causal, n)] = x
    ncu = NCU if ncu is None else ncu
    metrics.update({"ncu": copy.deepcopy(ncu), "ncu_config": "d128 H16 full",
                    "ncu_tensor_pipe_metric": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
                    if ncu else None, "ncu_skipped": ncu_skipped})
    return Result(A.NAME, A.CLAIM, UNJUDGED, {"name": "NVIDIA H200"}, {"quick": False}, metrics,
                  table=table).as_dict()


def claims(r: dict, live: bool = True) -> dict[str, dict]:
    return {c["key"]: c for c in derive(r, live=live)}


def verdicts(r: dict) -> dict[str, str]:
    return {k: c["verdict"] for k, c in claims(r).items()}


def headline(r: dict) -> str:
    return with_claims(Result.from_dict(copy.deepcopy(r)), A.VERDICT_FROM).verdict


def scaled(dim: int, causal: bool, kernel: str, factor: float) -> dict:
    return {(dim, causal): {**SPEEDS[(dim, causal)], kernel: SPEEDS[(dim, causal)][kernel] * factor}}


# --------------------------------------------------------------------------- rules
def test_every_target_met_is_supported():
    r = result()
    rows = claims(r)
    assert set(rows) == set(A.VERDICT_FROM)
    assert all(c["verdict"] == "supported" for c in rows.values()), rows
    assert headline(r) == "supported"
    d128 = rows["attention-hopper-d128-full"]
    assert d128["ratio"] == pytest.approx(540 / 570)  # cuDNN is the fastest SDPA backend here
    assert "SDPA cuDNN 570 TFLOP/s" in d128["bound"] and "flash (FA2) 300" in d128["bound"]
    assert rows["attention-hopper-vs-mma-sync-d128-causal"]["ratio"] == pytest.approx(527 / 283)
    assert rows["attention-hopper-tensor-pipe"]["ratio"] == pytest.approx(71.4 / 48.3)
    assert "71.4 %" in rows["attention-hopper-tensor-pipe"]["measured"]


def test_one_configuration_below_its_target_is_partly_then_not_supported():
    # d128 non-causal needs 0.9x: 540 * 0.93 / 570 = 0.88x
    low = result(scaled(128, False, "hopper", 0.93))
    assert verdicts(low)["attention-hopper-d128-full"] == "partly supported"
    assert verdicts(low)["attention-hopper-d128-causal"] == "supported"
    assert headline(low) == "partly supported"
    # d64 causal needs 0.85x: 372 * 0.98 / 430 = 0.848x; at 0.80 of its speed 0.69x, below partly (0.75x)
    assert verdicts(result(scaled(64, True, "hopper", 0.98)))["attention-hopper-d64-causal"] == "partly supported"
    worse = result(scaled(64, True, "hopper", 0.80))
    assert verdicts(worse)["attention-hopper-d64-causal"] == "not supported"
    assert headline(worse) == "partly supported"  # the other six claims still hold


def test_the_fastest_sdpa_backend_is_taken_per_configuration():
    """Where cuDNN did not run, the bound is the fastest backend that did (FA2 here), and
    a faster FA2 than cuDNN would be the bound too."""
    no_cudnn = {k: v for k, v in SPEEDS[(64, False)].items() if k != "CUDNN_ATTENTION"}
    row = claims(result({(64, False): no_cudnn}))["attention-hopper-d64-full"]
    assert row["ratio"] == pytest.approx(375 / 271) and "SDPA flash (FA2) 271" in row["bound"]
    fast_fa2 = {**SPEEDS[(128, True)], "FLASH_ATTENTION": 650.0}  # 527 / 650 = 0.81x, target 0.85x
    row = claims(result({(128, True): fast_fa2}))["attention-hopper-d128-causal"]
    assert row["ratio"] == pytest.approx(527 / 650) and row["verdict"] == "partly supported"
    assert "SDPA flash (FA2) 650" in row["bound"] and "cuDNN 549" in row["bound"]


def test_the_mma_sync_target_is_one_and_a_half_times():
    # 540 / (273 * 1.3) = 1.52x: supported; / (273 * 1.5) = 1.32x: partly; mma.sync faster: not supported
    assert verdicts(result(scaled(128, False, "mma_sync", 1.3)))["attention-hopper-vs-mma-sync-d128-full"] \
        == "supported"
    partly = result(scaled(128, False, "mma_sync", 1.5))
    assert verdicts(partly)["attention-hopper-vs-mma-sync-d128-full"] == "partly supported"
    assert headline(partly) == "partly supported"
    slower = verdicts(result(scaled(128, True, "mma_sync", 2.0)))  # 527 / 566
    assert slower["attention-hopper-vs-mma-sync-d128-causal"] == "not supported"
    assert slower["attention-hopper-vs-mma-sync-d128-full"] == "supported"


def test_tensor_pipe_ratio_below_target():
    ncu = [dict(NCU[0], tensor_pipe_pct=58.0), NCU[1]]  # 58 / 48.3 = 1.20x
    assert verdicts(result(ncu=ncu))["attention-hopper-tensor-pipe"] == "partly supported"
    ncu = [dict(NCU[0], tensor_pipe_pct=45.0), NCU[1]]
    assert verdicts(result(ncu=ncu))["attention-hopper-tensor-pipe"] == "not supported"


def test_without_ncu_the_tensor_pipe_claim_is_skipped_with_the_reason():
    for why in ("ncu not found", "FULLPIPE_NO_NCU=1"):
        r = result(ncu=[], ncu_skipped=why)
        row = claims(r)["attention-hopper-tensor-pipe"]
        assert row["verdict"] == "skipped" and why in row["measured"] and row["ratio"] is None
        assert headline(r) == "partly supported"  # only part of the claim was tested
    # an older results.json without ncu rows and without a reason: not measured, not a guess
    r = result(ncu=[])
    row = claims(r, live=False)["attention-hopper-tensor-pipe"]
    assert row["verdict"] == NOT_MEASURED and "metrics.ncu" in row["measured"]
    assert claims(r, live=True)["attention-hopper-tensor-pipe"]["verdict"] == "failed"  # run() must say why


def test_a_failed_or_skipped_run_keeps_its_verdict():
    r = result()
    for kept in ("failed", "skipped"):
        res = with_claims(Result.from_dict({**copy.deepcopy(r), "verdict": kept, "notes": ["d128 H16 full: "
                          "fullpipe Hopper differs from SDPA flash by 3.1e-01 (tolerance 0.01)"]}), A.VERDICT_FROM)
        assert res.verdict == kept
        assert {c["verdict"] for c in res.claims} == {kept}


# --------------------------------------------------------------------------- ncu
def test_ncu_rows_name_each_fullpipe_kernel():
    metric = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    header = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Metric Name",' \
             '"Metric Unit","Metric Value"'

    def line(i, kernel, name, unit, value):
        return f'"{i}","1","python3","h","{kernel}","1","13","{name}","{unit}","{value}"'

    csv = "\n".join(["==PROF== Connected to process 1", header,
                     line(0, "flash_attention_hopper_d128_f16", metric, "%", "71.42"),
                     line(0, "flash_attention_hopper_d128_f16", "gpu__time_duration.sum", "ns", "1,010,000"),
                     line(1, "flash_attention_d128_f16", metric, "%", "48.31"),
                     line(1, "flash_attention_d128_f16", "gpu__time_duration.sum", "ns", "1,990,000")])
    rows = {r["kernel"]: r for r in A.ncu_rows({"kernels": parse_ncu_csv(csv), "tensor_pipe_metric": metric})}
    assert rows["fullpipe Hopper"]["tensor_pipe_pct"] == pytest.approx(71.42)
    assert rows["fullpipe Hopper"]["time_us"] == pytest.approx(1010.0)
    assert rows["fullpipe mma.sync"]["kernel_name"] == "flash_attention_d128_f16"
    r = result(ncu=list(rows.values()))
    assert claims(r)["attention-hopper-tensor-pipe"]["ratio"] == pytest.approx(71.42 / 48.31)


# --------------------------------------------------------------------------- figure
def test_figure_is_drawn_from_the_json(tmp_path):
    drawn = A.figures(result(), tmp_path)
    assert len(drawn) == 1
    path = next(iter(drawn.values()))
    assert path.name == f"{A.NAME}.png" and path.stat().st_size > 10_000
    # without ncu rows and with a kernel not run in one configuration: still drawn
    no_cudnn = {k: v for k, v in SPEEDS[(64, True)].items() if k != "CUDNN_ATTENTION"}
    path = next(iter(A.figures(result({(64, True): no_cudnn}, ncu=[], ncu_skipped="ncu not found"),
                               tmp_path / "b").values()))
    assert path.stat().st_size > 10_000


def test_figure_needs_timed_rows(tmp_path):
    r = result()
    r["table"] = [dict(x, **{"TFLOP/s": None}) for x in r["table"]]
    with pytest.raises(KeyError):
        A.figures(r, tmp_path)


# --------------------------------------------------------------------------- skips
def _device(cc: tuple[int, int]):
    return types.SimpleNamespace(index=0, facts=types.SimpleNamespace(compute_capability=cc, arch=f"sm_{cc[0]}{cc[1]}"))


def test_off_sm90_the_experiment_is_skipped_and_says_why(monkeypatch):
    from fullpipe.experiments import Context

    monkeypatch.setattr(A, "device_info", lambda dev: {"name": "test"})
    for cc in ((8, 0), (8, 9), (10, 0)):
        r = A.run(Context(device=_device(cc)))
        assert r.verdict == "skipped"
        assert "sm_90a" in r.notes[0] and f"sm_{cc[0]}{cc[1]}" in r.notes[0]


def test_without_pytorch_the_experiment_is_skipped(monkeypatch):
    from fullpipe.experiments import Context

    monkeypatch.setattr(A, "device_info", lambda dev: {"name": "test"})
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    r = A.run(Context(device=_device((9, 0))))
    assert r.verdict == "skipped" and "PyTorch is not installed" in r.notes[0]
