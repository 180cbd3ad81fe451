"""CPU tests of the kernel fronts: launch planning and the errors users get."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe.cuda.memory import DeviceArray
from fullpipe.kernels import cluster, gemm, plan, small_tiles_gemm, normalize, cluster_gemm
from fullpipe.kernels.gemm import (FP32_STAGE_BYTES, VARIANTS, WMMA_CANDIDATES, WMMA_CONFIGS, WMMA_DEFAULT,
                                   WmmaConfig, wmma_config)


class FakeStream:  # never reached: validation happens before the stream is used
    def __cuda_stream__(self):
        raise AssertionError("the stream must not be touched before the inputs are validated")


def dev(shape, dtype=np.float32, ptr=0x10000):
    return DeviceArray(ptr, shape, dtype)


def test_plan_picks_vector_or_scalar_kernels_and_grids():
    p = plan("tiled", 4096, 4096, 4096, "float32")
    assert p.kernel == "gemm_tiled_f32" and p.grid == (32, 32) and p.block == 256 and p.shared_mem == 0
    p = plan("tiled", 1000, 1001, 999, "float32")
    assert p.kernel == "gemm_tiled_f32_scalar" and p.grid == (8, 8)
    p = plan("double_buffer", 300, 260, 64, "float32", stages=4)
    assert p.kernel == "gemm_double_buffer_s4" and p.shared_mem == 4 * FP32_STAGE_BYTES == 66560
    assert plan("double_buffer", 64, 64, 64, "float32", aligned=False).kernel.endswith("_scalar")
    p = plan("warp_specialized", 4096, 4096, 4096, "float32", sm_count=132)
    assert p.grid == (132,) and p.block == 320 and p.shared_mem == 4 * FP32_STAGE_BYTES + 128 * 132 * 4
    assert plan("warp_specialized", 100, 100, 100, "float32", sm_count=132).grid == (1,)
    p = plan("wmma", 8192, 8192, 8192, "bfloat16", stages=3, config="128x256x32_w64x64_s4")
    assert p.kernel == "gemm_wmma_bf16_s3" and p.grid == (64 * 32,) and p.shared_mem == 81408 and p.block == 256
    assert dict(p.defines) == {"WMMA_BM": 128, "WMMA_BN": 256, "WMMA_BK": 32, "WMMA_WM": 64, "WMMA_WN": 64,
                               "WMMA_MIN_BLOCKS": 1, "WMMA_PREFETCH": 1}
    p = plan("wmma", 1000, 1000, 64, "float16", config="128x128x32_w64x64_s4_b2")
    assert p.kernel == "gemm_wmma_f16_s4" and p.grid == (8 * 8,) and p.block == 128
    assert p.shared_mem == 4 * (128 * 40 + 32 * 136) * 2
    # no config: WMMA_DEFAULT, with its own stage count
    d = WMMA_CONFIGS[WMMA_DEFAULT]
    p = plan("wmma", 512, 512, 512, "float16")
    assert p.kernel == f"gemm_wmma_f16_s{d.stages}" and p.shared_mem == d.shared_mem and p.block == d.threads


def test_plan_shared_memory_fits_an_h100_block():
    for v in VARIANTS.values():
        if v.name == "wmma":
            continue
        for s in v.stages or (None,):
            dt = v.dtypes[0]
            assert plan(v.name, 512, 512, 512, dt, stages=s).shared_mem <= 227 * 1024
    for c in WMMA_CANDIDATES:
        p = plan("wmma", 512, 512, 512, "float16", config=c)
        assert p.shared_mem == c.shared_mem <= 227 * 1024
        assert c.min_blocks * (c.shared_mem + 1024) <= 228 * 1024, f"{c.name}: min_blocks blocks do not fit an SM"


def test_wmma_candidates_are_valid_and_named_uniquely():
    assert WMMA_DEFAULT in WMMA_CONFIGS
    assert len(WMMA_CONFIGS) == len(WMMA_CANDIDATES)
    for c in WMMA_CANDIDATES:
        assert wmma_config(c.name) == c
        assert c.threads == 32 * (c.bm // c.wm) * (c.bn // c.wn) <= 1024
    assert wmma_config(None, stages=3).stages == 3
    assert wmma_config("128x256x32_w64x64_s4", stages=2).name == "128x256x32_w64x64_s2"


@pytest.mark.parametrize(
    "config, stages, match",
    [
        ("nope", None, "unknown wmma config"),
        (WmmaConfig(bk=48), None, "multiple of 32"),
        (WmmaConfig(wm=24), None, "multiples of 16"),
        (WmmaConfig(bm=96), None, "whole number of"),
        (WmmaConfig(bm=256, bn=256, wm=32, wn=32), None, "at most 1024 threads"),
        (WmmaConfig(bm=128, bn=256, bk=64), 5, "shared memory"),
        (WmmaConfig(bm=128, bn=128, bk=64, min_blocks=2, stages=4), None, "do not fit one SM"),
        (WmmaConfig(stages=6), None, "stages must be one of"),
        (WmmaConfig(), 1, "stages must be one of"),
        (WmmaConfig(min_blocks=3), None, "min_blocks"),
        (WmmaConfig(bm=64, bn=80, wm=64, wn=80), None, "does not split"),
    ],
)
def test_wmma_config_errors_name_the_constraint(config, stages, match):
    with pytest.raises(ValueError, match=match):
        plan("wmma", 256, 256, 256, "float16", config=config, stages=stages)


def test_wmma_config_must_be_a_name_or_a_config():
    with pytest.raises(TypeError, match="WmmaConfig"):
        plan("wmma", 256, 256, 256, "float16", config=(128, 256))


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (("nope", 8, 8, 8, "float32"), {}, ValueError, "unknown variant"),
        (("tiled", 0, 8, 8, "float32"), {}, ValueError, "M must be >= 1"),
        (("tiled", 8, 8, 0, "float32"), {}, ValueError, "K must be >= 1"),
        (("tiled", 8, 8, 8, "float16"), {}, ValueError, "wmma"),
        (("wmma", 8, 8, 8, "float32"), {}, ValueError, "float16 or bfloat16"),
        (("wmma", 8, 12, 8, "float16"), {}, ValueError, "multiples of 8"),
        (("wmma", 8, 8, 12, "float16"), {}, ValueError, "multiples of 8"),
        (("wmma", 8, 8, 8, "float16"), {"aligned": False}, ValueError, "aligned"),
        (("double_buffer", 8, 8, 8, "float32"), {"stages": 5}, ValueError, "stages must be one of"),
        (("wmma", 8, 8, 8, "float16"), {"stages": 6}, ValueError, "stages must be one of"),
        (("tiled", 8, 8, 8, "float32"), {"config": "128x256x32_w64x64_s4"}, ValueError, "chooses a wmma tiling"),
        (("tiled", 8, 8, 8, "float32"), {"stages": 2}, ValueError, "no pipeline stages"),
    ],
)
def test_plan_errors_name_the_constraint(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        plan(*args, **kwargs)


def test_gemm_validates_before_touching_the_gpu():
    s = FakeStream()
    with pytest.raises(TypeError, match="stream is required"):
        gemm(dev((4, 4)), dev((4, 4)), stream=None)
    with pytest.raises(TypeError, match="NumPy"):
        gemm(np.ones((4, 4), np.float32), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm(dev((4, 5)), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="2-D"):
        gemm(dev((4,)), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="same dtype"):
        gemm(dev((4, 4)), dev((4, 4), np.float16), stream=s)
    with pytest.raises(ValueError, match="wmma"):
        gemm(dev((4, 4), np.float16), dev((4, 4), np.float16), variant="tiled", stream=s)
    with pytest.raises(ValueError, match="multiples of 8"):
        gemm(dev((16, 12), np.float16), dev((12, 16), np.float16), variant="wmma", stream=s)
    with pytest.raises(ValueError, match="M must be >= 1"):
        gemm(dev((0, 4)), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="unknown variant"):
        gemm(dev((4, 4)), dev((4, 4)), variant="fast", stream=s)
    with pytest.raises(ValueError, match="unknown wmma config"):
        gemm(dev((16, 16), np.float16), dev((16, 16), np.float16), variant="wmma", config="huge", stream=s)


def test_other_fronts_validate_before_touching_the_gpu():
    s = FakeStream()
    with pytest.raises(ValueError, match="multiples of 4"):
        small_tiles_gemm(dev((8, 6)), dev((6, 8)), stream=s)
    with pytest.raises(ValueError, match="float32"):
        cluster_gemm(dev((8, 8), np.float16), dev((8, 8), np.float16), stream=s)
    with pytest.raises(ValueError, match="1-D float32"):
        normalize(dev((4, 4)), stream=s)
    with pytest.raises(TypeError, match="stream is required"):
        normalize(dev((4,)), stream=None)


def test_cluster_grid_is_a_multiple_of_the_cluster_and_a_loads_shrink():
    assert cluster.grid_for(1000, 1000) == (16, 16)
    own = cluster.a_slice_loads(4096, 4096, 4096, share_a=False)
    shared = cluster.a_slice_loads(4096, 4096, 4096, share_a=True)
    assert own == cluster.CLUSTER * shared


def test_launch_plan_refuses_less_shared_memory_than_the_kernel_needs():
    from fullpipe.kernels.gemm import launch_plan

    p = plan("double_buffer", 256, 256, 256, "float32", stages=4)
    with pytest.raises(ValueError, match="less than the 66560 bytes"):
        launch_plan(p, 0, 0, 0, 256, 256, 256, stream=FakeStream(), shared_mem=1024)


# ---- the gemm benchmark's ncu evidence, without a GPU ---------------------------------
_NCU_CSV = '''==PROF== Connected to process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","gemm_double_buffer_s3","1","7","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_ldgsts.sum","inst","2,048"
"0","1","python","h","gemm_double_buffer_s3","1","7","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_global_ld.sum","inst","0"
"0","1","python","h","gemm_double_buffer_s3","1","7","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","smsp__issue_active.avg.pct_of_peak_sustained_active","%","71.5"
"1","1","python","h","gemm_warp_specialized_s4","1","7","(320, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","smsp__issue_active.avg.pct_of_peak_sustained_active","%","52.0"
"1","1","python","h","gemm_warp_specialized_s4","1","7","(320, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","","0.25"
'''


def test_gemm_bench_parses_ncu_csv_and_states_the_evidence():
    from fullpipe.experiments import gemm as bench

    per = bench.parse_ncu_csv(_NCU_CSV)
    assert per["gemm_double_buffer_s3"]["smsp__inst_executed_op_ldgsts.sum"] == 2048
    res = {"size": 2048, "per_kernel": per, "labels": bench.ncu_labels(3, 4, None)}
    rows = bench.ncu_rows(res)
    assert [r["kernel"] for r in rows] == ["ncu: double_buffer s3", "ncu: warp_specialized s4"]
    assert rows[0]["ratio"] == 1.0 and all(set(r) == set(bench._row(1, "x")) for r in rows)
    m = bench.ncu_metrics(res)
    assert m["ncu_double_buffer_async_load_share"] == 1.0 and m["ncu_warp_specialized_issue_active_pct"] == 52.0
    text = bench.ws_vs_db_evidence(res)
    assert "issue slots used 52% vs 72%" in text and "barrier 0.25" in text


def test_gemm_bench_ncu_degrades_to_a_note(monkeypatch):
    from fullpipe.experiments import gemm as bench

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr(bench.os.path, "isfile", lambda p: False)
    res = bench.ncu_evidence(256)
    assert res["per_kernel"] == {} and "ncu not found" in res["error"]
    assert bench.ws_vs_db_evidence(res) == ""


def test_fp32_ceiling_plan():
    from fullpipe.kernels.gemm import plan_fp32_ceiling

    p, q = plan_fp32_ceiling(1000, 1004, 996, 3), plan("double_buffer", 1000, 1004, 996, "float32", stages=3)
    assert p.kernel == "gemm_fp32_ceiling_s3" and (p.grid, p.block, p.shared_mem) == (q.grid, q.block, q.shared_mem)
    with pytest.raises(ValueError, match="stages must be one of"):
        plan_fp32_ceiling(64, 64, 64, 5)
    with pytest.raises(ValueError, match="multiple of 4"):
        plan_fp32_ceiling(64, 66, 64, 3)
    with pytest.raises(ValueError, match=">= 1"):
        plan_fp32_ceiling(0, 64, 64, 3)
