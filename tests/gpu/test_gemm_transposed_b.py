"""GPU tests of B given transposed (``x @ w.T`` for an (N, K) weight, as nn.Linear holds
it): the persistent rung and the skinny kernel read ``w`` as it lies (no copy) and must
match float64 and cuBLAS, with edges, stream-K, split K, every persistent build shape
and CuPy; the rungs that read row-major B only refuse it with a message naming the
variants that take it."""

from __future__ import annotations

import dataclasses

import pytest

from fullpipe.kernels import gemm
from fullpipe.kernels import skinny_gemm as sk
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels.hopper_gemm import (PERSISTENT, PERSISTENT_NARROW, PERSISTENT_ONE_ROW, PERSISTENT_SMALL,
                                          SWEEP_BUILDS, gemm_hopper, swap_build)

from .test_hopper_gemm import _rel

pytestmark = pytest.mark.gpu

SHAPES = [
    (512, 512, 512),      # whole tiles
    (200, 264, 72),       # edges in M, N and K
    (777, 1032, 4104),    # odd M, long K
    (512, 512, 4096),     # stream-K (32 tiles of 128 x 64, 4 runs each)
    (96, 2056, 1032),     # one row of tiles: one block a cluster
    (2048, 4096, 1024),   # several waves
    (1, 8, 8),            # the smallest
    (8, 4096, 4096),      # a decode projection: the skinny kernel, K split
    (33, 1024, 520),      # the skinny 64-row build
    (100, 1032, 2056),    # the skinny 128-row build
    (8, 32000, 1024),     # an LM head
]


def _weights(m, n, k, dtype, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    w = torch.randn(n, k, device="cuda", generator=g).to(dtype)  # nn.Linear's (out, in)
    return x, w


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_x_at_w_t_matches_float64_and_cublas(dtype_name, shape):
    import torch

    dtype = getattr(torch, dtype_name)
    m, n, k = shape
    x, w = _weights(m, n, k, dtype, seed=m * 13 + n + k)
    ref = x.double() @ w.double().T
    cublas = _rel(torch.nn.functional.linear(x, w), ref)
    kernels = ["hopper", "hopper_persistent"] + (["hopper_skinny"] if m <= sk.MAX_ROWS else [])
    for variant in kernels:
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        got = gemm(x, w.T, variant=variant, out=out, stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
        assert got is out and not torch.isnan(out).any(), f"{variant} {shape}: outputs never written"
        err = _rel(out, ref)
        assert err < 1e-2 and err < 4 * cublas + 1e-3, f"{variant} {shape}: {err:.2e} (cuBLAS {cublas:.2e})"


# the default builds, and the sweep's other cluster shapes (2 x 2: A multicast too; 4 x 1:
# B in quarters; 128 x 128 tiles in clusters of 2); without multicast every block loads all
# of B itself
BUILDS = [PERSISTENT, PERSISTENT_ONE_ROW, PERSISTENT_NARROW, PERSISTENT_SMALL] + [
    b for b in SWEEP_BUILDS if b.cluster_n == 2 or b.cluster_m == 4 or (b.cluster_m == 2 and b.tile_n == 128)]


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "no-multicast"])
@pytest.mark.parametrize("build", BUILDS, ids=lambda b: b.label)
def test_each_build_reads_w_as_it_lies_and_gives_the_bits_of_a_copy(build, multicast):
    """The same kernel build reading ``w`` K-major, or a row-major copy of ``w.T``: the same
    products in the same order (the same plan: stream-K included), so the same bits."""
    import torch

    for m, n, k in [(777, 1032, 4104), (512, 512, 4096)]:   # (the second: stream-K on every build)
        x, w = _weights(m, n, k, torch.bfloat16, seed=5)
        got = gemm_hopper(x, w.T, _build=build, _multicast=multicast)
        copy = gemm_hopper(x, w.T.contiguous(), _build=build, _multicast=multicast)
        torch.cuda.synchronize()
        assert _rel(got, x.double() @ w.double().T) < 1e-2, (build.label, m, n, k)
        assert torch.equal(got, copy), (build.label, m, n, k)


