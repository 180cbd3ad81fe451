"""CPU tests of the flash attention kernel: every instance compiles to an sm_90a cubin
without spills and its SASS holds the technique (HMMA, LDSM / LDSM.T, LDGSTS); the
online-softmax recurrence the kernel runs (its NumPy mirror) equals a direct softmax,
also on scores scaled x30 and on rows masked for whole tiles; the front's checks."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fullpipe.cuda import compiler, sass
from fullpipe.kernels import flash_attention as fa

ARCH = "sm_90a"

BUILDS = fa.candidate_builds()  # the default build, then one per (d64, d128) candidate pair


def _build_id(b):
    return "-".join(f"d{d}{'c' if c else ''}_{t.name}" for (d, c), t in sorted(b.items()))


def _per_kernel_sass(cubin: bytes) -> dict[str, str]:
    parts = re.split(r"\.section\s+\.text\.", sass.disassemble(cubin))
    return {part.split(",", 1)[0].split()[0].strip(): part for part in parts[1:]}


@pytest.mark.parametrize("tilings", BUILDS, ids=_build_id)
def test_every_instance_compiles_without_spills_and_uses_the_technique(tilings):
    mod = compiler.compile_package_kernel(fa.SOURCE, arch=ARCH, defines=dict(fa.defines(tilings)))
    assert mod.cubin[:4] == b"\x7fELF"
    res = mod.resources
    assert set(res) == set(fa.KERNELS)
    for r in res.values():
        assert not r.spills and r.stack_frame_bytes == 0, f"{r.name} spills or uses local memory: {r}"
    per_kernel = _per_kernel_sass(mod.cubin)
    assert set(per_kernel) == set(fa.KERNELS)
    for name, text in per_kernel.items():
        d = 64 if "_d64_" in name else 128
        t = tilings[d, name.endswith("_causal")]
        counts = sass.opcode_counts(text)
        blocks = t.warp_rows // 16  # 16-row blocks per warp
        # The KV-tile loop is unrolled: Q K^T is (d/16) x (BN/8) mma, P V (BN/16) x (d/8), per row block.
        per_tile = 2 * d * t.block_n * blocks // 128
        assert counts["HMMA"] >= per_tile and counts["HMMA"] % per_tile == 0, (name, counts["HMMA"], per_tile)
        bodies = counts["HMMA"] // per_tile  # copies of the tile math in the SASS
        bf16 = "_bf16" in name
        assert (".BF16" in text) == bf16, f"{name}: mma input type"
        # ldmatrix for Q and K (plain) and V (transposed), cp.async 16-byte copies
        ldsm = len(re.findall(r"LDSM\.16\.M88\.4", text))
        ldsm_t = len(re.findall(r"LDSM\.16\.MT88\.4", text))
        assert re.search(r"LDGSTS\.E\.BYPASS(\.LTC128B)?\.128", text), name
        # One K load (x4: two 8-key fragments) per 16 keys and 16 dims, shared by every row
        # block; one V load likewise. Q: one x4 per row block and 16 dims, in every tile when
        # re-read from shared memory, once before the loop when held in registers.
        k_loads, q_loads = (d // 16) * (t.block_n // 16), (d // 16) * blocks
        expect = bodies * (k_loads + q_loads) if t.q_in_smem else bodies * k_loads + q_loads
        assert ldsm == expect, (name, t.name, ldsm, expect)
        assert ldsm_t == bodies * k_loads, (name, t.name, ldsm_t)
        # Barriers: one or two per tile (copy schedule), one after the prologue when Q goes to registers.
        bars = counts["BAR"]
        assert bars == bodies * (1 if t.one_barrier else 2) + (0 if t.q_in_smem else 1), (name, t.name, bars)
        assert counts["MUFU"] > 0, name  # exp2


def _ops(text: str, keep=("BAR", "LDGSTS", "HMMA")) -> list[str]:
    """The kernel's BAR / LDGSTS / HMMA instructions in program order, runs collapsed."""
    ops = [o.split(".")[0] for o in re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9.]*)", text, re.M)]
    runs = []
    for o in ops:
        if o in keep and (not runs or runs[-1] != o):
            runs.append(o)
    return runs


