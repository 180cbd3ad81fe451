"""CPU tests of the skinny Hopper GEMM: every ROWS build compiles to an sm_90a cubin without
spills whose SASS holds the technique (TMA loads on mbarriers, transposed-A wgmma as wide as
the build's rows, cluster barriers and DSMEM loads for the runs' sums, no global memory
but C's stores); the split of K and the launch plan; bad inputs fail clearly."""

from __future__ import annotations

import re

import pytest

from fullpipe.cuda import sass
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm as sk

ARCH = "sm_90a"


def _opcodes(rows: int, tile_n: int = sk.TILE_N, stages: int = sk.STAGES) -> dict[str, dict[str, int]]:
    text = sass.disassemble(sk.module(rows, ARCH, tile_n, stages).cubin)
    out = {}
    for part in re.split(r"\.section\s+\.text\.", text)[1:]:
        name = part.split(",", 1)[0].strip()
        counts: dict[str, int] = {}
        for m in re.finditer(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)",
                             part, re.M):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        out[name] = counts
    return out


def _has(counts: dict[str, int], prefix: str) -> int:
    return sum(v for k, v in counts.items() if k == prefix or k.startswith(prefix + "."))


BUILDS = [(rows, 128, 4) for rows in sk.ROW_BUILDS] + [(rows, 64, 8) for rows in sk.ROW_BUILDS]


@pytest.mark.parametrize("rows, tile_n, stages", BUILDS, ids=lambda v: str(v))
def test_each_build_compiles_to_the_technique(rows, tile_n, stages):
    mod = sk.module(rows, ARCH, tile_n, stages)
    assert "C7515" not in mod.log, mod.log  # wgmma not serialized
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0, r
    chunks = tile_n // 64
    kernels = _opcodes(rows, tile_n, stages)
    assert set(kernels) == {"gemm_hopper_skinny_bf16", "gemm_hopper_skinny_f16"}
    for kernel, counts in kernels.items():
        # B's 64-column chunks and A's rows by TMA, completion on mbarriers: A in one box of
        # `rows`, or (M rounded up to 8 far below it: the 64- and 128-row builds only) in one
        # box each of 64, 32, 16, 8 rows below `rows`
        cuts = sum(1 for n in (64, 32, 16, 8) if n < rows) if rows >= 64 else 0
        assert _has(counts, "UTMALDG") == chunks + 1 + cuts, f"{kernel}: {_has(counts, 'UTMALDG')} TMA loads"
        assert _has(counts, "SYNCS.ARRIVE.TRANS64") and _has(counts, "SYNCS.PHASECHK.TRANS64"), kernel
        # the product transposed: m64 x rows, chunks x 4 K-steps a slice (ptxas may unroll the loop)
        mma = sum(v for k, v in counts.items() if k.startswith(f"HGMMA.64x{rows}x16.F32"))
        assert mma > 0 and mma % (4 * chunks) == 0 and mma == _has(counts, "HGMMA"), \
            f"{kernel}: {sorted(k for k in counts if 'HGMMA' in k)}"
        # the runs meet in the cluster: two cluster barriers, DSMEM loads of the peers' sums
        assert _has(counts, "UCGABAR_ARV") == 2 and _has(counts, "UCGABAR_WAIT") == 2, kernel
        assert _has(counts, "LD.E.128") > 0, f"{kernel}: no DSMEM loads"
        # no global workspace: the only global stores are C's 16-bit elements, no global loads
        stores = {k: v for k, v in counts.items() if k.startswith("STG")}
        assert set(stores) == {"STG.E.U16"}, f"{kernel}: {stores}"
        assert not _has(counts, "LDG") and not _has(counts, "ATOMG") and not _has(counts, "USETMAXREG"), kernel


@pytest.mark.parametrize("rows, tile_n, stages", [(8, 64, 8), (32, 64, 8), (64, 64, 8), (128, 128, 4)],
                         ids=lambda v: str(v))