# The transposed product (swap_ab): (M, N, K, tile_m, cluster_m[, row_tiles, cluster_n])
SWAP_CASES = [
    (200, 4096, 4096, 128, 2),   # 200 rows in one 208-wide tile; clusters of 2 share x's slice
    (65, 1000, 520, 128, 1),     # the narrowest width (80), W's last rows and K's last slice cut
    (256, 2056, 1032, 64, 1),    # the widest (256), 64-row blocks of W, an edge of 8 rows
    (129, 6144, 4096, 128, 2),   # 129 rows in pairs of 160 (144 runs one block): 31 rows of the tile past M
    (129, 6144, 4096, 128, 1),   # ... in one block's 144: 15 past
    (200, 50257, 768, 128, 2),   # N not a multiple of 8: C's rows padded
    (177, 512, 8192, 128, 1),    # 4 tiles of W's rows: each cut into K runs (stream-K)
    (96, 768, 4096, 64, 1),      # 12 tiles split
    # several tiles along the product's rows: each tile's last piece ends at its last row
    (200, 6144, 4096, 128, 2, 2, 1),   # two tiles of 112 rows, pairs along W's rows share x's slice
    (200, 6144, 4096, 128, 1, 2, 2),   # ... pairs along the product's rows share W's slice
    (300, 3000, 1032, 128, 1, 3, 1),   # three tiles of 112: the last holds 76 rows; W's edge
    (129, 4096, 4096, 64, 1, 2, 1),    # two tiles of 80 (80 and 49 rows), 64-row blocks of W
    (161, 2056, 3000, 128, 1, 2, 2),   # two tiles of 96, pairs sharing W: K and W's rows cut
    # 64-row blocks of W in pairs along W's rows, sharing x's slice (session 60)
    (300, 4096, 4096, 64, 2, 2, 1),    # two tiles of 160 (cuBLAS: 64 x 152 tiles in pairs at 300 tokens)
    (129, 1000, 520, 64, 2),           # one tile of 160 (144 runs one block): 31 rows past M; W's and K's edges
    (700, 2056, 3000, 64, 2, 3, 1),    # three tiles of 240, the last 220 rows; N's last pair 8 rows of W
    (177, 512, 8192, 64, 2),           # 4 pairs cut into K runs (stream-K)
]


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["w.T", "row-major"])
@pytest.mark.parametrize("case", SWAP_CASES, ids=lambda c: "x".join(map(str, c)))
def test_the_transposed_product_matches_float64_with_edges_and_stream_k(dtype_name, layout, case):
    """x @ w.T computed as (w x^T)^T: W's rows in blocks, the product's rows in tiles of
    the build's width, the result stored transposed; with stream-K's partial sums (the
    plan's own, and every tile dealt out) and without (whole tiles). ``row-major``: the
    same product of a row-major (K, N) b (``w.T.contiguous()``), read MN-major
    (a_mn_major: b's edge columns inside a chunk zero-filled, chunks past N not loaded)."""
    import torch

    m, n, k, tile_m, cluster_m, *more = case
    if layout == "row-major" and (n % 8 or more[1:] == [2]):
        pytest.skip("a row-major b needs N % 8 == 0, and no block shares its slice (cluster_n=1)")
    dtype = getattr(torch, dtype_name)
    x, w = _weights(m, n, k, dtype, seed=m + n + k)
    b = w.T if layout == "w.T" else w.T.contiguous()
    ref = x.double() @ w.double().T
    cublas = _rel(torch.nn.functional.linear(x, w), ref)
    _matches_with_and_without_stream_k(x, b, swap_build(m, tile_m, cluster_m, *more), ref, cublas, case)


