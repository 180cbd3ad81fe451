"""CPU tests of fullpipe.models: the stack's config, request checks and packing, the
memory plans (against counts written out by hand for a tiny config, and the numel of
real weight tensors), and the packed prefill itself with PyTorch kernels on the CPU
against the per-request reference (the GPU tests, tests/gpu/test_models.py, run it with
fullpipe's kernels)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fullpipe.models import (DecoderStack, NoValidRequests, StackConfig, check_and_pack, check_requests,
                             choose_matmul, kv_cache_plan, pack, packed_scratch_bytes, padded_scratch_bytes,
                             scratch_plan)

# width 256 = 4 heads of 64; 2 K/V heads (GQA); every size small enough to count by hand
TINY = StackConfig(layers=2, width=256, heads=4, kv_heads=2, head_dim=64, ffn_width=512, vocab=1000, max_context=64)


# --------------------------------------------------------------------------- config
def test_defaults_are_the_issues_stack():
    c = StackConfig()
    assert (c.layers, c.width, c.heads, c.head_dim, c.dtype) == (12, 2048, 16, 128, "bfloat16")
    assert c.ffn_width % 256 == 0 and 2 * c.width < c.ffn_width < 3 * c.width  # SwiGLU's ~8/3 width


@pytest.mark.parametrize("change, field", [
    (dict(layers=0), "layers"),
    (dict(width=-8), "width"),
    (dict(heads=2.0), "heads"),
    (dict(vocab=True), "vocab"),
    (dict(max_context=0), "max_context"),
    (dict(head_dim=96, width=384), "head_dim"),
    (dict(kv_heads=3), "kv_heads"),
    (dict(width=512), "width"),                 # 4 heads of 64 are 256 wide
    (dict(ffn_width=510), "ffn_width"),
    (dict(dtype="float32"), "dtype"),
    (dict(norm_eps=0.0), "norm_eps"),
    (dict(rope_base=-1.0), "rope_base"),
])
def test_config_refuses_bad_fields_by_name(change, field):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(TINY, **change)


def test_parameter_count_is_the_numel_of_real_weights():
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights

    w = init_weights(TINY, seed=3)
    assert sum(t.numel() for t in w.values()) == TINY.parameters
    assert sum(t.numel() * t.element_size() for t in w.values()) == TINY.parameter_bytes
    # by hand: embedding + head 2 * 1000 * 256; per layer 2 norms of 256, Wqkv 256 x (4+2+2)*64,
    # Wo 256 x 256, gate/up 256 x 1024, down 512 x 256; final norm 256
    per_layer = 2 * 256 + 256 * 512 + 256 * 256 + 256 * 1024 + 512 * 256
    assert TINY.parameters == 2 * 1000 * 256 + 2 * per_layer + 256
    assert all(t.dtype == torch.bfloat16 for t in w.values())
    again = init_weights(TINY, seed=3)
    assert all(torch.equal(w[k], again[k]) for k in w)
    assert not torch.equal(w["lm_head"], init_weights(TINY, seed=4)["lm_head"])


def test_kv_bytes_by_hand():
    # one token, one layer: K and V of 2 heads x 64 in bf16 = 2 * 2 * 64 * 2 bytes
    assert TINY.kv_bytes_per_token_per_layer == 512
    assert TINY.kv_bytes_per_token == 1024
    assert StackConfig().kv_bytes_per_token == 12 * 2 * 16 * 128 * 2


# --------------------------------------------------------------------------- requests
def _good(n, seed=0):
    return np.random.default_rng(seed).integers(0, TINY.vocab, n)


def test_each_bad_request_is_named_and_the_others_go_on():
    torch = pytest.importorskip("torch")
    batch = [
        _good(5),                                   # 0 ok (int64)
        np.array([], dtype=np.int32),               # 1 empty
        _good(65),                                  # 2 longer than max_context 64
        np.arange(4, dtype=np.float32),             # 3 float ids
        np.array([1, 2, 1000]),                     # 4 id == vocab
        np.array([3, -1]),                          # 5 negative id
        _good(64, 1).astype(np.uint16),             # 6 ok: exactly max_context, unsigned
        np.zeros((2, 3), dtype=np.int32),           # 7 2-D
        [1, 2, 3],                                  # 8 a list
        torch.tensor([7, 8, 9]),                    # 9 ok: a torch CPU tensor
    ]
    valid, errors = check_requests(batch, TINY)
    assert [r.index for r in valid] == [0, 6, 9]
    assert all(r.tokens.dtype == np.int32 for r in valid)
    why = {e.index: e.reason for e in errors}
    assert sorted(why) == [1, 2, 3, 4, 5, 7, 8]
    assert "empty" in why[1]
    assert "65 tokens" in why[2] and "max_context=64" in why[2]
    assert "integers" in why[3] and "float32" in why[3]
    assert "1000" in why[4] and "position 2" in why[4] and "vocabulary" in why[4]
    assert "-1" in why[5] and "position 1" in why[5]
    assert "1-D" in why[7]
    assert "list" in why[8]
    assert str(errors[0]).startswith("request 1:")


def test_a_batch_with_no_valid_request_raises_with_every_reason():
    with pytest.raises(NoValidRequests) as e:
        check_requests([np.array([], np.int32), np.array([1.5])], TINY)
    assert [x.index for x in e.value.errors] == [0, 1]
    assert "request 0" in str(e.value) and "request 1" in str(e.value)
    with pytest.raises(NoValidRequests):
        check_requests([], TINY)


def test_packing_is_exact_offsets_no_padding():
    lens = [5, 17, 1, 33]
    reqs = [_good(n, i) for i, n in enumerate(lens)]
    batch, errors = check_and_pack(reqs[:2] + [np.array([], np.int64)] + reqs[2:], TINY)
    assert errors[0].index == 2
    assert batch.indices == (0, 1, 3, 4)
    assert batch.cu_seqlens.tolist() == [0, 5, 22, 23, 56] and batch.cu_seqlens.dtype == np.int32
    assert batch.max_seqlen == 33 and batch.total_tokens == 56 and batch.requests == 4
    assert np.array_equal(batch.tokens, np.concatenate(reqs)) and batch.tokens.dtype == np.int32
    assert batch.positions.tolist() == list(range(5)) + list(range(17)) + [0] + list(range(33))
    assert batch.last_token.tolist() == [4, 21, 22, 55]
    plan = scratch_plan(TINY, batch.total_tokens, batch.requests)
    assert plan.region("x").shape == (56, 256)  # the real token count, not 4 x 33
    assert plan.region("qkv").shape == (56, (4 + 2 + 2) * 64)
    assert plan.region("cu_seqlens").shape == (5,) and plan.region("last_hidden").shape == (4, 256)
    with pytest.raises(ValueError):
        pack([])


# --------------------------------------------------------------------------- memory plans
def test_scratch_plan_against_a_hand_count():
    # TINY, bytes per token (bf16 = 2 bytes; ints 4): tokens 4, positions 4, x 512, h 512,
    # qkv 8*64*2 = 1024, q 512, k 256, v 256, attn 512, proj 512, gate_up 2048, act 1024
    per_token = 4 + 4 + 512 + 512 + 1024 + 512 + 256 + 256 + 512 + 512 + 2048 + 1024
    # per request: an offset (4), a last-token index (8), a last-token hidden row (512)
    per_request = 4 + 8 + 512
    regions = 15
    T, R = 56, 4
    exact = T * per_token + R * per_request + 4
    plan = scratch_plan(TINY, T, R)
    assert sum(r.nbytes for r in plan.regions) == exact
    assert exact <= plan.nbytes < exact + regions * 256
    ends = sorted((r.offset, r.offset + r.nbytes) for r in plan.regions)
    assert all(a % 256 == 0 for a, _ in ends)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(ends, ends[1:]))  # no overlap
    assert ends[-1][1] <= plan.nbytes


def test_packed_scratch_vs_preallocating_for_the_longest():
    lens = [5, 17, 1, 33]
    packed, padded = packed_scratch_bytes(TINY, lens), padded_scratch_bytes(TINY, lens)
    assert packed == scratch_plan(TINY, 56, 4).nbytes and padded == scratch_plan(TINY, 4 * 33, 4).nbytes
    assert 56 / 132 < packed / padded < 0.45  # the token ratio, plus the per-request parts and alignment
    assert packed_scratch_bytes(TINY, [20, 20]) == padded_scratch_bytes(TINY, [20, 20])


def test_kv_cache_plan_grows_per_generated_token():
    kv = kv_cache_plan(TINY, [5, 17, 1, 33])
    assert kv.bytes_per_token_per_layer == 512 and kv.bytes_per_token == 1024
    assert kv.after_prefill == 56 * 1024
    assert kv.growth_per_step == 4 * 1024
    assert kv.after_steps(10) == (56 + 40) * 1024
    assert kv.preallocated == 4 * 64 * 1024
    with pytest.raises(ValueError):
        kv.after_steps(-1)
    with pytest.raises(ValueError):
        kv_cache_plan(TINY, [3, 0])


# --------------------------------------------------------------------------- kernel choice
def test_matmul_choice_says_why():
    assert choose_matmul("fullpipe", "sm_90a", "bfloat16", 256, 1024).backend == "hopper"
    for args, words in [(("torch", "sm_90a", "bfloat16", 256, 1024), "kernels='torch'"),
                        (("fullpipe", None, "bfloat16", 256, 1024), "no GPU"),
                        (("fullpipe", "sm_80", "bfloat16", 256, 1024), "sm_80"),
                        (("fullpipe", "sm_90a", "float32", 256, 1024), "float32"),
                        (("fullpipe", "sm_90a", "bfloat16", 256, 1001), "N=1001")]:
        choice = choose_matmul(*args)
        assert choice.backend == "torch" and words in choice.reason


# --------------------------------------------------------------------------- the stack on the CPU
def _rel_rows(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm(dim=1) / b.norm(dim=1)).tolist()


def test_packed_prefill_with_torch_kernels_matches_the_reference():
    """The packed path (one scratch allocation, positions restarting per request, varlen
    attention, last-token gather) on the CPU, against the per-request reference."""
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights, reference_prefill

    w = init_weights(TINY, seed=1)
    stack = DecoderStack(TINY, w, kernels="torch")
    assert all(c.backend == "torch" for c in stack.matmul_choices.values())
    lens = [5, 17, 1, 33]
    reqs = [_good(n, 10 + i) for i, n in enumerate(lens)]
    batch = reqs[:1] + [np.array([TINY.vocab])] + reqs[1:]
    result = stack.prefill(batch)
    assert result.indices == (0, 2, 3, 4) and [e.index for e in result.errors] == [1]
    assert result.logits.shape == (4, TINY.vocab) and result.logits.dtype == torch.bfloat16
    ref = reference_prefill(TINY, w, reqs)
    ref32 = reference_prefill(TINY, w, reqs, dtype=torch.float32)
    assert max(_rel_rows(result.logits, ref)) < 1e-2
    assert max(_rel_rows(result.logits, ref32)) < 2e-2  # bf16 activations through 2 layers
    # a request's logits do not depend on its neighbours in the packed batch
    alone = stack.prefill([reqs[3]]).logits
    assert max(_rel_rows(alone, result.logits[3:4])) < 1e-2
    # and do depend on the positions: the same tokens reversed give other logits
    rev = stack.prefill([reqs[3][::-1].copy()]).logits
    assert min(_rel_rows(rev, result.logits[3:4])) > 0.1


def test_stack_refuses_what_it_cannot_run():
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights

    w = init_weights(TINY, seed=0)
    with pytest.raises(ValueError, match="GPU"):
        DecoderStack(TINY, w, kernels="fullpipe")
    with pytest.raises(ValueError, match="kernels"):
        DecoderStack(TINY, w, kernels="cudnn")
    bad = dict(w, **{"layers.1.wo": w["layers.1.wo"].float()})
    with pytest.raises(ValueError, match="layers.1.wo"):
        DecoderStack(TINY, bad, kernels="torch")
    stack = DecoderStack(TINY, w, kernels="torch")
    batch, _ = check_and_pack([_good(3)], TINY)
    with pytest.raises(ValueError, match="out must be"):
        stack.prefill_packed(batch, out=torch.empty(2, TINY.vocab, dtype=torch.bfloat16))


@pytest.mark.parametrize("config", [
    StackConfig(layers=2, width=512, heads=4, kv_heads=2, head_dim=128, ffn_width=1536, vocab=4096, max_context=256),
    StackConfig(),
], ids=["gpu-test-config", "default"])
def test_the_stacks_launches_pass_the_kernels_own_checks(config):
    """Every fullpipe kernel launch of a prefill (shapes, dtypes, GQA, varlen, pointers
    at the scratch plan's offsets) is accepted by the kernels' pure planners: the
    attention kernel (mma.sync plan, and the Hopper plan's tensor maps) and the Hopper
    GEMM for every projection, including the LM head at M = requests."""
    from fullpipe.kernels import flash_attention as fa
    from fullpipe.kernels import flash_attention_hopper as fah
    from fullpipe.kernels import hopper_gemm as hg

    lengths = [1, 37, 128, 200, 63, 129]
    T, R = sum(lengths), len(lengths)
    plan = scratch_plan(config, T, R)
    base = 1 << 30
    ptr = {r.name: base + r.offset for r in plan.regions}
    hq, hkv, d = config.heads, config.kv_heads, config.head_dim
    p = fa.plan((T, hq, d), (T, hkv, d), (T, hkv, d), config.dtype, causal=True, varlen=True, batch=R,
                max_seqlen=max(lengths))
    assert p.tokens == T and p.heads_q == hq and p.heads_kv == hkv and p.max_seqlen == 200
    fah.plan(p, q_ptr=ptr["q"], k_ptr=ptr["k"], v_ptr=ptr["v"])
    weights = config.weight_shapes()
    launches = {
        "wqkv": (T, ("h", "qkv")), "wo": (T, ("attn", "proj")), "w_gate_up": (T, ("h", "gate_up")),
        "w_down": (T, ("act", "proj")), "lm_head": (R, ("last_hidden", None)),
    }
    for name, (m, (a, c)) in launches.items():
        k, n = weights[name if name == "lm_head" else f"layers.0.{name}"]
        assert choose_matmul("fullpipe", "sm_90a", config.dtype, k, n).backend == "hopper"
        assert plan.region(a).shape[0] == m and int(np.prod(plan.region(a).shape[1:])) == k
        if c is not None:
            assert plan.region(c).shape == (m, n)
        hg.plan("persistent", m, n, k, config.dtype, ptr[a], base + (1 << 29), ptr[c] if c else base)
