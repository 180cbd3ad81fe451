"""The stack cut into pipeline stages, without a GPU: micro-batches, the split, and slices
of the stack chained by hand on the CPU (what StagedStack chains across GPUs)."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe.models import (DecoderStack, StackConfig, check_and_pack, plan_microbatches, slice_weight_names,
                             stage_split)
from fullpipe.models.stages import layer_flops

TINY = StackConfig(layers=3, width=256, heads=4, kv_heads=2, head_dim=64, ffn_width=512, vocab=1000, max_context=64)


def test_microbatches_keep_request_order_and_the_token_budget():
    lengths = [5, 3, 9, 1, 1, 20, 2]
    groups = plan_microbatches(lengths, 8)
    assert [i for g in groups for i in g] == list(range(len(lengths)))
    for g in groups:  # within budget, unless one request alone is over it
        assert sum(lengths[i] for i in g) <= 8 or len(g) == 1
    # greedy: no group could have taken the next request
    for g, nxt in zip(groups, groups[1:]):
        assert sum(lengths[i] for i in g) + lengths[nxt[0]] > 8
    with pytest.raises(ValueError, match="max_tokens"):
        plan_microbatches(lengths, 0)
    with pytest.raises(ValueError, match="request 1 has 0 tokens"):
        plan_microbatches([3, 0], 8)


def test_stage_split_balances_layers_and_charges_the_head_to_the_last_stage():
    c = StackConfig()
    assert stage_split(c, 2) == [range(0, 6), range(6, 12)]  # the head is cheap next to a layer at 8k tokens
    # a huge vocabulary at a tiny micro-batch: the last stage gives layers away
    big_head = StackConfig(layers=12, vocab=1 << 20, max_context=4096)
    split = stage_split(big_head, 2, tokens=64, requests=64)
    assert len(split[1]) < len(split[0]) and [i for r in split for i in r] == list(range(12))
    # attention's share grows with the requests' length
    assert layer_flops(c, 8192, 4096) > layer_flops(c, 8192, 64)


def test_slice_weights_are_the_slices_own():
    assert slice_weight_names(TINY, range(0, 1)) == ["embedding"] + [n for n in TINY.weight_shapes()
                                                                     if n.startswith("layers.0.")]
    tail = slice_weight_names(TINY, range(2, 3))
    assert tail[-2:] == ["final_norm", "lm_head"] and "embedding" not in tail


def test_slices_chained_by_hand_equal_the_whole_stack():
    """Stage 0 = layers 0..1 (with the embedding), stage 1 = layer 2 (with the head); the
    residual stream handed over through ``receive`` as StagedStack's boundary does."""
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights

    w = init_weights(TINY, seed=3)
    rng = np.random.default_rng(0)
    reqs = [rng.integers(0, TINY.vocab, n) for n in (7, 1, 30)]
    batch, _ = check_and_pack(reqs, TINY)
    whole, _ = DecoderStack(TINY, w, kernels="torch").prefill_packed(batch)

    first = DecoderStack(TINY, {k: w[k] for k in slice_weight_names(TINY, range(0, 2))}, kernels="torch",
                         layers=range(0, 2))
    second = DecoderStack(TINY, {k: w[k] for k in slice_weight_names(TINY, range(2, 3))}, kernels="torch",
                          layers=range(2, 3))
    run0 = first.run_slice(batch)
    assert run0.logits is None
    handed = []

    def receive(x, stream):
        handed.append(x.shape)
        x.copy_(run0.view("x", torch.bfloat16))

    run1 = second.run_slice(batch, receive=receive)
    assert handed == [(batch.total_tokens, TINY.width)]
    assert torch.equal(run1.logits, whole)
    with pytest.raises(ValueError, match="receive"):
        second.run_slice(batch)
    with pytest.raises(ValueError, match="all of them"):
        first.prefill_packed(batch)
    with pytest.raises(ValueError, match="layers must be"):
        DecoderStack(TINY, w, kernels="torch", layers=range(2, 5))


def test_the_stack_split_over_processes_equals_one_process():
    """Two processes (gloo, on the CPU, kernels='torch'), each building its slice from the
    seed, the residual stream crossing through torch.distributed: the logits of the whole
    stack in one process, micro-batch by micro-batch."""
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights
    from fullpipe.models.stages import StackStageFactory
    from fullpipe.pipeline.distributed import spawn_stages

    rng = np.random.default_rng(4)
    batches = [check_and_pack([rng.integers(0, TINY.vocab, n) for n in lens], TINY)[0]
               for lens in ((5, 9), (1,), (30, 2, 7))]
    factory = StackStageFactory(TINY, seed=3, batches=batches, split=[range(0, 1), range(1, 3)], kernels="torch")
    result = spawn_stages(2, factory, factory.inputs(), backend="gloo", timeout=60)
    whole = DecoderStack(TINY, init_weights(TINY, seed=3), kernels="torch")
    for b, got in zip(batches, result.outputs):
        want, _ = whole.prefill_packed(b)
        assert torch.equal(got, want)
    with pytest.raises(ValueError, match="consecutive"):
        StackStageFactory(TINY, seed=3, batches=batches, split=[range(0, 2)])