def _matches_with_and_without_stream_k(x, b, build, ref, cublas, what):
    """``x @ b`` by ``build`` with the plan's stream-K, whole tiles, and every tile dealt out as K
    runs (where each cluster gets a run), NaN-poisoned outputs, each against float64 (``ref``) and
    cuBLAS's error; whole tiles again add the same products in the same order: the same bits."""
    import torch

    m, n = ref.shape
    tiles = hg.cluster_tiles(m, n, build)
    whole = None
    for sk_tiles in (None, 0, tiles):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=x.dtype)
        try:
            got = gemm_hopper(x, b, out=out, _build=build, _sk_tiles=sk_tiles)
        except ValueError as exc:  # (too few K slices to give every cluster a run: refused, not wrong)
            assert sk_tiles == tiles and "without a run" in str(exc), exc
            continue
        torch.cuda.synchronize()
        assert not torch.isnan(got).any(), f"{what} sk_tiles={sk_tiles}: outputs never written"
        err = _rel(got, ref)
        assert err < 1e-2 and err < 4 * cublas + 1e-3, f"{what} sk_tiles={sk_tiles}: {err:.2e} (cuBLAS {cublas:.2e})"
        if sk_tiles == 0:
            whole = got.clone()
    again = gemm_hopper(x, b, _build=build, _sk_tiles=0)
    torch.cuda.synchronize()
    assert torch.equal(again, whole)


# 128 x 192 tiles (session 59): (build, layout of b). W's slice in pairs arrives as two boxes of 96 of
# its rows (b = w.T only); a row-major b's slice as three 64-column chunks, read MN-major (m64n192k16 .tnspB)
WIDE_192 = [(hg.PERSISTENT_192, "w.T"), (hg.PERSISTENT_192, "row-major"), (hg.PERSISTENT_192_PAIR, "w.T"),
            (dataclasses.replace(hg.PERSISTENT_192, cluster_n=2), "row-major")]
