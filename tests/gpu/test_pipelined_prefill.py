"""GPU test of the prefill through the level-1 executor (models.PipelinedPrefill): its logits
are the stack's own for the same micro-batches (same kernels, same shapes: bit for bit),
bad requests are named while the others complete, and the scratch goes back to the pool."""

from __future__ import annotations

import numpy as np
import pytest

from ._torch import needs_torch, torch

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)


def test_pipelined_prefill_equals_the_stack_per_microbatch(own_pool):
    from fullpipe.models import DecoderStack, StackConfig, init_weights
    from fullpipe.models.pipelined import PipelinedPrefill
    from fullpipe.models.stages import pack_microbatches

    config = StackConfig(layers=2, width=512, heads=4, kv_heads=2, head_dim=128, ffn_width=1536, vocab=4096,
                         max_context=512)
    weights = init_weights(config, seed=3, device="cuda")
    stack = DecoderStack(config, weights, kernels="fullpipe", pool=own_pool)
    rng = np.random.default_rng(0)
    good = [rng.integers(0, config.vocab, n).astype(np.int32) for n in (300, 5, 129, 64, 200, 77, 1, 250)]
    requests = good[:3] + [np.array([], dtype=np.int32)] + good[3:] + [np.array([config.vocab], dtype=np.int32)]
    used = own_pool.stats().used_bytes
    with PipelinedPrefill(stack, streams=3) as pre:
        res = pre.prefill(requests, microbatch_tokens=400)
    assert res.logits.device.type == "cpu" and res.logits.is_pinned()
    assert [e.index for e in res.errors] == [3, 9]
    # micro-batches of <= 400 tokens: (300, 5), (129, 64, 200), (77, 1, 250): one on each of the 3 streams
    assert res.indices == (0, 1, 2, 4, 5, 6, 7, 8) and res.microbatches == 3
    batches, _ = pack_microbatches(requests, config, 400)
    want = torch.cat([stack.prefill_packed(b)[0] for b in batches]).cpu()
    torch.cuda.synchronize()
    assert torch.equal(res.logits, want)
    assert own_pool.stats().used_bytes == used
