"""The two-level experiment's rules, figure and pure helpers on hand-made results (no GPU).

Each test moves one number across a target and checks that the claim it feeds moves with
it; tests/report judges the rules again on a recorded run."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from fullpipe.experiments import two_level as T
from fullpipe.experiments.claims import UNJUDGED, derive, with_claims
from fullpipe.experiments.result import Result
from fullpipe.models import StackConfig, scratch_plan

MiB = 1 << 20


def result(both: float = 1.5, level1: float = 1.1, level2: float = 1.35, busy: float | None = 0.95,
           held_mib: float = 500.0, grew: int = 0, segments: int = 0, async_skipped: str | None = None) -> dict:
    """Metrics shaped like what run() records: eager at 200k tokens/s, the others as multiples."""
    eager = 200_000.0
    tps = {T.EAGER: eager, T.LEVEL1: level1 * eager, T.LEVEL2: level2 * eager, T.BOTH: both * eager}
    if not async_skipped:
        tps[T.EAGER_ASYNC] = 0.98 * eager
    tokens = 80_000
    wall = {k: tokens / v for k, v in tps.items()}
    m = {
        "tokens": tokens, "requests": 64, "lengths": [1250] * 64, "microbatch_tokens": 8192, "repeat": 3,
        "tokens_per_s": tps, "wall_s": wall, "spread": {k: 0.01 for k in tps},
        "vs_eager": {k: wall[T.EAGER] / w for k, w in wall.items()},
        "max_rel_err_vs_eager": {k: 0.01 for k in tps if k != T.EAGER}, "max_rel_err_bound": T.MAX_REL_ERR,
        "max_rel_err_vs_fp32": {k: 0.008 for k in tps}, "fp32_requests": 4,
        "matmul_choices": {"wqkv": "hopper"}, "attention": "fullpipe.kernels.attention(backend='auto')",
        "steady_prefills": 5, "pool_after_first": {"reserved_bytes": 1180 * MiB},
        "pool_after_steady": {"reserved_bytes": 1180 * MiB + grew}, "torch_steady_prefills": 2, "pool_allocations_per_prefill": 11.0,
        "pool_reserved_growth_bytes": grew, "pool_reserved_high_growth_bytes": 0,
        "torch_new_segments_steady": segments,
        "pool_reserved_high_bytes": int(held_mib * MiB) - 4 * MiB, "pool_used_high_bytes": 580 * MiB,
        "torch_peak_extra_bytes": 4 * MiB, "held_bytes": int(held_mib * MiB),
        "memory_bounds": {"preallocated": 1000 * MiB, "padded_whole": 9000 * MiB, "packed_whole": 5500 * MiB,
                          "largest_microbatch": 580 * MiB, "microbatches": 11, "most_requests_per_microbatch": 8,
                          "longest": 1988},
    }
    if async_skipped:
        m["async_skipped"] = async_skipped
    if busy is None:
        m["trace_error"] = "RuntimeError: CUPTI is not available"
    else:
        m.update(T.sm_stats([(0, int(busy * 100e6))], 0, int(100e6)))
        m.update({"trace_kernels": 1200})
    return Result(T.NAME, T.CLAIM, UNJUDGED, {"name": "NVIDIA H200"}, {"quick": False}, m,
                  table=T.table_rows(m)).as_dict()


def claims(r: dict) -> dict[str, dict]:
    return {c["key"]: c for c in derive(r, live=True)}


def test_the_claims_and_their_order():
    assert list(claims(result())) == [T.PREFILL_KEY, T.SM_BUSY_KEY, T.MEMORY_KEY, T.NO_MALLOC_KEY]


def test_prefill_against_eager():
    c = claims(result())[T.PREFILL_KEY]
    assert c["ratio"] == pytest.approx(1.5) and c["verdict"] == "supported"
    assert "200,000 tokens/s" in c["bound"] and "level 1 only 1.10×" in c["measured"]
    assert claims(result(both=1.2))[T.PREFILL_KEY]["verdict"] == "partly supported"
    assert claims(result(both=0.9))[T.PREFILL_KEY]["verdict"] == "not supported"
    skipped = claims(result(async_skipped="the child process failed"))[T.PREFILL_KEY]
    assert "cudaMallocAsync peer not run: the child process failed" in skipped["measured"]


def test_sm_busy_from_the_trace():
    assert claims(result(busy=0.95))[T.SM_BUSY_KEY]["verdict"] == "supported"
    c = claims(result(busy=0.8))[T.SM_BUSY_KEY]
    assert c["verdict"] == "partly supported" and c["ratio"] == pytest.approx(0.8)
    assert claims(result(busy=0.5))[T.SM_BUSY_KEY]["verdict"] == "not supported"
    c = claims(result(busy=None))[T.SM_BUSY_KEY]
    assert c["verdict"] == "skipped" and "no CUPTI trace" in c["measured"]
    # three traced prefills: the median one is judged, the spread is said
    r = result(busy=0.9)
    r["metrics"]["sm_busy_fractions"] = [0.43, 0.9, 0.96]
    c = claims(r)[T.SM_BUSY_KEY]
    assert c["verdict"] == "supported" and c["measured"].startswith("the median of 3 traced prefills (43%–96%)")


def test_memory_held_against_preallocating_for_the_longest():
    c = claims(result(held_mib=500))[T.MEMORY_KEY]
    assert c["ratio"] == pytest.approx(0.5) and c["verdict"] == "supported"
    assert "1988 tokens" in c["bound"] and "1,000 MiB" in c["bound"]
    assert claims(result(held_mib=800))[T.MEMORY_KEY]["verdict"] == "partly supported"
    assert claims(result(held_mib=1200))[T.MEMORY_KEY]["verdict"] == "not supported"


def test_no_malloc_in_steady_state():
    c = claims(result())[T.NO_MALLOC_KEY]
    assert c["verdict"] == "supported" and c["ratio"] == 1.0 and "1,180 MiB" in c["bound"]
    c = claims(result(segments=2))[T.NO_MALLOC_KEY]
    assert c["verdict"] == "partly supported" and "2 new segments" in c["measured"]
    c = claims(result(grew=2 * MiB))[T.NO_MALLOC_KEY]
    assert c["verdict"] == "not supported" and c["ratio"] == pytest.approx(1182 / 1180)


def test_the_headline_comes_from_the_prefill_claims():
    r = with_claims(Result.from_dict(copy.deepcopy(result())), T.VERDICT_FROM)
    assert r.verdict == "supported"  # every prefill claim supported
    r = with_claims(Result.from_dict(copy.deepcopy(result(held_mib=1200))), T.VERDICT_FROM)
    assert r.verdict == "partly supported"
    r = with_claims(Result.from_dict(copy.deepcopy(result(both=0.9, busy=0.5, held_mib=1200, grew=1))),
                    T.VERDICT_FROM)
    assert r.verdict == "not supported"


def test_table_rows_leave_out_a_form_not_run():
    rows = T.table_rows(result(async_skipped="no")["metrics"])
    assert [r["form"] for r in rows] == [T.EAGER, T.LEVEL1, T.LEVEL2, T.BOTH]
    assert rows[-1]["x eager"] == pytest.approx(1.5) and rows[0]["max rel err vs eager"] == 0.0


def test_sm_stats_by_hand():
    # kernels at [0, 10) [10, 30) [35, 40) [1000, 4000) [3500, 5000) us, span 0 .. 6000 us
    us = 1000
    k = [(0, 10 * us), (10 * us, 30 * us), (35 * us, 40 * us), (1000 * us, 4000 * us), (3500 * us, 5000 * us)]
    s = T.sm_stats(k, 0, 6000 * us)
    assert s["sm_busy_ms"] == pytest.approx(4.035)  # 30 + 5 + 4000 us
    assert s["sm_busy_fraction"] == pytest.approx(4.035 / 6)
    assert s["sm_gaps"] == 3 and s["sm_gaps_over_10us"] == 2  # 5 us, 960 us, 1000 us
    assert s["sm_largest_gap_ms"] == pytest.approx(1.0)
    assert s["sm_excerpt_ms"] == [[0.0, 0.03], [0.035, 0.04], [1.0, 3.0]]  # merged, cut at 3 ms


def test_memory_bounds_group_like_the_stack():
    config = StackConfig()
    b = T.memory_bounds(config, [100, 200, 300, 50], 400)  # micro-batches [100, 200], [300, 50]
    assert b["microbatches"] == 2 and b["most_requests_per_microbatch"] == 2 and b["longest"] == 300
    assert b["preallocated"] == scratch_plan(config, 2 * 300, 2).nbytes
    assert b["largest_microbatch"] == scratch_plan(config, 350, 2).nbytes
    assert b["padded_whole"] == scratch_plan(config, 4 * 300, 4).nbytes
    assert b["packed_whole"] == scratch_plan(config, 650, 4).nbytes


def test_requests_are_seeded_and_in_range():
    a, b = T.make_requests(64, 32000), T.make_requests(64, 32000)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    lengths = [r.size for r in a]
    assert min(lengths) >= T.MIN_LEN and max(lengths) <= T.MAX_LEN and len(set(lengths)) > 32
    assert all(r.dtype == np.int32 and 0 <= r.min() and r.max() < 32000 for r in a)


def test_figure_draws_from_the_json(tmp_path):
    (path,) = T.figures(result(), tmp_path).values()
    assert Path(path).name == "two-level.png" and Path(path).stat().st_size > 10_000
    (path,) = T.figures(result(busy=None, async_skipped="no"), tmp_path / "b").values()
    assert Path(path).is_file()


def test_the_eager_peer_in_a_child_process_on_the_cpu():
    """The child's machinery (job file, requests, weights from the seed, logits back) with a
    tiny stack on the CPU: its logits equal the parent's eager logits."""
    torch = pytest.importorskip("torch")

    from fullpipe.models import init_weights, reference_prefill

    c = StackConfig(layers=1, width=256, heads=2, kv_heads=1, head_dim=128, ffn_width=512, vocab=512,
                    max_context=64)
    reqs = [r[:n] % c.vocab for r, n in zip(T.make_requests(3, c.vocab), (5, 17, 64))]
    out, logits, why = T.run_async_peer(c, 3, reqs, "cpu", 1)
    assert why is None and len(out["walls"]) == 1
    ref = reference_prefill(c, init_weights(c, 3, "cpu"), reqs)
    assert max(T.rel_err_rows(torch.from_numpy(logits), ref)) == 0.0