WIDE_192_SHAPES = [
    (777, 1000, 4104),   # edges in M and N (5 tiles of 192 and 40 columns), K's last slice cut
    (512, 6144, 4096),   # the rule's: 128 tiles, one wave
    (129, 392, 72),      # one row past 128; two K slices, the second 8 deep
    (1536, 3080, 1032),  # several waves, N's last tile 8 columns
]


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("build, layout", WIDE_192, ids=lambda v: v.label if hasattr(v, "label") else v)
@pytest.mark.parametrize("shape", WIDE_192_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_192_wide_tiles_match_float64_with_edges_and_stream_k(dtype_name, build, layout, shape):
    """128 x 192 tiles: whole (the rule takes them only so), with the plan's stream-K and with every
    tile dealt out as K runs, against float64 and cuBLAS; whole tiles give the same bits again."""
    import torch

    m, n, k = shape
    dtype = getattr(torch, dtype_name)
    x, w = _weights(m, n, k, dtype, seed=m + 2 * n + k)
    b = w.T if layout == "w.T" else w.T.contiguous()
    ref = x.double() @ w.double().T
    cublas = _rel(torch.nn.functional.linear(x, w), ref)
    _matches_with_and_without_stream_k(x, b, build, ref, cublas, shape)


def test_the_public_call_runs_192_wide_tiles_where_the_rule_takes_them():
    """gemm(variant="hopper") at 512 x 6144 x 4096 (Llama-3-8B's q, k and v at 512 tokens): the rule's
    128 x 192 tiles, for w.T and a row-major b, match cuBLAS."""
    import torch

    m, n, k = 512, 6144, 4096
    assert hg.default_build(m, n, k, 132, True).tile_n == hg.default_build(m, n, k, 132).tile_n == 192
    x, w = _weights(m, n, k, torch.bfloat16, seed=59)
    ref = x.double() @ w.double().T
    for b in (w.T, w.T.contiguous()):
        got = gemm(x, b, variant="hopper", stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
        assert _rel(got, ref) < 1e-2


def test_gemm_hopper_runs_the_transposed_product_for_a_prefill_of_a_few_hundred_tokens():
    """The public call a user makes for an nn.Linear at 200 and 300 tokens, x of shape (batch,
    tokens, K): the rule's transposed product (pairs for Llama-3-8B's gate and up, 64-row
    blocks for its o and qkv projections), with leading dimensions and an ``out`` of them,
    against float64; the same for the weight stored row-major (K, N)."""
    import torch

    s = torch.cuda.current_stream()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # (tokens, N, K, what the rule takes): pairs; 64-row blocks; one wave of them (Llama-3-8B's qkv);
    # pairs in two tiles of 160 of the product's rows (300 tokens)
    for tokens, n, k, kind in ((200, 28672, 4096, "pairs"), (200, 4096, 4096, "rows64"), (200, 6144, 4096, "rows64"),
                               (300, 28672, 4096, "pairs")):
        x, w = _weights(tokens, n, k, torch.bfloat16, seed=n)
        chosen = hg.default_build(tokens, n, k, sms, True)
        assert chosen.swap_ab and (chosen.tile_m == 64) == (kind == "rows64"), chosen.label
        assert hg.default_build(tokens, n, k, sms) == dataclasses.replace(chosen, a_mn_major=True)
        x3 = x.view(2, tokens // 2, k)
        for b in (w.T, w.T.contiguous()):   # (nn.Linear's layout, and a row-major (K, N) weight: read MN-major)
            out = torch.full((2, tokens // 2, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            got = gemm(x3, b, variant="hopper", stream=s, out=out)
            torch.cuda.synchronize()
            assert got is out and not torch.isnan(out).any()
            assert _rel(out.view(tokens, n), x.double() @ w.double().T) < 1e-2, (tokens, n, k, kind, b.stride())


def test_the_transposed_product_takes_more_rows_than_its_tile_and_a_row_major_b():
    import torch

    x, w = _weights(210, 512, 256, torch.bfloat16, seed=2)
    out = torch.full((210, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = gemm_hopper(x, w.T, out=out, _build=swap_build(200))   # (two tiles of 208 rows: the second holds 2)
    torch.cuda.synchronize()
    assert not torch.isnan(got).any() and _rel(got, x.double() @ w.double().T) < 1e-2
    # a row-major b: the same build reads it MN-major (a_mn_major), and gives the same sums
    got = gemm_hopper(x[:200], w.T.contiguous(), _build=swap_build(200))
    torch.cuda.synchronize()
    assert _rel(got, x[:200].double() @ w.double().T) < 1e-2
    assert torch.equal(got, gemm_hopper(x[:200], w.T, _build=swap_build(200)))
    # a build sharing W's slice along the product's rows reads w.T only: the default build runs instead
    got = gemm_hopper(x[:200], w.T.contiguous(), _build=swap_build(200, 128, 1, 2, 2))
    torch.cuda.synchronize()
    assert _rel(got, x[:200].double() @ w.double().T) < 1e-2


def test_skinny_split_k_every_way():
    import torch

    x, w = _weights(16, 2048, 4096, torch.float16, seed=9)
    ref = x.double() @ w.double().T
    first = None
    for per in (None, 1 << 30, 8):   # the default split, one run, 8 runs
        out = sk.gemm_skinny(x, w.T, _slices_per_run=per)
        torch.cuda.synchronize()
        assert _rel(out, ref) < 1e-2, per
        if per is None:
            first = out
    assert torch.equal(sk.gemm_skinny(x, w.T), first)
    assert torch.equal(sk.gemm_skinny(x, w.T.contiguous()), first)  # the same sums in the same order


def test_the_launch_cache_tells_a_weight_from_its_transpose():
    """w and w.T of a square w share an address and a shape: with the same x, out and
    stream, the cached launch of one must not serve the other (either order)."""
    import torch

    x, w = _weights(64, 1024, 1024, torch.bfloat16, seed=3)
    out = torch.empty(64, 1024, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.current_stream()
    for variant in ("hopper_persistent", "hopper_skinny"):
        for order in ((w, w.T, w), (w.T, w, w.T)):
            for b in order:
                gemm(x, b, variant=variant, out=out, stream=s)
                torch.cuda.synchronize()
                ref = x.double() @ (w.double() if b.is_contiguous() else w.double().T)
                assert _rel(out, ref) < 1e-2, (variant, b.is_contiguous())


def test_rungs_that_read_row_major_b_refuse_it_and_say_where_to_go():
    import torch

    x, w = _weights(256, 512, 256, torch.bfloat16, seed=1)
    for variant in ("tma", "ws", "wgmma"):
        with pytest.raises(ValueError, match="transposed view.*variant='hopper'.*variant='persistent'"):
            gemm_hopper(x, w.T, variant=variant)
    # a build asked for with the other layout than b's: b's layout decides
    got = gemm_hopper(x, w.T.contiguous(), _build=dataclasses.replace(PERSISTENT, b_k_major=True))
    torch.cuda.synchronize()
    assert _rel(got, x.double() @ w.double().T) < 1e-2
    with pytest.raises(ValueError, match="not contiguous.*nor the transpose"):   # another stride pattern: refused
        gemm_hopper(x, torch.randn(512, 1024, device="cuda").to(torch.bfloat16)[:, ::2].T)
    with pytest.raises(ValueError, match="not contiguous.*nor the transpose"):   # a column slice of w
        gemm(x, w[:, :128].T, variant="hopper", stream=torch.cuda.current_stream())
    with pytest.raises(ValueError, match="variant='hopper' takes bfloat16 or float16 inputs, got float32"):
        gemm(x.float(), w.float().T, variant="hopper", stream=torch.cuda.current_stream())


def test_cupy_transposed_weights():
    cupy = pytest.importorskip("cupy")
    import numpy as np

    rng = np.random.default_rng(4)
    x = cupy.asarray(rng.standard_normal((300, 512)).astype(np.float16))
    w = cupy.asarray(rng.standard_normal((1032, 512)).astype(np.float16))
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    c = gemm_hopper(x, w.T)   # (on CuPy's current stream)
    c8 = sk.gemm_skinny(x[:8], w.T)
    cupy.cuda.get_current_stream().synchronize()
    for got, r in ((c, ref), (c8, ref[:8])):
        assert got.dtype == np.float16
        assert float(cupy.linalg.norm(got.astype(np.float64) - r) / cupy.linalg.norm(r)) < 1e-2


@pytest.mark.parametrize("lead", [(2, 77), (3, 5, 40), (1, 1)], ids=lambda s: "x".join(map(str, s)))
def test_activations_with_leading_dimensions_as_f_linear_takes_them(lead):
    """(batch, sequence, K) activations: the result is (batch, sequence, N), as F.linear's,
    with out given as (..., N) or as the (M, N) matrix, and the same from CuPy."""
    import torch

    k, n = 768, 2304
    x = torch.randn(*lead, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.linear(x.double(), w.double())
    s = torch.cuda.current_stream()
    got = gemm(x, w.T, variant="hopper", stream=s)
    out = torch.full((*lead, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    same = gemm(x, w.T, variant="hopper", stream=s, out=out)
    flat = torch.full((x[..., 0].numel(), n), float("nan"), device="cuda", dtype=torch.bfloat16)
    flat_got = gemm(x, w.T, variant="hopper_persistent", stream=s, out=flat)
    torch.cuda.synchronize()
    assert got.shape == (*lead, n) and same is out and flat_got is flat
    for y in (got, out, flat.view(*lead, n)):
        assert _rel(y, ref) < 1e-2
    if x[..., 0].numel() > 1:  # (with one row, any strides are contiguous)
        with pytest.raises(ValueError, match="must be C-contiguous"):
            gemm(x, w.T, variant="hopper", stream=s, out=torch.empty(n, *lead, device="cuda",
                                                                       dtype=torch.bfloat16).movedim(0, -1))
    cupy = pytest.importorskip("cupy", minversion="14")  # (its streams carry __cuda_stream__ from 14 on)
    cx, cw = cupy.asarray(x.float().cpu().numpy()).astype("float16"), cupy.asarray(w.float().cpu().numpy()).astype("float16")
    cgot = gemm(cx, cw.T, variant="hopper", stream=cupy.cuda.get_current_stream())
    cupy.cuda.get_current_stream().synchronize()
    assert cgot.shape == (*lead, n)
    cref = cx.astype("float64") @ cw.astype("float64").T
    assert float(cupy.linalg.norm(cgot.astype("float64") - cref) / cupy.linalg.norm(cref)) < 1e-2


@pytest.mark.parametrize("m", [1, 8, 100, 200, 1000])
def test_a_head_of_any_vocabulary_size(m):
    """GPT-2's 50257-word head and a 1001-class one (N not a multiple of 8): x @ w.T through
    every kernel that reads w as it lies, against float64, without out and into out. The
    persistent rung's result without out is the (M, N) view of rows padded to a multiple of
    8 (the TMA store's unit); into out it is copied there."""
    import torch

    s = torch.cuda.current_stream()
    for n, k in ((50257, 768), (1001, 2048)):
        x, w = _weights(m, n, k, torch.bfloat16, seed=m + n)
        ref = x.double() @ w.double().T
        for variant in ["hopper", "hopper_persistent"] + (["hopper_skinny"] if m <= sk.MAX_ROWS else []):
            got = gemm(x, w.T, variant=variant, stream=s)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            into = gemm(x, w.T, variant=variant, stream=s, out=out)
            torch.cuda.synchronize()
            assert got.shape == (m, n) and into is out and not torch.isnan(out).any(), variant
            assert _rel(got, ref) < 1e-2 and _rel(out, ref) < 1e-2, variant
            if variant == "hopper_persistent":
                assert got.stride() == (-(-n // 8) * 8, 1) and got.contiguous().is_contiguous()
            # the result given back as out (written in place), and rows of other pitches (through a copy)
            got.fill_(float("nan"))
            assert gemm(x, w.T, variant=variant, stream=s, out=got) is got
            wider = torch.full((m, n + 3), float("nan"), device="cuda", dtype=torch.bfloat16)
            assert gemm(x, w.T, variant=variant, stream=s, out=wider[:, :n]) is not None
            torch.cuda.synchronize()
            assert _rel(got, ref) < 1e-2 and _rel(wider[:, :n], ref) < 1e-2, variant
            assert torch.isnan(wider[:, n:]).all(), f"{variant}: wrote past out's columns"
    # (batch, sequence, K) activations, as F.linear takes them, and CuPy
    x, w = _weights(2 * 77, 50257, 768, torch.bfloat16, seed=7)
    x = x.view(2, 77, 768)
    got = gemm(x, w.T, variant="hopper", stream=s)
    ref = torch.nn.functional.linear(x.double(), w.double())
    torch.cuda.synchronize()
    assert got.shape == (2, 77, 50257) and _rel(got, ref) < 1e-2
    got.fill_(float("nan"))
    assert gemm(x, w.T, variant="hopper", stream=s, out=got) is got  # ((2, 77, N) rows of padded ones, in place)
    torch.cuda.synchronize()
    assert _rel(got, ref) < 1e-2
    cupy = pytest.importorskip("cupy", minversion="14")
    cx, cw = cupy.asarray(x[0].float().cpu().numpy()).astype("float16"), cupy.asarray(w[:1001].float().cpu().numpy()).astype("float16")
    cgot = gemm(cx, cw.T, variant="hopper", stream=cupy.cuda.get_current_stream())
    cupy.cuda.get_current_stream().synchronize()
    cref = cx.astype("float64") @ cw.astype("float64").T
    assert cgot.shape == (77, 1001)
    assert float(cupy.linalg.norm(cgot.astype("float64") - cref) / cupy.linalg.norm(cref)) < 1e-2