@pytest.mark.parametrize("d", fa.HEAD_DIMS)
def test_one_buffer_schedule_refills_each_buffer_right_after_the_barrier_that_frees_it(d):
    """kv_stages=1: each of the tile's two barriers is followed by the copy into the buffer
    it freed (V after the first, K after the second) before the next mma; with two buffers
    the copies are issued before the barriers."""
    # The first default/candidate modules (compiled by the other tests too) with each copy
    # schedule: one buffer, and two buffers with two barriers per tile (not one_barrier,
    # whose copies follow its single barrier by design)
    builds = fa.candidate_builds()
    one = next(b for b in builds if b[(d, False)].kv_stages == 1)
    two = next(b for b in builds if b[(d, False)].kv_stages == 2 and not b[(d, False)].one_barrier)
    found = {}
    for tilings in (one, two):
        t = tilings[(d, False)]
        mod = compiler.compile_package_kernel(fa.SOURCE, arch=ARCH, defines=dict(fa.defines(tilings)))
        runs = _ops(_per_kernel_sass(mod.cubin)[fa.kernel_name(d, "float16", False)])
        found[t.kv_stages] = sum(runs[i:i + 3] == ["BAR", "LDGSTS", "HMMA"] for i in range(len(runs)))
        assert not mod.resources[fa.kernel_name(d, "float16", False)].spills
    assert found[1] >= 2 and found[1] % 2 == 0, found  # both barriers of every tile body
    assert found[2] == 0, found
    assert fa.Tiling(4, 64, kv_stages=1).shared_mem(d) == (64 + 2 * 64) * d * 2 < fa.Tiling(4, 64).shared_mem(d)
    with pytest.raises(ValueError, match="kv_stages"):
        fa.Tiling(4, 64, one_barrier=True, kv_stages=1)


def test_group_by_head_launches_the_query_tiles_of_one_head_side_by_side():
    shapes = ((4, 4096, 16, 128), (4, 4096, 4, 128), (4, 4096, 4, 128))
    t = fa.Tiling(4, 64, group_by_head=True)
    assert fa.plan(*shapes, "float16", tiling=t).grid == (4096 // 64, 4, 16)
    assert fa.plan(*shapes, "float16", tiling=fa.Tiling(4, 64)).grid == (16, 4, 4096 // 64)
    # the grid's y and z are limited to 65535: query tiles may exceed that only in x
    long = ((1, 64 * 70000, 1, 64),) * 3
    assert fa.plan(*long, "float16", tiling=fa.Tiling(4, 64, 16, group_by_head=True)).grid == (70000, 1, 1)
    with pytest.raises(ValueError, match="grid limit"):
        fa.plan(*long, "float16", tiling=fa.Tiling(4, 64, 16))
    many_heads = ((1, 64, 70000, 64),) * 3
    with pytest.raises(ValueError, match="query heads 70000 exceed the grid limit"):
        fa.plan(*many_heads, "float16", tiling=t)


def test_tilings_name_template_arguments_and_shared_memory():
    t = fa.Tiling(4, 64, 32, q_in_smem=True, one_barrier=True)
    assert (t.block_m, t.threads, t.name) == (128, 128, "w4_n64_r32_qs_1b")
    assert fa.Tiling(4, 64).name == "w4_n64"  # the names results were recorded under
    assert fa.Tiling(4, 64, group_by_head=True, kv_stages=1).name == "w4_n64_gh_s1"
    assert dict(fa.defines({(128, False): t}))["ATTN_D128_TILING"] == "4,64,32,true,true,false,2"
    assert dict(fa.defines({(64, True): fa.Tiling(4, 128, group_by_head=True, kv_stages=1)}))[
        "ATTN_D64_CAUSAL_TILING"] == "4,128,16,false,false,true,1"
    assert t.shared_mem(128) == (128 + 4 * 64) * 128 * 2
    # every candidate fits the 227 KB a block may use, and entry i exists for both head dims
    assert len(fa.CANDIDATE_TILINGS[64]) == len(fa.CANDIDATE_TILINGS[128])
    for d, ts in fa.CANDIDATE_TILINGS.items():
        assert all(c.shared_mem(d) <= 227 * 1024 for c in ts), d
    assert set(fa.DEFAULT_TILINGS.values()) <= set(fa.CANDIDATE_TILINGS[64]) | set(fa.CANDIDATE_TILINGS[128])


# ------------------------------------------------------------------ online softmax (NumPy)
def _direct(scores: np.ndarray, values: np.ndarray, scale: float) -> np.ndarray:
    s = scores.astype(np.float64) * scale
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=1, keepdims=True)) @ values.astype(np.float64)


@pytest.mark.parametrize("magnitude", [1.0, 30.0])
@pytest.mark.parametrize("block_n", [32, 64, 128])
def test_online_softmax_matches_a_direct_softmax(magnitude, block_n):
    rng = np.random.default_rng(block_n + int(magnitude))
    scores = (rng.standard_normal((48, 300)) * magnitude).astype(np.float32)
    # the largest score of some rows sits in the last tile, so the max grows late
    scores[::3, -5] += 8 * magnitude
    values = rng.standard_normal((300, 64)).astype(np.float32)
    got = fa.online_softmax_reference(scores, values, block_n, scale=0.125)
    assert np.isfinite(got).all()
    ref = _direct(scores, values, 0.125)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-5


