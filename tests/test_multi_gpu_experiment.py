"""The multi-gpu experiment's rules, figure and skip on hand-made results (no GPU).

Numbers shaped like the first look at the 2x H200 machine (peer copies ~385 GB/s each way,
NV18 = 478 GB/s per direction on paper); each test moves one number across a target and
checks that the claim it feeds moves with it. tests/report judges the rules again on a
recorded run."""

from __future__ import annotations

import copy
import types
from pathlib import Path

import pytest

from fullpipe.experiments import multi_gpu as M
from fullpipe.experiments.claims import UNJUDGED, derive, with_claims
from fullpipe.experiments.result import Result

NOMINAL = 18 * 26.562
PEER = {M.CE: 385.0, M.SM_PUSH: 400.0, M.SM_PULL: 370.0}


def stack(two: float = 1.88, pull: float = 1.80, wrong: dict | None = None, skipped: str | None = None) -> dict:
    """Stack metrics shaped like session 7's first measurement (19 micro-batches of 8192 tokens)."""
    if skipped:
        return {"stack_skipped": skipped}
    one = 222_000.0
    tps = {"1 GPU": one, "2 GPUs, peer copy": two * one, "2 GPUs, SM pull": pull * one}
    best = max(("2 GPUs, peer copy", "2 GPUs, SM pull"), key=lambda k: tps[k])
    m = {"stack_gpus": 2, "stack_tokens_per_s": tps, "stack_best": best, "stack_speedup": tps[best] / one,
         "stack_ideal_speedup": 2 * 18 / 19, "stack_microbatches": 19, "stack_microbatch_tokens": 8192,
         "stack_boundary_ms": 0.09, "stack_stage_ms": 16.3}
    if wrong:
        m["stack_wrong"] = wrong
    return m


def result(peer: dict | None = None, both: dict | None = None, nominal: float | None = NOMINAL,
           fraction: float | None = 0.95, trace_error: str | None = None, stack_metrics: dict | None = None) -> dict:
    peer = {**PEER, **(peer or {})}
    both = both or {k: 1.95 * v for k, v in peer.items()}
    table = []
    for method, gbps in peer.items():
        for direction in ("0->1", "1->0"):
            for mib in (1, 16, 256):
                g = gbps * mib / (mib + 2)
                table.append({"section": "bandwidth", "method": method, "direction": direction, "MiB": mib,
                              "ms": mib * M.MiB / (g * 1e6), "GB/s": g, "spread": 0.01,
                              "bound_GB/s": nominal, "vs_link": g / nominal if nominal else None,
                              "vs_local_d2d": g / 2000, "reps": 2})
    for method in (M.LOCAL_CE, M.LOCAL_SM):
        for mib in (1, 16, 256):
            table.append({"section": "bandwidth", "method": method, "direction": "local", "MiB": mib, "ms": 0.1,
                          "GB/s": 2000.0 * mib / (mib + 1), "spread": 0.01, "bound_GB/s": nominal,
                          "vs_link": None, "vs_local_d2d": 1.0, "reps": 2})
    alone = {"H2D": 4.9, "peer": 4.8, "D2H": 4.8, "compute": 4.9}
    metrics = {
        "link": {"kind": "NV18" if nominal else "unknown", "nvlinks": 18, "per_link_gbps": 26.562,
                 "nominal_gbps_per_direction": nominal, "source": "nvidia-smi: topo -m and nvlink -s"},
        "link_nominal_gbps_per_direction": nominal, "largest_MiB": 256, "directions": ["0->1", "1->0"],
        "peer_gbps_at_largest": {"0->1": dict(peer), "1->0": {k: v * 0.99 for k, v in peer.items()}, "both": both},
        "local_d2d_gbps_at_largest": 2043.0, "local_sm_gbps_at_largest": 1800.0,
        "overlap_alone_ms": alone,
        "overlap_ratio": {"peer + H2D + D2H + compute": 4.9 / 5.1, "peer + H2D": 0.99},
        "overlap_bytes": {"peer": 1 << 31, "H2D": 1 << 28, "D2H": 1 << 28},
        **(stack() if stack_metrics is None else stack_metrics),
    }
    if trace_error:
        metrics["overlap_trace_error"] = trace_error
    else:
        metrics.update({"overlap_fraction": fraction, "overlap_gbps_alone": {"peer": 390.0, "H2D": 55.0, "D2H": 56.0},
                        "overlap_gbps_together": {"peer": 380.0, "H2D": 53.0, "D2H": 54.0}})
    return Result(M.NAME, M.CLAIM, UNJUDGED, {"name": "NVIDIA H200"}, {"quick": False}, metrics,
                  table=table).as_dict()


