"""GPU tests of the Hopper GEMM ladder against cuBLAS (torch.matmul) and a float64
reference: fresh random inputs, poisoned outputs, every element written."""

from __future__ import annotations

import pytest

from fullpipe.kernels.hopper_gemm import SWEEP_BUILDS, VARIANTS, gemm_hopper

pytestmark = pytest.mark.gpu

SHAPES = [
    (512, 512, 512),      # whole tiles
    (1024, 768, 384),     # rectangular, several tiles each way
    (200, 264, 72),       # edges in M, N and K (partial tiles and slices)
    (130, 520, 1000),     # M just past a tile, K not a multiple of 64
    (1, 8, 8),            # the smallest legal problem
    (777, 1032, 4104),    # odd M, long K
    (96, 2056, 1032),     # one row of tiles (the default: 128 x 64 tiles, one block a cluster)
    (1024, 2048, 1024),   # the default: 128 x 128 tiles
    (2048, 2048, 512),    # the default: 128 x 256 tiles in clusters of 2
]


def _inputs(m, n, k, dtype, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    b = torch.randn(k, n, device="cuda", generator=g).to(dtype)
    return a, b


def _rel(x, ref):
    import torch

    return float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_cublas_and_float64(variant, dtype_name, shape):
    import torch

    dtype = getattr(torch, dtype_name)
    m, n, k = shape
    a, b = _inputs(m, n, k, dtype, seed=hash((variant, dtype_name, shape)) % 2**31)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)  # poison
    got = gemm_hopper(a, b, variant=variant, out=out)
    torch.cuda.synchronize()
    assert got is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = a.double() @ b.double()
    err = _rel(out, ref)
    cublas = _rel(torch.matmul(a, b), ref)
    assert err < 1e-2, f"{variant} {dtype_name} {shape}: rel err {err:.2e} (cuBLAS {cublas:.2e})"
    assert err < 4 * cublas + 1e-3, f"{variant}: {err:.2e} vs cuBLAS {cublas:.2e}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_allocates_the_output_and_repeats_identically(variant):
    import torch

    a, b = _inputs(384, 512, 256, torch.bfloat16, seed=7)
    c1 = gemm_hopper(a, b, variant=variant)
    c2 = gemm_hopper(a, b, variant=variant)
    torch.cuda.synchronize()
    assert c1.dtype == torch.bfloat16 and c1.shape == (384, 512)
    assert torch.equal(c1, c2), "the same inputs must give the same bits (a race would not)"


def test_persistent_without_multicast_computes_the_same():
    import torch

    a, b = _inputs(640, 1024, 512, torch.float16, seed=11)
    c_mc = gemm_hopper(a, b, variant="persistent")
    c_own = gemm_hopper(a, b, variant="persistent", _multicast=False)
    torch.cuda.synchronize()
    assert torch.equal(c_mc, c_own)


# Edges for the build options: a 2 x 2 or 4 x 1 cluster with blocks wholly outside C,
# Hilbert walks that skip cells of a non-square grid, K not a multiple of 64.
BUILD_SHAPES = [(200, 264, 72), (777, 1032, 4104), (1200, 1704, 520), (2304, 520, 136)]


@pytest.mark.parametrize("build", SWEEP_BUILDS, ids=lambda b: b.label)
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_every_persistent_build_matches_float64(build, dtype_name):
    import torch

    dtype = getattr(torch, dtype_name)
    for m, n, k in BUILD_SHAPES:
        a, b = _inputs(m, n, k, dtype, seed=m + n + k)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        gemm_hopper(a, b, variant="persistent", out=out, _build=build)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), f"{build.label} {m}x{n}x{k}: some outputs were never written"
        err = _rel(out, a.double() @ b.double())
        assert err < 1e-2, f"{build.label} {dtype_name} {m}x{n}x{k}: rel err {err:.2e}"


