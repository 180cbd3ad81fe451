"""GPU tests of the Hopper flash attention kernel (flash_attention_hopper.cu, forced with
backend="hopper"): against an fp32 reference (PyTorch math on upcast inputs) on fresh
random inputs, outputs poisoned with NaN first, relative error <= 1e-2 per sequence, for
every head dim, dtype and causal mode, every schedule (serial, overlap, ping-pong) and
ring depth of the sweep, tile-multiple and odd lengths, variable-length packed batches,
grouped K/V heads, inputs scaled x30; rows past a sequence are never written; "auto"
picks the kernel on sm_90a. Skips without an sm_90a GPU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fullpipe.kernels import flash_attention as fa  # noqa: E402
from fullpipe.kernels import flash_attention_hopper as fah  # noqa: E402

from .test_flash_attention import DTYPES, TOL, _inputs, _reference, _rel  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _needs_hopper():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("the Hopper kernel needs an sm_90a GPU (H100/H200)")


def _run(q, k, v, causal, build=None, **kw):
    out = torch.full_like(q, float("nan"))
    res = fa.attention(q, k, v, causal=causal, out=out, backend="hopper", _hopper_build=build, **kw)
    assert res is out
    torch.cuda.synchronize()
    return out


DENSE = [  # (B, S, Hq, Hkv)
    (2, 128, 4, 4),  # one whole tile
    (2, 197, 8, 2),  # odd length, GQA 4:1
    (1, 1, 2, 1),  # one token, MQA
    (3, 300, 6, 3),  # several partial tiles, GQA 2:1
    (1, 1024, 2, 2),  # 8 K/V tiles: every ring slot reused
]


@pytest.mark.parametrize("d, dtype, causal", list(itertools.product(fa.HEAD_DIMS, DTYPES, (False, True))))
@pytest.mark.parametrize("shape", DENSE, ids=lambda s: "B{}_S{}_H{}_KV{}".format(*s))
def test_dense_matches_fp32_reference(shape, d, dtype, causal):
    b, s, hq, hkv = shape
    q, k, v = _inputs((b, s), hq, hkv, d, dtype, seed=hash((shape, d, dtype, causal, "h")) % 2**31)
    out = _run(q, k, v, causal)
    assert not torch.isnan(out).any(), "some output elements were never written"
    for i in range(b):
        err = _rel(out[i], _reference(q[i], k[i], v[i], causal))
        assert err <= TOL, f"batch {i}: relative error {err:.3e}"


VARLEN = [  # (sequence lengths, Hq, Hkv)
    ([1, 70, 129, 300], 6, 3),
    ([64, 64, 64], 4, 4),
    ([517, 3, 250, 1, 96, 128], 8, 1),
]


@pytest.mark.parametrize("d, dtype, causal", list(itertools.product(fa.HEAD_DIMS, DTYPES, (False, True))))
@pytest.mark.parametrize("lens, hq, hkv", VARLEN, ids=lambda x: str(x))
def test_varlen_matches_fp32_reference_per_sequence(lens, hq, hkv, d, dtype, causal):
    total = sum(lens)
    q, k, v = _inputs((total,), hq, hkv, d, dtype, seed=total + d + causal + 17)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    out = _run(q, k, v, causal, cu_seqlens=cu, max_seqlen=max(lens))
    assert not torch.isnan(out).any()
    for b, n in enumerate(lens):
        sl = slice(int(cu[b]), int(cu[b + 1]))
        err = _rel(out[sl], _reference(q[sl], k[sl], v[sl], causal))
        assert err <= TOL, f"sequence {b} (length {n}): relative error {err:.3e}"


def test_rows_past_the_packed_tokens_are_never_written():
    """A varlen batch that covers only the first tokens of the arrays: the rows after the
    last sequence (and so past every tile's end) keep their poison."""
    lens = [70, 5]
    q, k, v = _inputs((200,), 4, 2, 128, "float16", seed=5)
    cu = torch.tensor([0, 70, 75], dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    fa.attention(q[:75], k[:75], v[:75], cu_seqlens=cu, max_seqlen=max(lens), out=out[:75], backend="hopper")
    torch.cuda.synchronize()
    assert not torch.isnan(out[:75]).any()
    assert torch.isnan(out[75:]).all()


@pytest.mark.parametrize("build", fah.SWEEP_BUILDS, ids=lambda b: b.label)
def test_every_build_matches_fp32_reference(build):
    """Each schedule and ring depth, fp16 and bf16, causal and not: odd lengths over
    several query and key tiles with GQA 4:1, and a varlen batch."""
    lens = [1, 70, 129, 300, 517]
    for d, dtype, causal in itertools.product(fa.HEAD_DIMS, DTYPES, (False, True)):
        where = f"{build.label} d{d} {dtype} causal={causal}"
        q, k, v = _inputs((2, 601), 8, 2, d, dtype, seed=hash((build, d, dtype, causal, 1)) % 2**31)
        out = _run(q, k, v, causal, build)
        assert not torch.isnan(out).any(), f"{where}: some output elements were never written"
        for i in range(2):
            err = _rel(out[i], _reference(q[i], k[i], v[i], causal))
            assert err <= TOL, f"{where} dense S=601 batch {i}: relative error {err:.3e}"
        _check_varlen(build, lens, d, dtype, causal, f"{where} varlen", seed=hash((build, d, dtype, causal, 2)) % 2**31)


def _check_varlen(build, lens, d, dtype, causal, where, seed):
    """A packed batch of sequences of ``lens`` (6 query heads, 3 K/V heads) against the fp32
    reference, sequence by sequence."""
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    q, k, v = _inputs((sum(lens),), 6, 3, d, dtype, seed=seed)
    out = _run(q, k, v, causal, build, cu_seqlens=cu, max_seqlen=max(lens))
    assert not torch.isnan(out).any(), f"{where}: some output elements were never written"
    for b, n in enumerate(lens):
        sl = slice(int(cu[b]), int(cu[b + 1]))
        err = _rel(out[sl], _reference(q[sl], k[sl], v[sl], causal))
        assert err <= TOL, f"{where}: sequence {b} (length {n}): relative error {err:.3e}"


@pytest.mark.parametrize("blocks", [1, 3, 7])
def test_persistent_blocks_walk_many_tiles(blocks, monkeypatch):
    """A persistent build on a few blocks: each walks many query tiles (causal and not,
    skipping the tiles past the short sequences of a varlen batch), carrying the K/V ring,
    the Q buffer's phase and the ping-pong turns from one tile to the next."""
    arch, _ = fa.arch_and_sm_count(0)
    monkeypatch.setattr(fa, "arch_and_sm_count", lambda index: (arch, blocks))
    build = fah.Build(persistent=True)
    for d, dtype, causal in itertools.product(fa.HEAD_DIMS, DTYPES, (False, True)):
        _check_varlen(build, [1, 70, 129, 300, 517], d, dtype, causal, f"{blocks} blocks d{d} {dtype} causal={causal}",
                      seed=hash((blocks, d, dtype, causal)) % 2**31)


@pytest.mark.parametrize("d", fa.HEAD_DIMS)
@pytest.mark.parametrize("causal", (False, True))
def test_inputs_scaled_x30_stay_finite_and_correct(d, causal):
    q, k, v = _inputs((2, 300), 4, 4, d, "bfloat16", seed=31 + d, magnitude=30.0)
    out = _run(q, k, v, causal)
    assert torch.isfinite(out).all()
    for i in range(2):
        assert _rel(out[i], _reference(q[i], k[i], v[i], causal)) <= TOL


def test_custom_scale_and_stream():
    from fullpipe.cuda.device import Device
    from fullpipe.cuda.streams import create_stream

    s = create_stream(Device(0))
    q, k, v = _inputs((2, 250), 4, 2, 128, "float16", seed=7)
    torch.cuda.synchronize()
    out = torch.full_like(q, float("nan"))
    fa.attention(q, k, v, causal=True, scale=0.05, out=out, stream=s, backend="hopper")
    s.sync()
    for i in range(2):
        assert _rel(out[i], _reference(q[i], k[i], v[i], True, scale=0.05)) <= TOL


def test_auto_picks_the_hopper_kernel_where_it_was_measured_faster():
    for d in fa.HEAD_DIMS:
        for causal in (False, True):
            want = "hopper" if (d, causal) in fah.FASTER_THAN_MMA_SYNC else "mma_sync"
            assert fa.choose_backend("sm_90a", d, causal) == want
    # Both kernels agree on the same inputs.
    q, k, v = _inputs((1, 333), 4, 2, 64, "float16", seed=9)
    a = fa.attention(q, k, v, causal=True, backend="hopper")
    b = fa.attention(q, k, v, causal=True, backend="mma_sync")
    torch.cuda.synchronize()
    assert _rel(a, b.float()) <= TOL