def claims(r: dict) -> dict[str, dict]:
    return {c["key"]: c for c in derive(r, live=True)}


def test_the_claims_and_their_order():
    assert list(claims(result())) == ["peer-copy-link-bound", "peer-copy-both-ways", "peer-copy-overlap",
                                      "multi-gpu-stack-scaling"]


def test_link_bound_takes_the_best_method_of_the_slower_direction():
    c = claims(result())["peer-copy-link-bound"]
    assert c["ratio"] == pytest.approx(400.0 * 0.99 / NOMINAL)
    assert c["verdict"] == "partly supported" and "SM push" in c["measured"] and "478" in c["bound"]
    fast = claims(result(peer={M.SM_PULL: 0.95 * NOMINAL / 0.99}))["peer-copy-link-bound"]
    assert fast["verdict"] == "supported" and "SM pull" in fast["measured"]
    slow = claims(result(peer={M.CE: 300.0, M.SM_PUSH: 300.0, M.SM_PULL: 300.0}))["peer-copy-link-bound"]
    assert slow["verdict"] == "not supported"


def test_an_unknown_link_is_not_judged():
    c = claims(result(nominal=None))
    assert c["peer-copy-link-bound"]["verdict"] == "skipped"
    assert c["peer-copy-link-bound"]["measured"].startswith("not judged")
    assert c["peer-copy-both-ways"]["verdict"] == "skipped"


def test_both_ways_against_twice_the_link():
    c = claims(result(both={M.CE: 0.92 * 2 * NOMINAL}))["peer-copy-both-ways"]
    assert c["verdict"] == "supported" and c["ratio"] == pytest.approx(0.92)


def test_overlap_from_cupti_and_from_events_without_it():
    assert claims(result(fraction=0.95))["peer-copy-overlap"]["verdict"] == "supported"
    assert claims(result(fraction=0.8))["peer-copy-overlap"]["verdict"] == "partly supported"
    assert claims(result(fraction=0.5))["peer-copy-overlap"]["verdict"] == "not supported"
    c = claims(result(trace_error="RuntimeError: CUPTI tracing is not available here"))["peer-copy-overlap"]
    assert "no CUPTI trace" in c["measured"] and c["ratio"] == pytest.approx(4.9 / 5.1)


def test_stack_scaling_against_n_times_one_gpu():
    c = claims(result())["multi-gpu-stack-scaling"]
    assert c["ratio"] == pytest.approx(0.94) and c["verdict"] == "supported"
    assert "2 GPUs, peer copy" in c["measured"] and "N × one GPU's 222000 tokens/s" in c["bound"]
    assert c["bound"].endswith("N = 2")
    assert "4 and 8 GPUs not measured" in c["measured"]
    pull_wins = claims(result(stack_metrics=stack(two=1.5, pull=1.6)))["multi-gpu-stack-scaling"]
    assert pull_wins["ratio"] == pytest.approx(0.8) and pull_wins["verdict"] == "partly supported"
    assert "SM pull" in pull_wins["measured"].split(":")[0]
    assert claims(result(stack_metrics=stack(two=1.2, pull=1.1)))["multi-gpu-stack-scaling"]["verdict"] \
        == "not supported"
    wrong = claims(result(stack_metrics=stack(wrong={"2 GPUs, SM pull": 0.3})))["multi-gpu-stack-scaling"]
    assert wrong["verdict"] == "not supported" and "wrong logits" in wrong["measured"]
    none = claims(result(stack_metrics=stack(skipped="PyTorch is not installed")))["multi-gpu-stack-scaling"]
    assert none["verdict"] == "skipped" and "PyTorch" in none["measured"]