def test_cupy_inputs():
    cupy = pytest.importorskip("cupy")
    import numpy as np

    rng = np.random.default_rng(3)
    a = cupy.asarray(rng.standard_normal((256, 128)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((128, 192)).astype(np.float16))
    c = gemm_hopper(a, b, variant="ws")
    cupy.cuda.get_current_stream().synchronize()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(cupy.linalg.norm(c.astype(np.float64) - ref) / cupy.linalg.norm(ref))
    assert c.dtype == np.float16 and err < 1e-2


def test_errors_name_the_constraint():
    import torch

    a = torch.randn(64, 36, device="cuda").to(torch.bfloat16)
    b = torch.randn(36, 64, device="cuda").to(torch.bfloat16)
    with pytest.raises(ValueError, match="K must be a multiple of 8"):
        gemm_hopper(a, b, variant="tma")
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        gemm_hopper(torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda"))
    flat = torch.randn(64 * 64 + 4, device="cuda").to(torch.float16)
    shifted = flat[4:].view(64, 64)  # contiguous, but 8 bytes past an aligned address
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemm_hopper(shifted, torch.randn(64, 64, device="cuda").to(torch.float16))


# --------------------------------------------------------------------------- stream-K
# The persistent rung deals the last tiles out as runs of K slices where whole tiles
# would leave clusters idle (hopper_gemm.stream_k): below one wave each tile is cut into
# equal runs (1024 x 1024 x 4096 in 128 x 128 tiles: 64 tiles, 2 runs each; 512 x 256 x
# 4096 in 64 x 64 tiles: 32 tiles, 4 runs; 200 x 1032 x 4104 in 64 x 128 tiles: 36 tiles, 2
# runs each, the last tile row 8 rows deep; 1000 x 1032 x 4104 in 256 x 256 cluster tiles:
# 20 tiles, runs of 32 and 33 slices), above it the last wave and the one before (3072^3:
# 66 tiles whole, 78 split).
# (shape, the build: None for the one gemm_hopper picks)
SK_CASES = [((3072, 3072, 3072), "PERSISTENT"), ((1024, 1024, 4096), "PERSISTENT_NARROW"),
            ((512, 2048, 4096), "PERSISTENT_NARROW"), ((512, 256, 4096), None), ((1000, 1032, 4104), "PERSISTENT"),
            ((200, 1032, 4104), "PERSISTENT_SMALL"), ((200, 1032, 4104), "PERSISTENT_M64_N128"),
            ((768, 768, 8192), "PERSISTENT_NARROW"), ((8, 4096, 4096), None),
            ((72, 1024, 8192), None), ((1024, 512, 12288), None),
            ((1000, 1032, 4104), "PERSISTENT_ALONG_N"), ((795, 10160, 2056), "PERSISTENT_ALONG_N"),
            # the rule's since session 49: 36 cluster tiles over all 66 clusters; 90, a second wave 0.36 full
            # (the rule's pick until session 59, whose whole tiles end sooner: 3072^3 too)
            ((570, 3048, 7408), None), ((639, 7592, 8192), "PERSISTENT")]


def _stream_k_plan(m, n, k, dtype_name, build_name=None):
    """The persistent rung's plan on this GPU (``build_name``: a hopper_gemm build, or None
    for the one gemm_hopper picks), its build, and the GPU's SMs."""
    import torch

    from fullpipe.kernels import hopper_gemm as hg

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    build = getattr(hg, build_name) if build_name else hg.default_build(m, n, k, sms)
    return hg.plan("persistent", m, n, k, dtype_name, max_clusters=sms // build.cluster, build=build), build, sms


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape, build_name", SK_CASES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else (c or "default"))
def test_stream_k_matches_float64_and_whole_tiles(dtype_name, shape, build_name):
    """Stream-K against float64 and against whole tiles: 128 x 256, 128 x 128, 128 x 64,
    64 x 128 and 64 x 64 tiles, one block a cluster, odd sizes, warpgroups and warps on rows
    past the end."""
    import torch

    dtype = getattr(torch, dtype_name)
    m, n, k = shape
    p, build, sms = _stream_k_plan(m, n, k, dtype_name, build_name)
    assert p.sk_tiles > 0, f"{shape} ({build.label}): expected stream-K on {sms} SMs"
    a, b = _inputs(m, n, k, dtype, seed=m + 3 * n + 7 * k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    whole = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    gemm_hopper(a, b, out=out, _build=build)
    gemm_hopper(a, b, out=whole, _build=build, _sk_tiles=0)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = a.double() @ b.double()
    err, err_whole = _rel(out, ref), _rel(whole, ref)
    assert err < 1e-2 and err < 1.5 * err_whole + 1e-4, f"{shape}: stream-K {err:.2e}, whole tiles {err_whole:.2e}"
    again = gemm_hopper(a, b, _build=build)
    torch.cuda.synchronize()
    assert torch.equal(out, again), "the runs are fixed by ticket, not by SM: the same bits every time"


def test_stream_k_on_two_streams_at_once():
    """Two stream-K products at once on two streams, each wanting most SMs: a cluster only
    waits for clusters that took their tickets before it (so they run), so neither waits
    for the other's SMs; each stream has its own kept workspace."""
    import torch

    shapes = [((3072, 3072, 3072), "PERSISTENT"), ((512, 512, 4096), None)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    work = []
    for ((m, n, k), name), s in zip(shapes, streams):
        p, build, _ = _stream_k_plan(m, n, k, "bfloat16", name)
        assert p.sk_tiles > 0
        a, b = _inputs(m, n, k, torch.bfloat16, seed=m + k)
        work.append((a, b, build, torch.empty(m, n, device="cuda", dtype=torch.bfloat16), s, a.double() @ b.double()))
    torch.cuda.synchronize()
    for _ in range(20):
        for a, b, build, out, s, _ in work:
            with torch.cuda.stream(s):
                out.fill_(float("nan"))
                gemm_hopper(a, b, out=out, _build=build)
        for a, b, _, out, s, ref in work:
            s.synchronize()
            assert not torch.isnan(out).any() and _rel(out, ref) < 1e-2


def test_stream_k_launches_on_a_stream_share_one_kept_workspace_and_leave_it_zero():
    """Stream-K launches of different builds and grids in turn on one stream, three rounds,
    outputs poisoned each time, all on the stream's one kept workspace with no memset
    between them (each launch leaves its ticket counter and flags zero, where the next finds
    them); a CUDA graph captured on the same stream makes its own, and eager launches after
    the replays still compute right."""
    import torch

    from fullpipe.kernels import hopper_gemm as hg

    cases = [((3072, 3072, 3072), "PERSISTENT"), ((512, 256, 4096), None), ((1000, 1032, 4104), "PERSISTENT"),
             ((200, 1032, 4104), "PERSISTENT_M64_N128"), ((1000, 1032, 4104), "PERSISTENT_ALONG_N")]
    s = torch.cuda.Stream()
    work, need = [], 0
    for (m, n, k), name in cases:
        p, build, _ = _stream_k_plan(m, n, k, "bfloat16", name)
        assert p.sk_tiles > 0, (m, n, k, name)
        need = max(need, p.workspace_bytes)
        a, b = _inputs(m, n, k, torch.bfloat16, seed=m + 5 * n)
        work.append((a, b, build, torch.empty(m, n, device="cuda", dtype=torch.bfloat16), a.double() @ b.double()))
    torch.cuda.synchronize()

    def kept_header_is_zero():
        held = hg._KEPT_WORKSPACES._held[(torch.cuda.current_device(), s.cuda_stream)]
        assert held[2] >= need
        return not held[0][:hg.WORKSPACE_HEADER + 4 * hg.WORKSPACE_FLAGS].any()

    def run_round():
        with torch.cuda.stream(s):
            for a, b, build, out, _ in work:
                out.fill_(float("nan"))
                gemm_hopper(a, b, out=out, _build=build)
        s.synchronize()
        for a, b, build, out, ref in work:
            assert not torch.isnan(out).any() and _rel(out, ref) < 1e-2, build.label

    for _ in range(3):
        run_round()
        assert kept_header_is_zero()
    a, b, build, out, ref = work[1]
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        gemm_hopper(a, b, out=out, _build=build)
    for _ in range(2):
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert _rel(out, ref) < 1e-2
    run_round()
    assert kept_header_is_zero()
    assert hg.release_workspaces() >= need and hg._KEPT_WORKSPACES.held_bytes() == 0
    run_round()  # (a new one made)


@pytest.mark.parametrize("shape, build_name", [((512, 512, 4096), None), ((3072, 3072, 1024), "PERSISTENT")],
                         ids=["one-block", "clusters"])
def test_stream_k_in_a_cuda_graph(shape, build_name):
    """Captured in a torch CUDA graph: the workspace's zeroing is a memset node and its
    memory the graph's own, so each replay computes the new inputs; launched as a cluster of
    one block (no cluster attribute) and as clusters of 2."""
    import torch

    m, n, k = shape
    p, build, _ = _stream_k_plan(m, n, k, "float16", build_name)
    assert p.sk_tiles > 0
    a, b = _inputs(m, n, k, torch.float16, seed=5)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        gemm_hopper(a, b, out=out, _build=build)  # (compiled, planned, outside the capture)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gemm_hopper(a, b, out=out, _build=build)
    for seed in (1, 2, 3):
        a2, b2 = _inputs(m, n, k, torch.float16, seed=seed)
        a.copy_(a2)
        b.copy_(b2)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert _rel(out, a2.double() @ b2.double()) < 1e-2


def test_stream_k_with_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    import numpy as np

    rng = np.random.default_rng(4)
    a = cupy.asarray(rng.standard_normal((512, 2048)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((2048, 1024)).astype(np.float16))
    c = gemm_hopper(a, b)
    cupy.cuda.get_current_stream().synchronize()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert float(cupy.linalg.norm(c.astype(np.float64) - ref) / cupy.linalg.norm(ref)) < 1e-2


# --------------------------------------------------------------------------- dependent launches
# (rows, width, the build: None for the one gemm_hopper picks) of three back-to-back products
DEPENDENT_CHAINS = [(384, 512, None), (200, 1032, None), (8, 4096, None), (1024, 1024, None),
                    (512, 512, "PERSISTENT_M64_N64"), (512, 512, "PERSISTENT_M64_N128")]


@pytest.mark.parametrize("rows, width, build_name", DEPENDENT_CHAINS,
                         ids=lambda c: str(c) if c is not None else "default")
def test_back_to_back_dependent_launches_see_each_others_results(rows, width, build_name):
    """Three products with nothing between them (each a dependent launch that may start
    while the one before drains): the second reads what the first wrote, the third
    overwrites what the second reads; twenty times over, then checked against the same
    chain in float64, rounded to the dtype at the same points (hopper_gemm.dependent_chain_error)."""
    import torch

    from fullpipe.kernels import hopper_gemm as hg

    build = getattr(hg, build_name) if build_name else None
    err = hg.dependent_chain_error(rows, width, torch.bfloat16, build, repeats=20)
    assert err < 1e-2, f"{rows} x {width}: rel err {err:.2e} (inf: outputs never written)"


# (M, N, K, the build, b given as w.T): products whose last tiles reach past M, past N
# (W's rows, w.T), past the last 64-column chunk of B, and past K.
EDGE_CASES = [(258, 3392, 520, "PERSISTENT_NARROW", False), (258, 3400, 200, "PERSISTENT_NARROW", True),
              (130, 520, 1000, "PERSISTENT", False), (777, 1032, 4104, "PERSISTENT", True),
              (70, 200, 72, "PERSISTENT_M64_N64", False), (65, 136, 136, "PERSISTENT_M64_N128", True),
              (300, 264, 1000, "PERSISTENT_SMALL", True), (200, 264, 72, None, False),
              (523, 1000, 520, "PERSISTENT_ALONG_N", False), (389, 1288, 264, "PERSISTENT_ALONG_N", True)]


def _all_inf(rows, cols, k, dtype, w_t):
    """All-Inf operands (m, k) and (k, n), b as w.T if ``w_t``."""
    import torch

    a = torch.full((rows, k), float("inf"), device="cuda", dtype=dtype)
    b = torch.full((cols, k), float("inf"), device="cuda", dtype=dtype).T if w_t else \
        torch.full((k, cols), float("inf"), device="cuda", dtype=dtype)
    return a, b


@pytest.mark.parametrize("m, n, k, build_name, w_t", EDGE_CASES, ids=lambda c: str(c))
def test_edges_never_carry_an_earlier_products_values(m, n, k, build_name, w_t):
    """At an edge the persistent rung loads only the rows of A (and of W) inside the matrix:
    the slot's other rows keep what was there before. Right after a product of the same
    build on all-Inf operands padded to whole cluster tiles and long enough to fill every
    slot of the ring (so every row of every slot on the SMs it ran on holds Inf), a product
    on finite operands is finite and matches float64 everywhere: rows past M and W's rows
    past N reach only places past the edges; B's K-rows are loaded whole."""
    import torch

    from fullpipe.kernels import hopper_gemm as hg

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    build = getattr(hg, build_name) if build_name else hg.default_build(m, n, k, sms)
    a, b = _inputs(m, n, k, torch.bfloat16, seed=m * n + k)
    if w_t:
        b = b.t().contiguous().t()  # w.T of a row-major (N, K) w
    tile_rows, tile_cols = build.tile_m * build.cluster_m, build.tile_n * build.cluster_n
    inf_a, inf_b = _all_inf(-(-m // tile_rows) * tile_rows, -(-n // tile_cols) * tile_cols,
                            max(k, 64 * build.stages), torch.bfloat16, w_t)
    ref = a.double() @ b.double()
    for _ in range(3):
        junk = gemm_hopper(inf_a, inf_b, _build=build)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        gemm_hopper(a, b, out=out, _build=build)
        torch.cuda.synchronize()
        assert torch.isinf(junk).all()
        assert torch.isfinite(out).all(), f"{m}x{n}x{k}: non-finite outputs (values left over from the Inf product)"
        err = _rel(out, ref)
        assert err < 1e-2, f"{m}x{n}x{k} ({build.label}, w.T {w_t}): rel err {err:.2e}"


def test_the_current_stream_read_fast_is_torchs_own():
    """The kernels read PyTorch's current stream through its raw handle (no Stream object
    per call): on the default stream and inside ``torch.cuda.stream(s)``, the same handle
    torch.cuda.current_stream() gives, and a result allocated on it is ordered there."""
    import torch

    from fullpipe.kernels._operands import current_stream_handle, operand

    x = torch.randn(8, 64, device="cuda").to(torch.bfloat16)
    op = operand(x, "x")
    assert current_stream_handle(op) == torch.cuda.current_stream().cuda_stream
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert current_stream_handle(op) == s.cuda_stream != torch.cuda.default_stream().cuda_stream
        w = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
        y = gemm_hopper(x, w.T)
    s.synchronize()
    assert _rel(y, x.double() @ w.double().T) < 1e-2
