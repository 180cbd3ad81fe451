"""GPU tests of the cluster and persistent kernels beyond tests/gpu/test_kernels.py:
results against cuBLAS (fp32, TF32 off) and float64 on fresh random inputs, outputs
poisoned (NaN) first, for square, rectangular and odd sizes and every tuning of the
cluster kernels; the recurrence in all its forms; the work queue's reset."""

from __future__ import annotations

import pytest

from fullpipe import kernels
from fullpipe.kernels import cluster as cl
from fullpipe.kernels import persistent as pk

from ._torch import needs_torch, torch

_needs_torch = pytest.fixture(autouse=True)(needs_torch)


pytestmark = pytest.mark.gpu

CLUSTER_SHAPES = [  # (M, N, K)
    (512, 512, 512),  # whole clusters
    (256, 1024, 768),  # rectangular
    (1000, 1004, 996),  # odd M, N not a multiple of 64 (a padded cluster), K not of 32
    (130, 68, 40),  # fewer tiles than a cluster along N
    (64, 64, 4),  # one K slice, mostly zero-filled
    (2048, 256, 2048),  # long K: many ring wraps
]
CLUSTER_TUNINGS = [(32, 4), (16, 4), (32, 3), (16, 6)]  # (tile_k, stages)


def _rand(shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g)


def _cublas_fp32(a, b):
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a @ b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _rel(out, ref) -> float:
    return float(torch.linalg.norm(out.double() - ref.double()) / torch.linalg.norm(ref.double()).clamp_min(1e-30))


def _needs_clusters():
    from fullpipe.cuda.device import Device

    if not Device(0).facts.cluster_launch:
        pytest.skip("this GPU has no thread-block clusters (sm_90+)")