def test_stack_scaling_on_four_gpus_is_judged_by_the_worse_count():
    """Measured on 2 and 4 GPUs: each count by its faster boundary; the claim (N GPUs
    >= 0.85 N x one GPU for every N measured) takes the worse; 8 is named as not measured."""
    m = stack(two=1.88, pull=1.80)
    one = m["stack_tokens_per_s"]["1 GPU"]
    m["stack_tokens_per_s"].update({"4 GPUs, peer copy": 3.3 * one, "4 GPUs, SM pull": 3.5 * one})
    m.update(stack_gpus=4, stack_gpu_counts=[2, 4], stack_best="4 GPUs, SM pull")
    c = claims(result(stack_metrics=m))["multi-gpu-stack-scaling"]
    assert c["ratio"] == pytest.approx(0.875) and c["verdict"] == "supported"
    assert "4 GPUs, SM pull: " in c["measured"] and "= 0.88 of linear (peer copy 3.30×)" in c["measured"]
    assert "8 GPUs not measured (4 GPUs here)" in c["measured"] and c["bound"].endswith("N = 2, 4")
    m["stack_tokens_per_s"]["4 GPUs, SM pull"] = 2.9 * one  # 4 GPUs at 0.825 of linear: partly
    c = claims(result(stack_metrics=m))["multi-gpu-stack-scaling"]
    assert c["ratio"] == pytest.approx(3.3 / 4) and c["verdict"] == "partly supported"


def test_the_headline_needs_the_peer_claims_and_the_stack():
    res = with_claims(Result.from_dict(copy.deepcopy(result(peer={k: 460.0 for k in PEER}))), M.VERDICT_FROM)
    assert res.verdict == "supported"
    res = with_claims(Result.from_dict(copy.deepcopy(result())), M.VERDICT_FROM)
    assert res.verdict == "partly supported"  # the link claim partly, overlap and the stack supported


def test_figure_draws_from_the_json(tmp_path):
    figs = M.figures(result(), tmp_path)
    (path,) = figs.values()
    assert Path(path).name == "multi-gpu.png" and Path(path).stat().st_size > 10_000
    r = result(trace_error="no CUPTI")
    assert Path(next(iter(M.figures(r, tmp_path / "b").values()))).is_file()


def test_one_gpu_is_skipped_with_the_reason(monkeypatch):
    from fullpipe.cuda import peer

    monkeypatch.setattr(peer, "device_count", lambda: 1)
    facts = types.SimpleNamespace(name="NVIDIA H200", arch="sm_90", sm_count=132, copy_engines=3,
                                  max_resident_grids=128, global_memory=1, memory_pools_supported=True,
                                  driver_version="13.0", pcie_generation=None, pcie_width=None)
    r = M.run(types.SimpleNamespace(device=types.SimpleNamespace(index=0, facts=facts), quick=True))
    assert r.verdict == "skipped" and "needs two GPUs" in r.notes[0]
    rows = {c["key"]: c for c in derive(r.as_dict())}
    assert rows["peer-copy-link-bound"]["verdict"] == "skipped" and "two GPUs" in rows["peer-copy-link-bound"]["measured"]


def test_the_tracer_keeps_peer_copies(monkeypatch):
    """CUPTI delivers copies between GPUs as MEMCPY2 records (CUpti_ActivityMemcpyPtoP): the
    tracer turns them into p2p copies with their devices (the overlap section counts them)."""
    import enum

    from fullpipe.trace import activity

    class K(enum.IntEnum):
        MEMCPY, MEMSET, KERNEL, DRIVER, CONCURRENT_KERNEL = 1, 2, 3, 4, 10
        EXTERNAL_CORRELATION, SYNCHRONIZATION, MEMCPY2, MEMORY2, MEMORY_POOL = 36, 38, 22, 49, 50

    class CopyKind(enum.IntEnum):
        UNKNOWN, HTOD, DTOD, PTOP = 0, 1, 8, 10

    class MemKind(enum.IntEnum):
        UNKNOWN, DEVICE = 0, 3

    fake = types.SimpleNamespace(ActivityKind=K, ActivityMemcpyKind=CopyKind, ActivityMemoryKind=MemKind)
    monkeypatch.setattr(activity, "load_cupti", lambda: fake)
    s = activity.CuptiSession(tags=False)
    rec = types.SimpleNamespace(kind=int(K.MEMCPY2), start=1_000, end=3_000, copy_kind=int(CopyKind.PTOP),
                                src_kind=int(MemKind.DEVICE), dst_kind=int(MemKind.DEVICE), bytes=64 << 20,
                                stream_id=7, correlation_id=5, src_device_id=0, dst_device_id=1)
    s.consume([rec])
    (r,) = s.records
    assert (r.kind, r.direction, r.engine, r.bytes) == ("memcpy", "p2p", "p2p", 64 << 20)
    assert r.info["src_device"] == 0 and r.info["dst_device"] == 1