def test_online_softmax_x30_logits_do_not_overflow():
    rng = np.random.default_rng(1)
    scores = (rng.standard_normal((16, 256)) * 30 * 11.3).astype(np.float32)  # q.k of x30 inputs at d = 128
    values = rng.standard_normal((256, 128)).astype(np.float32)
    got = fa.online_softmax_reference(scores, values, 64, scale=1 / np.sqrt(128))
    ref = _direct(scores, values, 1 / np.sqrt(128))
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() < 1e-4


def test_online_softmax_with_causal_masks_and_rows_masked_for_whole_tiles():
    rng = np.random.default_rng(2)
    rows, keys = 40, 200
    scores = rng.standard_normal((rows, keys)).astype(np.float32) * 4
    masked = scores.copy()
    pos = np.arange(rows)[:, None] + 150  # query positions: causal over keys <= pos
    masked[np.arange(keys)[None, :] > pos] = -np.inf
    masked[5, :130] = -np.inf  # row 5 sees nothing in tiles 0 and 1: m stays -inf, then recovers
    values = rng.standard_normal((keys, 64)).astype(np.float32)
    got = fa.online_softmax_reference(masked, values, 64, scale=0.3)
    ref = _direct(masked, values, 0.3)
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() < 1e-5
    # a row with every key masked writes zeros (1 / l with l = 0 -> 0), not NaN
    masked[7, :] = -np.inf
    assert (fa.online_softmax_reference(masked, values, 64)[7] == 0).all()


# ------------------------------------------------------------------ plan and checks
def test_plan_dense_and_varlen_launch_shapes():
    p = fa.plan((4, 4096, 16, 128), (4, 4096, 4, 128), (4, 4096, 4, 128), "float16", causal=True)
    t = fa.DEFAULT_TILINGS[128, True]
    assert p.kernel == "flash_attention_d128_f16_causal"
    assert p.grid == t.grid(16, 4, 4096 // t.block_m) and p.block == t.threads
    assert p.shared_mem == t.shared_mem(128) <= 227 * 1024
    assert (p.batch, p.seq_len, p.tokens, p.heads_q, p.heads_kv) == (4, 4096, 4 * 4096, 16, 4)
    assert p.scale == pytest.approx(128 ** -0.5)
    v = fa.plan((1000, 8, 64), (1000, 8, 64), (1000, 8, 64), "bfloat16", varlen=True, batch=3, max_seqlen=700)
    assert v.kernel == "flash_attention_d64_bf16" and v.seq_len == 0
    t64 = fa.DEFAULT_TILINGS[64, False]
    assert v.grid == t64.grid(8, 3, -(-700 // t64.block_m))
    assert fa.flops(v, [700, 200, 100]) == 4.0 * (700**2 + 200**2 + 100**2) * 64 * 8


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(dtype="float32"), TypeError, "float16 or bfloat16"),
    (dict(q=(2, 64, 4, 96), k=(2, 64, 4, 96), v=(2, 64, 4, 96)), ValueError, "head dim 96"),
    (dict(k=(2, 64, 3, 64), v=(2, 64, 3, 64)), ValueError, "multiple of key/value heads"),
    (dict(q=(128, 4, 64)), ValueError, r"\[B, S, H, D\].*cu_seqlens"),
    (dict(v=(2, 64, 4, 128)), ValueError, "same shape"),
    (dict(k=(2, 32, 4, 64), v=(2, 32, 4, 64)), ValueError, "self-attention"),
    (dict(q=(2, 0, 4, 64)), ValueError, "empty"),
    (dict(scale=0.0), ValueError, "positive finite"),
    (dict(scale=float("nan")), ValueError, "positive finite"),
    (dict(max_seqlen=64), ValueError, "max_seqlen goes with cu_seqlens"),
    (dict(causal="yes"), TypeError, "causal"),
])
def test_plan_rejects_what_the_kernel_cannot_do(kwargs, exc, match):
    args = dict(q=(2, 64, 4, 64), k=(2, 64, 4, 64), v=(2, 64, 4, 64), dtype="float16")
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        fa.plan(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("dtype"), **args)


def test_plan_varlen_needs_a_sane_max_seqlen():
    shp = (100, 2, 64)
    with pytest.raises(ValueError, match="max_seqlen"):
        fa.plan(shp, shp, shp, "float16", varlen=True, batch=2, max_seqlen=None)
    with pytest.raises(ValueError, match="max_seqlen"):
        fa.plan(shp, shp, shp, "float16", varlen=True, batch=2, max_seqlen=101)


def test_host_arrays_are_refused_before_any_gpu_work():
    x = np.zeros((1, 64, 2, 64), np.float16)
    with pytest.raises(TypeError, match="host"):
        fa.attention(x, x, x)