def test_the_weight_given_transposed_is_read_k_major(rows, tile_n, stages):
    """B as ``w.T`` of a row-major (N, K) weight (the B_K_MAJOR build): w's 64-row boxes
    are the K-major A operand of the transposed product, so no HGMMA transposes A, where
    the row-major build transposes every one; the rest of the kernel is the same."""
    plain = sk.module(rows, ARCH, tile_n, stages)
    mod = sk.module(rows, ARCH, tile_n, stages, True)
    assert "C7515" not in mod.log, mod.log
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0, r

    def operands(m):
        return {re.sub(r"UR\d+", "UR", o) for o in re.findall(r"HGMMA\.\S+ R\d+, (\S+),", sass.disassemble(m.cubin))}

    assert operands(plain) == {"gdesc[UR].tnspA"} and operands(mod) == {"gdesc[UR]"}
    text = sass.disassemble(mod.cubin)
    for op in ("UTMALDG", "UCGABAR_ARV", "HGMMA", "STG.E.U16"):
        assert text.count(op) == sass.disassemble(plain.cubin).count(op), op
    p = sk.plan(rows, 4096, 1024, "bfloat16", sms=132, b_transposed=True, tile_n=tile_n, stages=stages)
    w = p.maps[1]
    assert (w.global_dims, w.box_dims) == ((1024, 4096), (64, 64)) and p.b_transposed  # w: 4096 rows of K = 1024


@pytest.mark.parametrize("m, rows", [(1, 8), (8, 8), (9, 16), (32, 32), (33, 64), (64, 64), (65, 128), (128, 128)])
def test_rows_build_holds_m(m, rows):
    assert sk.rows_build(m) == rows


@pytest.mark.parametrize("m", [0, 129])
def test_rows_outside_the_builds_are_refused(m):
    with pytest.raises(ValueError, match="1 to 128 rows"):
        sk.rows_build(m)


