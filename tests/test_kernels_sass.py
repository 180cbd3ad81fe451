"""CPU tests of the level-2 kernels: each compiles to an sm_90a cubin without spills,
and its SASS holds the instructions its technique is about."""

from __future__ import annotations

import collections
import re

import pytest

from fullpipe.cuda import compiler, sass
from fullpipe.kernels.gemm import VARIANTS, WMMA_CANDIDATES, module_for, plan

ARCH = "sm_90a"


def _module(name):
    return compiler.compile_package_kernel(f"kernels/{name}", arch=ARCH)


def _per_kernel_counts(mod) -> dict[str, collections.Counter]:
    """Opcode counts (base opcode plus full mnemonic) per kernel of a cubin."""
    text = sass.disassemble(mod.cubin)
    parts = re.split(r"\.section\s+\.text\.", text)
    out = {}
    for part in parts[1:]:
        name = part.split(",", 1)[0].strip()
        c = sass.opcode_counts(part)
        for m in re.finditer(r"\b((?:LDS|LDG|STS|STG|LDSM|HMMA|LDGSTS)(?:\.[A-Z0-9_]+)+)\b", part):
            c[m.group(1)] += 1
        out[name] = c
    return out


def exported_constant(sass_text: str, symbol: str) -> int:
    """The value of an ``extern "C" __device__ const unsigned`` a source exports (read
    from the cubin's .nv.global.init data as nvdisasm prints it)."""
    m = re.search(rf"^{re.escape(symbol)}:\s*\n\s*/\*[0-9a-f]+\*/\s*\.byte\s+([^\n]+)", sass_text, re.M)
    assert m, f"{symbol} is not exported by the cubin"
    return int.from_bytes(bytes(int(b, 16) for b in m.group(1).split(",")[:4]), "little")


def max_threads(sass_text: str, kernel: str) -> int:
    """The block size a kernel was compiled for (__launch_bounds__: EIATTR_MAX_THREADS)."""
    part = re.split(r"\.section\s", sass_text.split(f".section\t.nv.info.{kernel},", 1)[1], maxsplit=1)[0]
    m = re.search(r"EIATTR_MAX_THREADS.*?\.word\s+(0x[0-9a-f]+)", part, re.S)
    assert m, f"{kernel}: no __launch_bounds__"
    return int(m.group(1), 16)


def _ldgsts16(c: collections.Counter) -> int:
    """16-byte cp.async.cg copies (LDGSTS.E.BYPASS[.LTC128B].128)."""
    return sum(v for k, v in c.items() if k.startswith("LDGSTS.E.BYPASS") and k.endswith(".128"))


EXPECTED_KERNELS = {
    "gemm_tiled.cu": {"gemm_tiled_f32", "gemm_tiled_f32_scalar"},
    "gemm_double_buffer.cu": {f"gemm_double_buffer_s{s}{v}" for s in (2, 3, 4) for v in ("", "_scalar")},
    "gemm_warp_specialized.cu": {f"gemm_warp_specialized_s{s}{v}" for s in (2, 3, 4) for v in ("", "_scalar")},
    "gemm_fp32_ceiling.cu": {f"gemm_fp32_ceiling_s{s}" for s in (2, 3, 4)},
    "gemm_wmma.cu": {f"gemm_wmma_{t}_s{s}" for t in ("f16", "bf16") for s in (2, 3, 4, 5)},
    "cluster_gemm.cu": {"cluster_gemm_own_a", "cluster_gemm_shared_a"},
    "persistent_gemm.cu": {"gemm_small_tiles_per_tile", "gemm_small_tiles_persistent"},
    "persistent_grid_sync.cu": {"normalize_grid_sync", "normalize_partials", "normalize_scale"},
}


@pytest.mark.parametrize("source", sorted(EXPECTED_KERNELS))
def test_kernels_compile_for_sm90a_without_spills(source):
    mod = _module(source)
    assert mod.cubin[:4] == b"\x7fELF"
    res = mod.resources
    assert set(res) == EXPECTED_KERNELS[source]
    for r in res.values():
        assert not r.spills and r.stack_frame_bytes == 0, f"{r.name} spills or uses local memory: {r}"