@pytest.mark.parametrize("tuning", CLUSTER_TUNINGS, ids=lambda t: f"tk{t[0]}-s{t[1]}")
@pytest.mark.parametrize("share_a", [False, True], ids=["own_a", "shared_a"])
@pytest.mark.parametrize("shape", CLUSTER_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cluster_gemm_matches_cublas_and_float64(shape, share_a, tuning, stream):
    _needs_clusters()
    m, n, k = shape
    a, b = _rand((m, k), m + k), _rand((k, n), n + 7)
    out = torch.full((m, n), float("nan"), device="cuda")
    torch.cuda.synchronize()
    cl.cluster_gemm(a, b, share_a=share_a, stream=stream, out=out, tile_k=tuning[0], stages=tuning[1])
    stream.sync()
    assert not torch.isnan(out).any(), "outputs never written"
    what = f"{cl.KERNELS[share_a]} tk={tuning[0]} stages={tuning[1]} {shape}"
    assert _rel(out, _cublas_fp32(a, b)) < 1e-4, f"{what} vs cuBLAS"
    assert _rel(out, a.double() @ b.double()) < 1e-4, f"{what} vs float64"


@pytest.mark.parametrize("shape", [(512, 512, 512), (1000, 1004, 996)], ids=lambda s: "x".join(map(str, s)))
def test_cluster_gemm_full_barrier_build_is_the_same_result(shape, stream):
    """The racecheck diagnostic build (every phase a plain cluster.sync) computes the same."""
    _needs_clusters()
    m, n, k = shape
    a, b = _rand((m, k), 1), _rand((k, n), 2)
    outs = []
    for full in (False, True):
        out = torch.full((m, n), float("nan"), device="cuda")
        torch.cuda.synchronize()
        cl.cluster_gemm(a, b, share_a=True, stream=stream, out=out, _full_barriers=full)
        stream.sync()
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert _rel(outs[0], a.double() @ b.double()) < 1e-4


def test_cluster_gemm_repeats_bitwise_and_both_kernels_agree(stream):
    _needs_clusters()
    a, b = _rand((768, 512), 3), _rand((512, 1024), 4)
    c = [kernels.cluster_gemm(a, b, share_a=s, stream=stream) for s in (True, True, False)]
    stream.sync()
    assert torch.equal(c[0], c[1])
    assert torch.equal(c[0], c[2]), "same math in the same order: sharing A must not change a bit"


# --------------------------------------------------------------------------- recurrence
RECURRENT_CASES = [  # (batch, N, T)
    (1, 2048, 16),  # the experiment's shape (one tile per SM on a 132-SM GPU), fewer steps
    (4, 1024, 8),
    (8, 512, 5),
    (3, 256, 7),  # odd batch
    (2, 16, 3),  # one tile
    (1, 128, 1),  # one step: no grid.sync at all
]


def _recurrent_case(batch, n, steps):
    try:
        pk._recurrent_setup(0, batch, n, steps)
    except ValueError as exc:  # e.g. N = 2048 on a GPU with fewer than 128 SMs
        pytest.skip(f"does not fit this GPU: {exc}")
    h0, w, x = pk.recurrent_inputs(batch, n, steps, seed=batch * 31 + n)
    return h0, w, x, pk.recurrent_reference(h0, w, x)


@pytest.mark.parametrize("mode", ["persistent", "per_step", "per_step_graph"])
@pytest.mark.parametrize("case", RECURRENT_CASES, ids=lambda c: "B{}-N{}-T{}".format(*c))
def test_recurrent_matches_float64(case, mode, stream):
    batch, n, steps = case
    h0, w, x, ref = _recurrent_case(batch, n, steps)
    for rep in range(2):  # twice: nothing is left behind by the first run
        out = torch.full((steps, batch, n), float("nan"), device="cuda")
        torch.cuda.synchronize()
        if mode == "per_step_graph":
            pk.recurrent_graph(h0, w, x, stream=stream, out=out).launch(stream)
        else:
            pk.recurrent(h0, w, x, persistent=mode == "persistent", stream=stream, out=out)
        stream.sync()
        assert not torch.isnan(out).any(), f"{mode} {case}: outputs never written"
        rel = _rel(out, ref)
        assert rel < 1e-4, f"{mode} {case} run {rep}: relative error {rel:.2e}"


@pytest.mark.parametrize("max_grid", [2, 3, 5])  # 1 block cannot hold all of W (256 KiB)
def test_recurrent_persistent_blocks_with_several_tiles(max_grid, stream):
    h0, w, x, ref = _recurrent_case(3, 256, 6)
    out = torch.full((6, 3, 256), float("nan"), device="cuda")
    torch.cuda.synchronize()
    pk.recurrent(h0, w, x, persistent=True, stream=stream, out=out, _max_grid=max_grid)
    stream.sync()
    assert _rel(out, ref) < 1e-4


def test_recurrent_forms_agree_bitwise_and_allocate_torch_outputs(stream):
    h0, w, x, _ = _recurrent_case(4, 512, 6)
    p = pk.recurrent(h0, w, x, persistent=True, stream=stream)
    s = pk.recurrent(h0, w, x, persistent=False, stream=stream)
    stream.sync()
    assert isinstance(p, torch.Tensor) and p.shape == (6, 4, 512)
    assert torch.equal(p, s), "same tile code, same order of additions"


def test_recurrent_graph_replays(stream):
    h0, w, x, ref = _recurrent_case(2, 512, 5)
    out = torch.empty(5, 2, 512, device="cuda")
    g = pk.recurrent_graph(h0, w, x, stream=stream, out=out)
    for _ in range(3):
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        g.launch(stream)
        stream.sync()
        assert _rel(out, ref) < 1e-4


# --------------------------------------------------------------------------- work queue
def test_queue_is_reset_after_every_launch_whatever_the_grid(stream):
    """The persistent GEMM leaves its queue zeroed: launches of different sizes in a row
    (different grids and tile counts) all compute every tile exactly once."""
    for i, (m, n, k) in enumerate([(4096, 4096, 32), (64, 64, 16), (1000, 1004, 36), (4096, 512, 64), (128, 64, 4)]):
        a, b = _rand((m, k), 100 + i), _rand((k, n), 200 + i)
        out = torch.full((m, n), float("nan"), device="cuda")
        torch.cuda.synchronize()
        kernels.small_tiles_gemm(a, b, persistent=True, stream=stream, out=out)
        stream.sync()
        assert not torch.isnan(out).any(), f"launch {i} {m}x{n}x{k}: tiles skipped (queue not reset?)"
        assert _rel(out, a.double() @ b.double()) < 1e-4, f"launch {i} {m}x{n}x{k}"