@pytest.mark.parametrize("m, n, k, tile_n, runs", [
    (8, 4096, 4096, 64, 2),      # 64 tiles of 64 columns: 2 runs give 128 of 132 SMs a block
    (8, 2048, 4096, 64, 4),
    (8, 1024, 4096, 64, 8),      # 16 tiles: at most 8 runs, a cluster's limit
    (8, 8448, 4096, 64, 1),      # 132 tiles of 64 columns: one wave, one run each
    (8, 11008, 4096, 128, 1),    # 172 tiles of 64 would be more than a wave: 86 of 128, one run each
    (8, 32000, 4096, 128, 1),
    (32, 2048, 4096, 64, 4),
    (64, 1024, 4096, 64, 5),     # the first block may read 64 KiB of the others' sums: 4 x 16 KiB
    (128, 1024, 4096, 64, 3),    # 2 x 32 KiB
    (8, 1024, 256, 64, 1),       # 4 slices: one run (runs of MIN_RUN_SLICES or more)
    (8, 256, 512, 64, 2),
])
def test_split_k_fills_the_sms_within_the_cluster_and_sums_limits(m, n, k, tile_n, runs):
    p = sk.plan(m, n, k, "bfloat16", sms=132)
    assert (p.tile_n, p.runs) == (tile_n, runs), (p.tile_n, p.runs, p.slices_per_run)
    assert p.grid == p.tiles * p.runs <= max(132, p.tiles)
    assert p.cluster == (runs if runs > 1 else None)
    slices = -(-k // 64)
    assert (p.runs - 1) * p.slices_per_run < slices <= p.runs * p.slices_per_run  # every run has slices
    assert (p.runs - 1) * p.tile_n * p.rows * 4 <= sk.MAX_CLUSTER_SUM_BYTES


def _gpcs_of(sms_per_gpc):
    """Clusters of ``runs`` blocks, one block an SM, that a GPU of these GPCs runs at once
    (a cluster's blocks share a GPC)."""
    return lambda rows, tile_n, stages, runs: sum(g // runs for g in sms_per_gpc)


def test_split_k_takes_fewer_runs_where_the_clusters_would_not_all_fit():
    h100 = _gpcs_of([18] * 6 + [16] + [8])  # 132 SMs; clusters of 4: 4 x 6 + 4 + 2 = 30
    p = sk.plan(64, 2048, 2048, "bfloat16", sms=132)
    assert (p.tiles, p.runs) == (32, 4)  # every SM a block, if all 32 clusters of 4 fit
    p = sk.plan(64, 2048, 2048, "bfloat16", sms=132, co_resident=h100)
    assert p.runs == 3 and h100(64, 64, 8, 3) >= p.tiles  # 6 x 6 + 5 + 2 = 43 clusters of 3
    # where they all fit, nothing changes
    even = _gpcs_of([12] * 11)
    assert sk.plan(8, 4096, 4096, "bfloat16", sms=132, co_resident=even).runs == 2
    # 16 tiles in 8 runs: 11 GPCs of 12 hold 11 clusters of 8, 22 of 6
    assert sk.plan(8, 1024, 4096, "bfloat16", sms=132).runs == 8
    assert sk.plan(8, 1024, 4096, "bfloat16", sms=132, co_resident=even).runs == 6
    # an explicit split is taken as given
    assert sk.plan(64, 2048, 2048, "bfloat16", sms=132, slices_per_run=8, co_resident=h100).runs == 4


def test_plan_maps_and_shared_memory():
    p = sk.plan(24, 1000, 520, "float16", a_ptr=1 << 20, b_ptr=2 << 20)
    a, b = p.maps
    assert a.global_dims == (520, 24) and a.box_dims == (64, 32)      # A: rows of K, boxes of ROWS x 64
    assert b.global_dims == (1000, 520) and b.box_dims == (64, 64)    # B: 64 x 64 chunks
    assert a.swizzle == b.swizzle == "128B"
    # A's edge boxes (for M far below its build, e.g. 33 rows as 32 + 8 in place of a 64-row
    # box; these 24 rows, 8 short of 32, load one box): the same matrix, 64, 32, 16 and 8 rows
    # of 64, whole 1 KiB swizzle atoms that land where a taller box's rows would
    assert [e.box_dims for e in p.a_edges] == [(64, 64), (64, 32), (64, 16), (64, 8)]
    assert all((e.global_address, e.global_dims, e.global_strides, e.swizzle) ==
               (a.global_address, a.global_dims, a.global_strides, "128B") for e in p.a_edges)
    assert p.kernel == "gemm_hopper_skinny_f16" and (p.tile_n, p.stages, p.tiles) == (64, 8, 16)
    for rows, tile_n, stages in BUILDS:  # every build's ring fits
        assert sk.shared_mem_bytes(rows, tile_n, stages) <= hg.MAX_BLOCK_SHARED


def test_a_forced_split_beyond_a_cluster_is_refused():
    with pytest.raises(ValueError, match="at most 8 blocks"):
        sk.plan(8, 1024, 4096, "bfloat16", slices_per_run=4)  # 16 runs
    with pytest.raises(ValueError, match="tile_n 64 or 128"):
        sk.plan(8, 1024, 4096, "bfloat16", tile_n=256, stages=4)


@pytest.mark.parametrize("m, n, k, sms, skinny", [
    (1, 4096, 4096, 132, True), (64, 32000, 4096, 132, True), (65, 4096, 4096, 132, True),
    (128, 8192, 4096, 132, True), (65, 11008, 4096, 132, False), (128, 32000, 4096, 132, False),
    (129, 1024, 4096, 132, False),
    # short K: the persistent rung's 64-row tiles (p270)
    (8, 4096, 512, 132, False), (64, 4096, 520, 132, True), (64, 4096, 1024, 132, True),
    (96, 2048, 1024, 132, False), (128, 4096, 1536, 132, False), (128, 4096, 1544, 132, True),
])
def test_the_skinny_kernel_is_preferred_for_few_rows_and_k_to_split(m, n, k, sms, skinny):
    assert sk.preferred(m, n, k, sms) == skinny