def test_kernel_kinds_from_names_seen_in_the_stacks_traces():
    assert T.kernel_kind("gemm_hopper_persistent_bf16") == "GEMM"
    assert T.kernel_kind("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_NNT") == "GEMM"
    assert T.kernel_kind("flash_attention_hopper_bf16_d128") == "attention"
    assert T.kernel_kind("residual_rms_norm_bf16_v8") == "elementwise"
    assert T.kernel_kind("decode_split_bf16_d128_g1") == "other"


def test_the_two_levels_figure_draws_the_stream_and_the_roles(tmp_path):
    r = result()
    m = r["metrics"]
    m["kernel_excerpt_ms"] = [[0.0, 0.2, "elementwise"], [0.2, 1.1, "GEMM"], [1.1, 1.9, "attention"],
                              [1.9, 2.9, "GEMM"]]
    slices = 4  # 1 us per slice per consumer, the producer 4 slots ahead
    m["roles_shape"] = [4096, 6144, 2048]
    m["roles_blocks"] = [{"sm": 3, "span": [0, 6000], "producer": [[k * 10, k * 10 + 5] for k in range(slices)],
                          "consumer_wait": [[[k * 1000, k * 1000 + 100] for k in range(slices)] for _ in range(2)],
                          "consumer_mma": [[[k * 1000 + 100, k * 1000 + 1000] for k in range(slices)]
                                           for _ in range(2)],
                          "epilogue": [[4000, 5000], [4000, 5200]], "busy": 0.65}]
    figs = T.figures(r, tmp_path)
    assert len(figs) == 2
    assert all(p.exists() and p.stat().st_size > 20_000 for p in figs.values())


def test_the_pipelined_forms_copies_are_told_in_a_note():
    m = result()["metrics"]
    assert not any("StreamPipeline (CUPTI)" in n for n in T._notes(m))
    m.update({"pipeline_copy_busy_ns": 2_000_000, "pipeline_copy_under_compute_ns": 1_500_000,
              "pipeline_h2d_bytes": 300_000, "pipeline_d2h_bytes": 4 * MiB, "pipeline_sm_busy_fraction": 0.97})
    note = T._notes(m)[-1]
    assert "logits down 4.0 MiB" in note and "2.00 ms" in note and "75% of it" in note