@pytest.mark.parametrize("variant", ["tiled", "double_buffer", "warp_specialized"])
def test_fp32_launch_plans_match_the_compiled_kernels(variant):
    """The launch contract lives in kernels/gemm.py; the kernels must agree: the block
    size is the one they were compiled for, the dynamic shared memory the size of the
    layout they export (sizeof of their shared-memory type)."""
    v = VARIANTS[variant]
    text = sass.disassemble(_module(v.source.split("/", 1)[1]).cubin)
    for stages in v.stages or (None,):
        for aligned in (True, False):
            p = plan(variant, 1000, 1004, 996, "float32", stages=stages, aligned=aligned)
            assert max_threads(text, p.kernel) == p.block, p
            if p.shared_mem:
                assert exported_constant(text, f"fp_dynamic_smem_{p.kernel.removesuffix('_scalar')}") == p.shared_mem, p


def test_fp32_ceiling_plan_matches_the_compiled_kernel():
    from fullpipe.kernels.gemm import plan_fp32_ceiling

    text = sass.disassemble(_module("gemm_fp32_ceiling.cu").cubin)
    for stages in (2, 3, 4):
        p = plan_fp32_ceiling(512, 512, 512, stages)
        assert max_threads(text, p.kernel) == p.block
        assert exported_constant(text, f"fp_dynamic_smem_{p.kernel}") == p.shared_mem


def test_tiled_is_synchronous_and_vectorized():
    counts = _per_kernel_counts(_module("gemm_tiled.cu"))
    c = counts["gemm_tiled_f32"]
    assert c["LDGSTS"] == 0, "the baseline must load through registers"
    assert c["LDS.128"] > 0 and c["LDG.E.128.CONSTANT"] + c["LDG.E.128"] > 0 and c["STS.128"] > 0
    assert c["BAR"] >= 2
    assert _module("gemm_tiled.cu").resources["gemm_tiled_f32"].registers <= 128  # 2 blocks per SM


@pytest.mark.parametrize("source", ["gemm_double_buffer.cu", "gemm_warp_specialized.cu"])
def test_pipelined_fp32_kernels_use_async_copies(source):
    for name, c in _per_kernel_counts(_module(source)).items():
        assert c["LDGSTS"] > 0, f"{name}: no cp.async"
        assert c["DEPBAR"] > 0, f"{name}: copies never waited for (cp.async.wait_group)"
        assert c["LDS.128"] > 0, f"{name}: shared reads are not float4"
        if not name.endswith("_scalar"):
            assert _ldgsts16(c) > 0, f"{name}: copies are not 16 bytes"
        # No cp.async.mbarrier.arrive (ARRIVES.LDGSTSBAR + a no-complete arrive): with a
        # plain arrive after it, one thread arrives twice on one phase, which
        # compute-sanitizer synccheck reports as "Missing wait".
        assert c["ARRIVES"] == 0, f"{name}: cp.async.mbarrier.arrive is back"
        assert c["LDL"] == 0 and c["STL"] == 0, f"{name}: local memory (spills) in the kernel"


def test_double_buffer_syncs_once_per_slice_without_mbarriers():
    for name, c in _per_kernel_counts(_module("gemm_double_buffer.cu")).items():
        assert c["SYNCS"] == 0, f"{name}: mbarriers are back; the block barrier is the hand-off"
        assert c["BAR"] == 1, f"{name}: one __syncthreads per K-slice expected"


def test_ceiling_is_double_buffer_without_its_copies():
    ceiling = _per_kernel_counts(_module("gemm_fp32_ceiling.cu"))
    db = _per_kernel_counts(_module("gemm_double_buffer.cu"))
    for s in (2, 3, 4):
        c, d = ceiling[f"gemm_fp32_ceiling_s{s}"], db[f"gemm_double_buffer_s{s}"]
        assert c["LDGSTS"] == 0 and c["LDG"] == 0, "the ceiling must not load from global memory"
        assert c["FFMA"] == d["FFMA"] > 0, "the same math as double_buffer"
        assert c["LDS.128"] == d["LDS.128"] > 0 and c["BAR"] == d["BAR"] == 1, "the same reads and barriers"


def test_warp_specialized_roles_meet_on_mbarriers():
    for name, c in _per_kernel_counts(_module("gemm_warp_specialized.cu")).items():
        assert c["SYNCS"] > 0, f"{name}: no mbarrier operations (full/empty handshakes)"


