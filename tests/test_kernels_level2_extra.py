"""CPU tests of the cluster and persistent kernels beyond the shared SASS tests:
every build (default and tuned) compiles to an sm_90a cubin without spills and
holds the instructions its technique is about; the fronts' planning and the
errors users get; the ncu helpers of the cluster experiment on recorded text."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fullpipe.cuda import compiler, sass
from fullpipe.cuda.memory import DeviceArray
from fullpipe.kernels import cluster as cl
from fullpipe.kernels import persistent as pk

ARCH = "sm_90a"
ROOT = Path(__file__).resolve().parent.parent


def _sass(source: str, defines: dict | None = None) -> tuple[dict, dict[str, str]]:
    """(resources, SASS text per kernel) of a kernel source built for sm_90a."""
    mod = compiler.compile_package_kernel(f"kernels/{source}", arch=ARCH, defines=defines)
    text = sass.disassemble(mod.cubin)
    return mod.resources, {part.split(",", 1)[0].strip(): part
                           for part in re.split(r"\.section\s+\.text\.", text)[1:]}


def _counts(source: str, defines: dict | None = None) -> tuple[dict, dict[str, collections.Counter]]:
    res, parts = _sass(source, defines)
    out = {}
    for name, part in parts.items():
        c = sass.opcode_counts(part)
        for m in re.finditer(r"\b((?:LDS|LDG|STS|LD|LDGSTS)(?:\.[A-Z0-9_]+)+)\b", part):
            c[m.group(1)] += 1
        out[name] = c
    return res, out


def _no_spills(res: dict) -> None:
    for r in res.values():
        assert not r.spills and r.stack_frame_bytes == 0, f"{r.name} spills or uses local memory: {r}"


# --------------------------------------------------------------------------- cluster: SASS
CLUSTER_TUNINGS = list(cl.CLUSTER_TUNINGS)  # what check_config accepts
CLUSTER_BUILDS = [None, {"T_K": 16, "STAGES": 4}, {"T_K": 32, "STAGES": 3}, {"T_K": 16, "STAGES": 6},
                  {"T_K": 16, "STAGES": 3}, {"T_K": 32, "STAGES": 6},
                  # the racecheck diagnostic build, as `--selftest --full-barriers` runs it
                  {"T_K": 32, "STAGES": 4, "CLUSTER_FULL_BARRIERS": 1},
                  {"T_K": 16, "STAGES": 4, "CLUSTER_FULL_BARRIERS": 1}]


def _guarded(text: str, opcode: str) -> list[str]:
    """Lines of ``opcode`` instructions that carry a guard predicate (@P.. / @!P..)."""
    return [ln.strip() for ln in text.splitlines() if re.search(rf"@!?U?P[T0-9]+\s+{opcode}\b", ln)]


@pytest.mark.parametrize("defines", CLUSTER_BUILDS, ids=lambda d: "default" if d is None else
                         "-".join(f"{k}{v}" for k, v in d.items()))
def test_cluster_builds_compile_without_spills_and_use_cp_async_and_dsmem(defines):
    res, parts = _sass("cluster_gemm.cu", defines)
    _, counts = _counts("cluster_gemm.cu", defines)
    assert set(res) == {"cluster_gemm_own_a", "cluster_gemm_shared_a"}
    _no_spills(res)
    for name, c in counts.items():
        assert c["LDGSTS"] > 0, f"{name}: no cp.async"
        assert sum(v for k, v in c.items() if k.startswith("LDGSTS.E.BYPASS") and k.endswith(".128")) > 0, name
        assert c["UCGABAR_ARV"] > 0 and c["UCGABAR_WAIT"] > 0, f"{name}: no cluster barrier"
        assert c["LDL"] == 0 and c["STL"] == 0, name
    sh, own = counts["cluster_gemm_shared_a"], counts["cluster_gemm_own_a"]
    assert sh["LD.E.128"] > 0, "shared_a must gather A from its peers with 16-byte DSMEM loads"
    assert own["LD"] == 0, "own_a reads no other block's shared memory"
    # own_a: A and B with cp.async, no plain global load. shared_a: B with cp.async (the
    # LDGSTS above), its quarter of A with plain 16-byte loads (no cp.async for data
    # that other blocks read: racecheck cannot follow it across blocks).
    assert own["LDG"] == 0, "own_a copies A with cp.async"
    assert sh["LDG.E.128.CONSTANT"] + sh["LDG.E.128"] > 0, "shared_a loads its quarter of A with LDG.E.128"
    assert sh["LDG"] == sh["LDG.E.128.CONSTANT"] + sh["LDG.E.128"], "only 16-byte plain loads"
    # ... and no LDG is predicated: warps without a chunk of the quarter branch around it,
    # so a block executes exactly loads_per_block(...)["LDG"] of them (what ncu counts;
    # a predicated-off LDG would still be counted as executed).
    assert _guarded(parts["cluster_gemm_shared_a"], "LDG") == []
    # The release arrive is a GPU-scope fence on sm_90 (the cost of each hand-off).
    assert sh["MEMBAR"] >= sh["UCGABAR_ARV"]


def test_cluster_own_a_has_only_the_entry_and_exit_cluster_barriers():
    _, counts = _counts("cluster_gemm.cu")
    own = counts["cluster_gemm_own_a"]
    assert own["UCGABAR_ARV"] == 2 and own["UCGABAR_WAIT"] == 2
    assert own["BAR"] >= 1  # the per-slice __syncthreads


def test_cluster_kernels_keep_three_blocks_per_sm():
    res, _ = _counts("cluster_gemm.cu")
    for share, name in cl.KERNELS.items():
        smem = cl.shared_mem_bytes(share)
        assert 3 * (smem + 1024) <= 228 * 1024, f"{name}: {smem} bytes of shared memory"


@pytest.mark.parametrize("tuning", CLUSTER_TUNINGS, ids=lambda t: f"tk{t[0]}-s{t[1]}")
def test_cluster_registers_leave_room_for_three_blocks_per_sm(tuning):
    """In every tuning (shared memory may allow fewer: own_a at T_K=32 with 5 or 6 stages)."""
    tk, st = tuning
    res = compiler.compile_package_kernel(cl.SOURCE, arch=ARCH, defines={"T_K": tk, "STAGES": st}).resources
    for name in cl.KERNELS.values():
        regs = res[name].registers
        # registers are allocated per warp in units of 256, i.e. 8 per thread
        assert 3 * (-(-regs // 8) * 8) * 256 <= 65536, f"{name}: {regs} registers leave fewer than 3 blocks per SM"


@pytest.mark.parametrize("tuning", CLUSTER_TUNINGS, ids=lambda t: f"tk{t[0]}-s{t[1]}")
def test_cluster_launch_shared_memory_is_what_the_compiled_kernel_lays_out(tuning):
    """cluster_gemm() launches with shared_mem_bytes(); each build exports the size of
    the layout it indexes: they must agree in every tuning."""
    from tests.test_kernels_sass import exported_constant, max_threads

    tk, st = tuning
    mod = compiler.compile_package_kernel(cl.SOURCE, arch=ARCH, defines={"T_K": tk, "STAGES": st})
    text = sass.disassemble(mod.cubin)
    for share, name in cl.KERNELS.items():
        assert exported_constant(text, f"fp_dynamic_smem_{name}") == cl.shared_mem_bytes(share, tk, st), name
        assert max_threads(text, name) == cl.THREADS, name


def test_cluster_load_counts_by_construction():
    # Per K slice: own_a copies 64 rows of A per block, shared_a loads 16 (a quarter).
    assert cl.a_slice_loads(4096, 4096, 4096, False) == 4 * cl.a_slice_loads(4096, 4096, 4096, True)
    assert cl.A_LOAD_OP == {False: "LDGSTS", True: "LDG"}
    # Worked by hand, K = 1024, T_K = 32: 32 slices. A slice of own_a is 64 x 32 floats
    # = 512 chunks of 16 bytes = 16 warp-level LDGSTS; B is 32 x 64 floats = 16 LDGSTS.
    # shared_a's quarter is 16 x 32 floats = 128 chunks: one LDG.E.128 per thread of
    # 4 warps = 4 warp-level LDG per slice.
    own, sh = cl.loads_per_block(1024, False), cl.loads_per_block(1024, True)
    assert own == {"A": 16 * 32, "B": 16 * 32, "LDGSTS": 32 * 32, "LDG": 0}
    assert sh == {"A": 4 * 32, "B": 16 * 32, "LDGSTS": 16 * 32, "LDG": 4 * 32}
    # T_K = 16, K = 64: 4 slices; A slice 64 x 16 = 256 chunks = 8 LDGSTS, B 16 x 64 = 8,
    # quarter 16 x 16 = 64 chunks = 2 LDG.
    assert cl.loads_per_block(64, False, tile_k=16) == {"A": 8 * 4, "B": 8 * 4, "LDGSTS": 16 * 4, "LDG": 0}
    assert cl.loads_per_block(64, True, tile_k=16) == {"A": 2 * 4, "B": 8 * 4, "LDGSTS": 8 * 4, "LDG": 2 * 4}
    # K = 100, T_K = 32: 4 slices (the last one partly zero-filled, still loaded whole)
    assert cl.loads_per_block(100, True) == {"A": 16, "B": 64, "LDGSTS": 64, "LDG": 16}
    # A-load instructions own / shared = the cluster size; all LDGSTS shared / own = B / (A + B) = 1/2
    assert own["A"] / sh["A"] == cl.CLUSTER
    assert sh["LDGSTS"] / own["LDGSTS"] == 1 / 2


def test_cluster_expected_ncu_counts_at_1024():
    from fullpipe.experiments import cluster as ex

    # 1024^3: a 16 x 16 grid = 256 blocks = 64 clusters, 32 K slices of 32.
    exp = ex.expected_counts(1024)
    own, sh = exp["cluster_gemm_own_a"], exp["cluster_gemm_shared_a"]
    assert (own["blocks"], own["clusters"]) == (256, 64)
    assert own["A_op"] == "LDGSTS" and sh["A_op"] == "LDG"
    assert own["A_loads"] == own["ldgsts_A"] == 256 * 16 * 32 == 131072 and own["ldg_A"] == 0
    assert sh["A_loads"] == sh["ldg_A"] == sh["ldg"] == 256 * 4 * 32 == 32768 and sh["ldgsts_A"] == 0
    assert own["ldgsts_B"] == sh["ldgsts_B"] == 131072
    assert (own["ldgsts"], own["ldg"]) == (262144, 0)
    assert sh["ldgsts"] == 131072
    # one cluster of shared_a loads as much A as one block of own_a
    assert sh["A_loads"] / sh["clusters"] == own["A_loads"] / own["blocks"] == 512


class FakeStream:  # never reached: validation happens before the stream is used
    def __cuda_stream__(self):
        raise AssertionError("the stream must not be touched before the inputs are validated")


def dev(shape, dtype=np.float32, ptr=0x10000):
    return DeviceArray(ptr, shape, dtype)


def test_cluster_front_validates_before_touching_the_gpu():
    s = FakeStream()
    with pytest.raises(ValueError, match="tile_k must be 16 or 32"):
        cl.cluster_gemm(dev((8, 8)), dev((8, 8)), stream=s, tile_k=8)
    with pytest.raises(ValueError, match="stages must be 3 .. 6"):
        cl.cluster_gemm(dev((8, 8)), dev((8, 8)), stream=s, stages=2)
    with pytest.raises(ValueError, match="M, N, K must be >= 1"):
        cl.cluster_gemm(dev((0, 8)), dev((8, 8)), stream=s)
    with pytest.raises(ValueError, match="multiples of 4"):
        cl.cluster_gemm(dev((8, 6)), dev((6, 8)), stream=s)
    with pytest.raises(ValueError, match="float32"):
        cl.cluster_gemm(dev((8, 8), np.float16), dev((8, 8), np.float16), stream=s)
    with pytest.raises(TypeError, match="stream is required"):
        cl.cluster_gemm(dev((8, 8)), dev((8, 8)), stream=None)


# --------------------------------------------------------------------------- cluster: ncu helpers
NCU_CSV = '''==PROF== Connected to process 1 (python)
ok   cluster_gemm_own_a       T_K=32 1024x1024x1024  rel err 1.0e-07
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","cluster_gemm_own_a","1","13","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_ldgsts.sum","inst","262,144"
"0","1","python","h","cluster_gemm_own_a","1","13","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_global_ld.sum","inst","0"
"0","1","python","h","cluster_gemm_own_a","1","13","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","lts__t_sectors_srcunit_tex_op_read.sum","sector","4,194,304"
"1","1","python","h","cluster_gemm_shared_a","1","13","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_ldgsts.sum","inst","131,072"
"1","1","python","h","cluster_gemm_shared_a","1","13","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed_op_global_ld.sum","inst","32,768"
"1","1","python","h","cluster_gemm_shared_a","1","13","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","lts__t_sectors_srcunit_tex_op_read.sum","sector","2,621,440"
==PROF== Disconnected from process 1
'''


def test_ncu_csv_is_parsed_per_kernel_and_tabled_with_ratios():
    from fullpipe.experiments import cluster as ex

    per = ex.parse_ncu_csv(NCU_CSV)
    assert per["cluster_gemm_own_a"]["smsp__inst_executed_op_ldgsts.sum"] == 262144
    assert per["cluster_gemm_shared_a"]["smsp__inst_executed_op_global_ld.sum"] == 32768
    assert per["cluster_gemm_shared_a"]["lts__t_sectors_srcunit_tex_op_read.sum"] == 2621440
    exp = ex.expected_counts(1024)
    assert exp["cluster_gemm_own_a"]["clusters"] == 64 and exp["cluster_gemm_own_a"]["blocks"] == 256
    assert exp["cluster_gemm_own_a"]["A_bytes"] == 4 * exp["cluster_gemm_shared_a"]["A_bytes"]
    res = {"size": 1024, "per_kernel": per, "expected": exp, "derived": {}, "dsmem_metrics": []}
    for k, m in per.items():
        a = m["lts__t_sectors_srcunit_tex_op_read.sum"] * 32 - exp[k]["B_bytes"]
        res["derived"][k] = {"A_bytes_from_L2": a, "A_bytes_per_cluster": a / exp[k]["clusters"],
                             "A_bytes_per_block": a / exp[k]["blocks"]}
        # what ncu_measure adds: own_a 262144 - 131072 (B) = 131072 LDGSTS for A, shared_a 32768 LDG
        n = ex.measured_a_loads(m, exp[k])
        res["derived"][k].update({"A_loads": n, "A_loads_per_cluster": n / exp[k]["clusters"],
                                  "A_loads_per_block": n / exp[k]["blocks"]})
    assert res["derived"]["cluster_gemm_own_a"]["A_loads"] == 131072
    assert res["derived"]["cluster_gemm_shared_a"]["A_loads"] == 32768
    rows = ex.ncu_table(res)
    assert [r["kernel"] for r in rows] == ["cluster_gemm_own_a", "cluster_gemm_shared_a", "shared_a / own_a"]
    assert rows[0]["A MiB from global (ncu: L2 reads - B)"] == pytest.approx(64.0)
    assert rows[1]["A MiB from global (ncu: L2 reads - B)"] == pytest.approx(16.0)
    assert rows[2]["A MiB from global (ncu: L2 reads - B)"] == pytest.approx(0.25)
    assert rows[2]["LDGSTS (ncu)"] == pytest.approx(0.5)  # shared_a copies only B with cp.async
    assert rows[0]["A loaded by"] == "LDGSTS" and rows[1]["A loaded by"] == "LDG"
    assert rows[0]["LDG (ncu)"] == rows[0]["LDG expected"] == 0
    assert rows[1]["LDG (ncu)"] == rows[1]["LDG expected"] == 32768
    assert rows[2]["A-load instructions (ncu)"] == pytest.approx(0.25)
    assert rows[2]["A-load instructions expected"] == pytest.approx(0.25)
    # one cluster of shared_a reads what one block of own_a reads
    assert rows[1]["A KiB per cluster (ncu)"] == pytest.approx(rows[0]["A KiB per block (ncu)"])
    assert rows[1]["A-load instructions per cluster (ncu)"] == 512
    m = ex.ncu_metrics(res)
    assert m["ncu_a_loads_own_over_shared"] == 4.0 == m["ncu_a_loads_expected_own_over_shared"]
    assert m["ncu_a_loads_per_cluster_shared"] == m["ncu_a_loads_per_block_own"] == 512
    assert m["ncu_ldgsts_shared_over_own"] == m["ncu_ldgsts_expected_shared_over_own"] == 0.5
    assert m["ncu_a_bytes_own_over_shared"] == pytest.approx(4.0)
    assert m["ncu_loads_as_constructed"] is True and m["ncu_size"] == 1024
    # an LDG count that is not the construction's (e.g. predicated-off warps counted) shows
    per["cluster_gemm_shared_a"]["smsp__inst_executed_op_global_ld.sum"] = 2 * 32768
    assert ex.ncu_metrics(res)["ncu_loads_as_constructed"] is False


def test_ncu_measure_degrades_to_an_error_without_ncu(tmp_path, monkeypatch):
    from fullpipe.experiments import cluster as ex

    monkeypatch.setenv("NCU", str(tmp_path / "no-ncu"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ex.os.path, "isfile", lambda p: False)
    res = ex.ncu_measure(256, timeout_s=5)
    assert res["per_kernel"] == {} and "ncu not found" in res["error"]


def test_ncu_measure_runs_the_given_ncu_with_a_timeout(tmp_path):
    from fullpipe.experiments import cluster as ex

    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n" + "\n".join(f"echo '{line}'" for line in NCU_CSV.replace("'", "").splitlines()
                                               if not line.startswith("==")) + "\n")
    fake.chmod(0o755)
    res = ex.ncu_measure(1024, timeout_s=20, ncu=str(fake))
    assert res["error"] is None, res
    assert set(res["per_kernel"]) == {"cluster_gemm_own_a", "cluster_gemm_shared_a"}
    assert "--clock-control none" in res["command"] and "fullpipe.kernels.cluster" in res["command"]
    assert res["derived"]["cluster_gemm_shared_a"]["A_bytes_from_L2"] == pytest.approx(16 * 2**20)
    assert res["derived"]["cluster_gemm_shared_a"]["A_loads"] == 32768
    assert res["derived"]["cluster_gemm_own_a"]["A_loads_per_block"] == 512
    assert ex.ncu_metrics(res)["ncu_a_loads_own_over_shared"] == 4.0


# --------------------------------------------------------------------------- persistent: SASS
def test_recurrent_kernels_compile_without_spills_with_cp_async_and_a_grid_barrier():
    res, counts = _counts("persistent_recurrent.cu")
    assert set(res) == {"recurrent_step", "recurrent_persistent"}
    _no_spills(res)
    for name, c in counts.items():
        assert c["LDGSTS"] > 0, f"{name}: H_t and W are staged with cp.async"
        assert c["LDS.128"] > 0, f"{name}: W is read from shared memory as float4"
        assert c["LDL"] == 0 and c["STL"] == 0, name
    pers, step = counts["recurrent_persistent"], counts["recurrent_step"]
    # grid.sync(): an atomic arrive on a global counter, fenced, then a spin
    assert pers["ATOM"] + pers["ATOMG"] + pers["RED"] > 0 and pers["MEMBAR"] > 0
    assert step["ATOM"] + step["ATOMG"] + step["RED"] == 0
    assert step["DEPBAR"] >= 4, "the per-step kernel waits for its W chunks one by one"


def test_queue_gemm_and_grid_sync_sources_still_compile_without_spills():
    for source in ("persistent_gemm.cu", "persistent_grid_sync.cu"):
        res, counts = _counts(source)
        _no_spills(res)


# --------------------------------------------------------------------------- persistent: planning
def _bps_h100(smem: int) -> int:
    return max(0, min(8, (228 * 1024) // (smem + 4096 + 1024)))


def test_recurrent_plan_one_tile_per_sm_when_w_fits():
    p = pk.recurrent_plan(1, 2048, 64, sm_count=132, smem_optin=227 * 1024, blocks_per_sm=_bps_h100)
    assert (p.tiles, p.grid, p.tiles_per_block) == (128, 128, 1)
    assert p.step_smem == p.persistent_smem == (2048 * 16 + 2048) * 4
    p = pk.recurrent_plan(4, 512, 8, sm_count=132, smem_optin=227 * 1024, blocks_per_sm=_bps_h100)
    assert p.grid == 32 and p.tiles_per_block == 1


def test_recurrent_plan_gives_blocks_several_tiles_when_the_grid_is_small():
    p = pk.recurrent_plan(2, 256, 4, sm_count=4, smem_optin=227 * 1024, blocks_per_sm=lambda s: 1)
    assert p.tiles == 16 and p.grid == 4 and p.tiles_per_block == 4
    assert p.persistent_smem == (4 * 256 * 16 + 2 * 256) * 4


@pytest.mark.parametrize("args, match", [
    ((0, 256, 4), "batch must be 1 .. 8"),
    ((9, 256, 4), "batch must be 1 .. 8"),
    ((1, 100, 4), "N must be a positive multiple of 16"),
    ((1, 0, 4), "N must be a positive multiple of 16"),
    ((1, 256, 0), "T must be >= 1"),
    ((8, 4096, 4), "shared memory per block"),
])
def test_recurrent_plan_names_the_constraint(args, match):
    with pytest.raises(ValueError, match=match):
        pk.recurrent_plan(*args, sm_count=132, smem_optin=227 * 1024, blocks_per_sm=_bps_h100)


def test_recurrent_plan_refuses_w_larger_than_the_resident_shared_memory():
    with pytest.raises(ValueError, match="does not fit in the shared memory of the blocks"):
        pk.recurrent_plan(1, 2048, 4, sm_count=114, smem_optin=227 * 1024, blocks_per_sm=_bps_h100)


def test_recurrent_front_validates_before_touching_the_gpu():
    s = FakeStream()
    h0, w, x = dev((2, 64)), dev((64, 64)), dev((5, 2, 64))
    with pytest.raises(TypeError, match="stream is required"):
        pk.recurrent(h0, w, x, stream=None)
    with pytest.raises(ValueError, match="w must be \\(64, 64\\)"):
        pk.recurrent(h0, dev((64, 32)), x, stream=s)
    with pytest.raises(ValueError, match="x must be \\(T, 2, 64\\)"):
        pk.recurrent(h0, w, dev((5, 3, 64)), stream=s)
    with pytest.raises(ValueError, match="h0 must be a 2-D float32"):
        pk.recurrent(dev((2, 64), np.float16), w, x, stream=s)
    with pytest.raises(ValueError, match="x must be a 3-D float32"):
        pk.recurrent(h0, w, dev((2, 64)), stream=s)
    with pytest.raises(ValueError, match="16-byte aligned"):
        pk.recurrent(dev((2, 64), ptr=0x10004), w, x, stream=s, out=dev((5, 2, 64)))
    with pytest.raises(ValueError, match="out must be a \\(5, 2, 64\\) float32"):
        pk.recurrent(h0, w, x, stream=s, out=dev((5, 2, 63)))


def test_experiment_chain_size_gives_one_tile_per_sm():
    from fullpipe.experiments.persistent import chain_n

    assert chain_n(132) == 2048 and chain_n(114) == 1792 and chain_n(108) == 1664 and chain_n(16) == 256
    for sms in (16, 46, 80, 108, 114, 132, 144):
        assert chain_n(sms) // 16 <= sms


def test_kernel_scripts_are_executable_and_document_themselves():
    for name in ("sanitize-kernels", "ncu-kernels", "ncu-stalls", "sass-fingerprint"):
        path = ROOT / "scripts" / name
        assert path.is_file() and os.access(path, os.X_OK), name
        p = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and f"scripts/{name}" in p.stdout, (name, p.stdout, p.stderr)


def test_kernel_modules_have_checked_drivers_for_the_sanitizers():
    for mod in ("gemm", "cluster", "persistent"):
        p = subprocess.run([sys.executable, "-m", f"fullpipe.kernels.{mod}", "--help"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60)
        assert p.returncode == 0 and "--selftest" in p.stdout, (mod, p.stderr)


def test_recurrent_plan_max_grid_spreads_tiles_over_fewer_blocks():
    p = pk.recurrent_plan(3, 256, 5, sm_count=132, smem_optin=227 * 1024, blocks_per_sm=_bps_h100, max_grid=3)
    assert p.tiles == 16 and p.grid == 3 and p.tiles_per_block == 6
    assert p.grid * p.tiles_per_block >= p.tiles
