"""CPU tests of the persistent rung's transposed product (``swap_ab``): ``x @ w.T`` computed as
``(w x^T)^T`` with W's rows on wgmma's M and the product's rows in tiles of 80-256 columns on
its N. The builds compile to sm_90a without spills, with MMAs as wide as the tile, both
operands K-major (or, for a row-major b, b read MN-major: ``a_mn_major``), the activations'
slice multicast in clusters of 2 and the result stored transposed (stmatrix .trans); the plan
hands the kernel W (or b's K x N rows in 64 x 64 boxes) as A and x as B; the rule takes the
transposed product where it was measured faster (hopper_gemm's SWAP_* constants)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fullpipe.cuda import sass
from fullpipe.kernels import gemm_tuning
from fullpipe.kernels import hopper_gemm as hg

ARCH = "sm_90a"


def _sass(build) -> str:
    return sass.disassemble(hg.module("persistent", ARCH, build=build).cubin)


def _row_major(build):
    return dataclasses.replace(build, a_mn_major=True)


@pytest.mark.parametrize("build", [hg.swap_build(200), hg.swap_build(129, 128, 1), hg.swap_build(100, 64, 1),
                                   hg.swap_build(256), hg.swap_build(300, row_tiles=2),
                                   hg.swap_build(200, 128, 1, row_tiles=2, cluster_n=2),
                                   _row_major(hg.swap_build(200)), _row_major(hg.swap_build(100, 64, 1)),
                                   _row_major(hg.swap_build(768, 128, 1, 4)),
                                   hg.swap_build(300, 64, 2, 2), _row_major(hg.swap_build(300, 64, 2, 2))],
                         ids=lambda b: b.label)
def test_the_transposed_product_compiles_to_its_technique(build):
    mod = hg.module("persistent", ARCH, build=build)
    assert "C7508" not in mod.log and "C7515" not in mod.log, mod.log
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0, f"{build.label} {r.name}: {r}"
        assert r.registers * build.threads <= 65536, r
    text = _sass(build)
    # the MMAs are as wide as the tile of the product's rows, both operands K-major (no .tnspB), or A
    # (a row-major b's columns) MN-major: .tnspA
    mmas = re.findall(r"HGMMA\.(\d+x\d+x\d+)\S*\s+R\d+,\s*(gdesc\[UR\d+\]\S*)", text)
    assert {shape for shape, _ in mmas} == {f"64x{build.tile_n}x16"}, sorted(set(mmas))
    assert all(not desc.rstrip(",").endswith(".tnspB") for _, desc in mmas)
    assert {desc.rstrip(",").endswith(".tnspA") for _, desc in mmas} == {build.a_mn_major}, sorted(set(mmas))
    # the result goes through shared memory transposed (stmatrix .trans: STSM ... MT88) to TMA stores
    assert re.search(r"STSM\.16\.MT88\.4", text) and not re.search(r"STSM\.16\.M88", text)
    assert "UTMASTG" in text and "UTMALDG" in text
    # in clusters of 2 one operand's slice is multicast (x's along W's rows, W's along the product's), the other not
    multicast = len(re.findall(r"UTMALDG\.2D\.MULTICAST", text))
    plain = len(re.findall(r"UTMALDG\.2D(?!\.MULTICAST)", text))
    assert plain > 0 and (multicast > 0) == (build.cluster == 2), (plain, multicast)


def test_widths_follow_the_rows_and_clusters_avoid_what_ptxas_13_0_cannot_compile():
    for m in range(1, 257):
        one, pair = hg.swap_build(m, 128, 1), hg.swap_build(m)
        assert m <= one.tile_n < m + 16 or one.tile_n == hg.SWAP_WIDTHS[0]
        assert m <= pair.tile_n < m + 32 or pair.tile_n == hg.SWAP_PAIR_WIDTHS[0]
        assert pair.cluster == 2 and pair.tile_n not in hg.SWAP_WIDTHS_ONE_BLOCK
        for b in (one, pair, hg.swap_build(m, 64, 1)):
            assert b.swap_ab and b.b_k_major and b.shared_mem <= hg.MAX_BLOCK_SHARED and 2 <= b.stages <= 8
            assert b.tile_n % b.b_box_rows == 0 and b.b_box_rows % 8 == 0
    assert hg.swap_build(200).label == "2x1-g8-n208-bT-swap" and hg.swap_build(200).b_box_rows == 104
    with pytest.raises(ValueError, match="1 to 256 rows a tile"):
        hg.swap_build(257)
    # more rows in several tiles: each as narrow as holds its share
    for m in range(257, 2049, 7):
        t = -(-m // 256)
        b = hg.swap_build(m, row_tiles=t)
        assert m <= t * b.tile_n < m + 32 * t or b.tile_n == hg.SWAP_PAIR_WIDTHS[0], (m, b.tile_n)
    assert hg.swap_build(300, row_tiles=2).tile_n == 160 and hg.swap_build(1000, row_tiles=4).tile_n == 256
    with pytest.raises(ValueError, match="ptxas"):
        hg.PersistentBuild(tile_n=144, b_k_major=True, swap_ab=True)
    with pytest.raises(ValueError, match="b_k_major"):
        hg.PersistentBuild(tile_n=208, swap_ab=True)
    with pytest.raises(ValueError, match="tile_n must be 256, 192, 128 or 64"):
        hg.PersistentBuild(tile_n=208, b_k_major=True)
    with pytest.raises(ValueError, match="cannot share"):  # (32-row boxes of w: for the transposed product only)
        hg.PersistentBuild(tile_n=64, cluster_m=2, b_k_major=True)
    with pytest.raises(ValueError, match="a_mn_major"):  # (a row-major b: the transposed product, no shared slice)
        hg.PersistentBuild(a_mn_major=True)
    with pytest.raises(ValueError, match="a_mn_major"):
        _row_major(hg.swap_build(200, 128, 1, row_tiles=2, cluster_n=2))
    assert _row_major(hg.swap_build(200)).label == "2x1-g8-n208-bT-swap-bkn"
    with pytest.raises(ValueError, match="64-row tiles"):  # (64-row blocks pair along W's rows only,
        hg.swap_build(200, 64, 1, cluster_n=2)                # and only in the transposed product: measured there)
    with pytest.raises(ValueError, match="64-row tiles"):
        hg.PersistentBuild(tile_m=64, tile_n=128, stages=6)


def test_the_plan_hands_the_kernel_w_as_a_and_the_activations_as_b():
    m, n, k = 200, 6144, 4096
    x_at, w_at, c_at = 1 << 20, 2 << 20, 3 << 20
    b = hg.swap_build(m)
    p = hg.plan("persistent", m, n, k, "bfloat16", x_at, w_at, c_at, max_clusters=66, build=b)
    a_map, b_map, c_map = p.maps
    assert (a_map.global_address, a_map.global_dims, a_map.box_dims) == (w_at, (k, n), (hg.BK, 128))
    assert (b_map.global_address, b_map.global_dims, b_map.box_dims) == (x_at, (k, m), (hg.BK, 104))
    assert (c_map.global_address, c_map.global_dims, c_map.box_dims) == (c_at, (n, m), (hg.OUT_N, hg.OUT_ROWS))
    assert [e.global_address for e in p.edge_maps[0]] == [w_at] * 4
    assert [e.global_address for e in p.edge_maps[1]] == [x_at] * 4
    # 24 cluster tiles of 256 of W's rows (one tile of the product's 200 rows): below one
    # wave of 66 clusters, each cut into 2 K runs of 32 slices
    assert hg.cluster_tiles(m, n, b) == 24
    assert (p.sk_tiles, p.grid) == (24, 2 * 48)
    # its full barrier expects W's 128 rows and the two halves of x's 208 (one from the peer)
    assert a_map.box_bytes + 2 * b_map.box_bytes == (128 + 208) * hg.BK * hg.ELEM
    # more rows than the tile's: two tiles of them, the second from row 208
    p = hg.plan("persistent", 209, n, k, "bfloat16", x_at, w_at, c_at, max_clusters=66, build=b)
    assert hg.cluster_tiles(209, n, b) == 48 and p.maps[1].global_dims == (k, 209)
    # 200 rows in two tiles of 112: 48 cluster tiles of 64 slices, whole (96 of 132 SMs)
    two = hg.swap_build(m, row_tiles=2)
    p = hg.plan("persistent", m, n, k, "bfloat16", x_at, w_at, c_at, max_clusters=66, build=two)
    assert (two.tile_n, hg.cluster_tiles(m, n, two), p.sk_tiles, p.grid) == (112, 48, 0, 96)
    assert p.maps[1].box_dims == (hg.BK, 56)
    # a row-major (K, N) b: the kernel's A is b as it lies, in boxes of 64 K-rows by 64 of its columns (two a
    # slice of 128 of W's rows: the same bytes), its edges cut by whole chunks (no edge boxes: the same map)
    rm = _row_major(b)
    p = hg.plan("persistent", m, n, k, "bfloat16", x_at, w_at, c_at, max_clusters=66, build=rm)
    a_map, b_map, _ = p.maps
    assert (a_map.global_address, a_map.global_dims, a_map.box_dims) == (w_at, (n, k), (hg.CHUNK_N, hg.BK))
    assert a_map.global_strides == (n * hg.ELEM,) and 2 * a_map.box_bytes == 128 * hg.BK * hg.ELEM
    assert (b_map.global_address, b_map.global_dims, b_map.box_dims) == (x_at, (k, m), (hg.BK, 104))
    assert p.edge_maps[0] == (a_map,) * 4 and (p.sk_tiles, p.grid) == (24, 2 * 48)
    assert rm.defines()["A_MN_MAJOR"] == 1 and b.defines()["A_MN_MAJOR"] == 0
    with pytest.raises(ValueError, match="multiple of 8"):  # (b's rows are N long: TMA's 16-byte strides)
        hg.plan("persistent", m, 6140, k, "bfloat16", x_at, w_at, c_at, max_clusters=66, build=rm)


@pytest.mark.parametrize("m, n, k, swapped", [
    (200, 28672, 4096, "pairs"),    # Llama-3-8B's gate and up at 200 tokens: 0.78 -> 0.96x cuBLAS (p380)
    (200, 128256, 4096, "pairs"),   # its head
    (200, 4096, 14336, "rows64"),   # its down projection: the pairs run 54 slices a cluster, K on lines (p387: 1.10x)
    (160, 9216, 3072, "pairs"),     # 36 cluster tiles of 48 slices: 26 a cluster
    (200, 4096, 4096, "rows64"),    # 16 of 64 in pairs (0.68 against 0.85x); in 64 blocks of 64 rows 0.90x
    (100, 3072, 8192, "rows64"),    # Phi-3's down projection at 100 tokens: 0.69 -> 0.92x
    (200, 3584, 3584, None),        # 56 slices: too short for 64-row blocks (p385)
    (120, 4096, 4096, None),        # 128 rows either way: no 64-row blocks (p384: 0.90x)
    (200, 896, 8192, None),         # 14 blocks of 64 rows: too few (p385, seed 391)
    (200, 4096, 4104, None),        # K off the 32-byte sectors: x's slice read by every block costs more
    (250, 30000, 4096, None),       # 256 rows either way, and the rule's 128 x 256 pairs
    (243, 4656, 5448, "pairs"),     # 256 rows either way, but the rule's 128 x 128 pairs
    (122, 17384, 12808, "pairs"),   # 128 rows either way, the rule's 128 x 256 tiles one block a cluster
    (64, 28672, 4096, None),        # the skinny kernel's rows
    (257, 28672, 4096, "pairs"),    # two tiles of 160 (144 compiles one block only): 320 rows where pairs compute 512
    (300, 28672, 4096, "pairs"),    # two tiles of 160: 320 rows, not 512 (p387: 0.59 -> 0.84x cuBLAS)
    (384, 6144, 4096, "pairs"),     # two of 192: 384, not 512 (p389: 1.26x)
    (777, 4096, 14336, "pairs"),    # four of 208: 832, not 1024
    (500, 28672, 4096, "192"),      # two of 256: no padding saved; 128 x 192 tiles (p400 at 512 rows: 1.07x)
    (300, 4096, 14336, "one wave"),  # 2 x 64 tiles of 64 x 160 in place of 128 x 128 ones (p387: 1.17x)
    (384, 4096, 4096, "one wave"),  # ... 2 x 64 of 64 x 192 (p389: 1.23x)
    (300, 3072, 8192, None),        # the rule's own 64-row tiles compute as many rows (p387: 0.84x)
    (384, 1536, 8192, None),        # 2 x 24 tiles of 64 rows: not more than half the SMs
    (1024, 2040, 16384, None),      # 4 x 32 tiles of 64 rows, but past the rows measured (768)
    (200, 3072, 8192, "rows64"),    # Phi-3's down projection: in place of 128 x 256 pairs (p387: 1.30x)
    (768, 4096, 11008, "more"),     # 128 tiles of 128 x 192 (four of rows) where pairs fill 0.73 (p389: 1.33x)
    (752, 9576, 15872, None),       # ... but those would be dealt out as K runs (seed 406: 0.85x)
    (768, 4096, 4104, "192"),       # ... K off the 128-byte lines: 132 tiles of 128 x 192, one wave
    (200, 6144, 4096, "one wave"),  # 96 blocks of 64 rows, K on 128-byte lines: 0.72 -> 0.94x cuBLAS (p387)
    (200, 6144, 4104, None),        # K off the lines (p389: 0.78-0.88x the pairs)
    (151, 5352, 13952, "pairs"),    # the pairs' runs 69 slices a cluster: their stream-K pays (p388: 0.89x)
])
def test_the_rule_takes_the_transposed_product_where_it_was_measured_faster(m, n, k, swapped):
    chosen = hg.default_build(m, n, k, 132, b_transposed=True)
    expected = {"pairs": lambda: hg.swap_build(m, row_tiles=-(-m // 256)), "rows64": lambda: hg.swap_build(m, 64, 1),
                "one wave": lambda: hg.swap_build(m, 64, 1, -(-m // 256)),
                "more": lambda: hg.swap_build(m, 128, 1, -(-m // 256) + 1),
                "192": lambda: hg.as_laid_out(hg.PERSISTENT_192, True),
                None: lambda: hg.unswapped_build(m, n, k, 132, True)}[swapped]()
    assert chosen == expected, (chosen.label, expected.label)
    # a row-major b: the same transposed product, b read MN-major (p396: 1.15x where w.T's rule swaps), or the
    # same 128 x 192 tiles, else the unswapped rule for its layout
    row_major = hg.default_build(m, n, k, 132)
    if chosen.swap_ab:
        assert row_major == _row_major(chosen), row_major.label
    else:
        wanted = hg.PERSISTENT_192 if swapped == "192" else hg.unswapped_build(m, n, k, 132)
        assert row_major == wanted, row_major.label
    assert not hg.unswapped_build(m, n, k, 132, True).swap_ab


def test_the_tuner_measures_the_transposed_product_and_remembers_it():
    plans = gemm_tuning.candidates(200, 4096, 4096, 132, b_transposed=True)
    builds = {p.build for p in plans if p.build is not None}
    assert hg.swap_build(200) in builds and hg.swap_build(200, 64, 1) in builds
    # a row-major b: the same builds, reading b MN-major, but for pairs sharing W's slice (w.T only)
    row_major = {p.build for p in gemm_tuning.candidates(200, 4096, 4096, 132) if p.build is not None}
    assert {b for b in row_major if b.swap_ab} == {_row_major(b) for b in builds if b.swap_ab and b.cluster_n == 1}
    # 64-row blocks in pairs sharing x's slice, and 128-row blocks in pairs sharing W's (session 60)
    assert {hg.swap_build(200, 64, 2), hg.swap_build(200, 128, 1, cluster_n=2)} <= builds
    more = {p.build for p in gemm_tuning.candidates(300, 4096, 4096, 132, True) if p.build is not None}
    assert {hg.swap_build(300, row_tiles=2), hg.swap_build(300, 64, 1, 2), hg.swap_build(300, 64, 1, 3),
            hg.swap_build(300, 128, 1, 3)} <= more
    for plan in (gemm_tuning.GemmPlan("persistent", hg.swap_build(200), "none"),
                 gemm_tuning.GemmPlan("persistent", _row_major(hg.swap_build(200)), "rule")):
        assert gemm_tuning.GemmPlan.from_json(plan.to_json()) == plan