def test_fp32_tile_kernels_fit_two_blocks_per_sm():
    # The register-double-buffered fragments fit the 128-register cap of two blocks per SM.
    for src in ("gemm_tiled.cu", "gemm_double_buffer.cu"):
        for r in _module(src).resources.values():
            assert r.registers <= 128 and r.spill_store_bytes == 0, r


def test_wmma_uses_tensor_cores_ldmatrix_and_16_byte_async_copies():
    for name, c in _per_kernel_counts(_module("gemm_wmma.cu")).items():
        assert c["HMMA"] >= 64, f"{name}: HMMA missing"
        assert c["LDSM"] >= 16, f"{name}: fragments are not loaded with ldmatrix"
        assert _ldgsts16(c) > 0, f"{name}: no 16-byte cp.async"
        assert c["LD"] == 0, f"{name}: generic loads in the main loop (address space lost)"


@pytest.mark.parametrize("config", WMMA_CANDIDATES, ids=lambda c: c.name)
def test_every_wmma_candidate_compiles_to_hmma_ldsm_ldgsts_without_spills(config):
    tags = {"float16": "f16", "bfloat16": "bf16"}
    mod = None
    for dtype in tags:
        p = plan("wmma", 4096, 4096, 4096, dtype, config=config)
        mod = module_for(p, ARCH)
        counts = _per_kernel_counts(mod)[p.kernel]
        r = mod.resources[p.kernel]
        assert not r.spills and r.stack_frame_bytes == 0, f"{config.name} {p.kernel}: spills {r}"
        assert r.registers <= 255, r
        assert r.registers * config.threads * config.min_blocks <= 65536, f"{config.name}: blocks/SM not reachable {r}"
        # one slice of MMAs per warp: (wm/16) * (wn/16) fragments, 2 HMMA.16816 each, bk/16 steps
        per_slice = (config.wm // 16) * (config.wn // 16) * 2 * (config.bk // 16)
        assert counts["HMMA"] >= per_slice, f"{config.name} {p.kernel}: {counts['HMMA']} HMMA"
        assert counts["LDSM"] >= (config.wm // 16 + config.wn // 16) * (config.bk // 16), f"{config.name}: no ldmatrix"
        assert _ldgsts16(counts) > 0, f"{config.name}: no 16-byte cp.async"
        assert counts["LD"] == 0 and counts["LDL"] == 0 and counts["STL"] == 0, f"{config.name}: generic/local memory"
        assert counts["BAR"] >= 2, f"{config.name}: block barriers missing"
        assert max_threads(sass.disassemble(mod.cubin), p.kernel) == p.block == config.threads


@pytest.mark.parametrize("source", ["cluster_gemm.cu", "persistent_gemm.cu"])
def test_cluster_and_persistent_kernels_use_async_copies(source):
    for name, c in _per_kernel_counts(_module(source)).items():
        assert c["LDGSTS"] > 0, name


def test_cluster_kernel_uses_cluster_barrier_and_dsmem():
    counts = _per_kernel_counts(_module("cluster_gemm.cu"))
    for name, c in counts.items():
        assert c["UCGABAR_ARV"] > 0 and c["UCGABAR_WAIT"] > 0, f"{name}: no cluster barrier"
    # Only the shared-A kernel reads another block's shared memory (a generic load).
    assert counts["cluster_gemm_shared_a"]["LD"] > 0
    assert counts["cluster_gemm_own_a"]["LD"] == 0
    # own_a copies A and B with cp.async; shared_a copies B with cp.async and loads the
    # quarter of A its peers read through registers (16-byte LDG, then STS).
    sh, own = counts["cluster_gemm_shared_a"], counts["cluster_gemm_own_a"]
    assert _ldgsts16(own) > 0 and own["LDG"] == 0
    assert _ldgsts16(sh) > 0, "shared_a: B is copied with cp.async"
    assert sh["LDG.E.128.CONSTANT"] + sh["LDG.E.128"] > 0 and sh["STS.128"] > 0, "shared_a: the quarter of A"


def test_persistent_kernel_pulls_tiles_with_atomics():
    counts = _per_kernel_counts(_module("persistent_gemm.cu"))
    assert counts["gemm_small_tiles_persistent"]["ATOMG"] + counts["gemm_small_tiles_persistent"]["RED"] > 0
    assert counts["gemm_small_tiles_per_tile"]["ATOMG"] == 0
