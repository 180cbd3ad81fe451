"""GPU tests of fullpipe.models: prefill of the decoder stack on fullpipe's kernels
(flash attention varlen/causal/GQA, the Hopper GEMM where it applies) against the
per-request PyTorch reference (SDPA + torch.matmul) on the same weights, over
variable-length requests, with the logits and the pool's memory poisoned first; a
bad request gets its error while the others' logits still match; the scratch comes
from the pool and goes back to it, also when the stack fails midway.

Tolerance: both stacks run in bf16 with fp32 accumulation, so each is compared with
the float32 reference (weights upcast): the fullpipe stack's error may be at most
twice the eager bf16 stack's own (plus 2e-3 of slack for the different accumulation
orders), and the two bf16 stacks agree within 3e-2 per request (relative L2 of the logits)."""

from __future__ import annotations

import numpy as np
import pytest

from ._torch import needs_torch, torch

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)

LENGTHS = [1, 37, 128, 200, 63, 129]


def _config():
    from fullpipe.models import StackConfig

    # 2 layers, width 512 = 4 heads of 128, 2 K/V heads (GQA)
    return StackConfig(layers=2, width=512, heads=4, kv_heads=2, head_dim=128, ffn_width=1536, vocab=4096,
                       max_context=256)


def _requests(config, lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, config.vocab, n) for n in lengths]


def _rel_rows(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm(dim=1) / b.norm(dim=1)).tolist()


def _poison_pool(pool, nbytes, stream):
    """Fill ``nbytes`` of the pool with 0xFF (a NaN in bf16) and free them on ``stream``:
    the next allocation of that size on ``stream`` reuses them."""
    from fullpipe.cuda.interop import as_torch, torch_stream
    from fullpipe.cuda.memory import DeviceArray

    buf = pool.allocate(nbytes, stream)
    t = as_torch(DeviceArray(int(buf.handle), (nbytes,), np.uint8, owner=buf))
    with torch.cuda.stream(torch_stream(stream)):
        t.fill_(0xFF)
    del t
    pool.free(buf, stream)


@pytest.fixture(scope="module")
def model():
    from fullpipe.models import init_weights

    config = _config()
    return config, init_weights(config, seed=7, device="cuda")


def _check_against_reference(config, weights, reqs, logits):
    from fullpipe.models import reference_prefill

    ref = reference_prefill(config, weights, reqs)
    ref32 = reference_prefill(config, weights, reqs, dtype=torch.float32)
    torch.cuda.synchronize()
    assert not torch.isnan(logits).any(), "some logits were never written"
    ours, eager = _rel_rows(logits, ref32), _rel_rows(ref, ref32)
    for r, (o, e) in enumerate(zip(ours, eager)):
        assert o <= 2 * e + 2e-3, f"request {r}: fullpipe {o:.2e} vs fp32, eager bf16 {e:.2e}"
    assert max(_rel_rows(logits, ref)) < 3e-2


def test_prefill_on_fullpipe_kernels_matches_the_reference(model, device, own_pool, stream):
    from fullpipe.cuda.interop import torch_stream
    from fullpipe.models import DecoderStack, check_and_pack, scratch_plan

    config, w = model
    stack = DecoderStack(config, w, pool=own_pool)
    assert stack.arch is not None
    if stack.arch == "sm_90a":  # every projection of this config fits the Hopper GEMM
        assert {c.backend for c in stack.matmul_choices.values()} == {"hopper"}, stack.matmul_choices
    reqs = _requests(config, LENGTHS)
    batch, errors = check_and_pack(reqs, config)
    assert not errors
    plan = scratch_plan(config, batch.total_tokens, batch.requests)
    _poison_pool(own_pool, plan.nbytes, stream)
    start = own_pool.stats()
    with torch.cuda.stream(torch_stream(stream)):
        out = torch.full((batch.requests, config.vocab), float("nan"), dtype=torch.bfloat16, device="cuda")
    logits, used = stack.prefill_packed(batch, stream=stream, out=out)
    assert logits is out and used == plan
    stream.sync()
    _check_against_reference(config, w, reqs, logits)
    end = own_pool.stats()
    assert end.allocations == start.allocations and end.used_bytes == start.used_bytes
    assert end.allocations_total == start.allocations_total + 1  # the whole scratch: one allocation


def test_bad_requests_get_errors_and_the_others_still_match(model, own_pool, stream):
    from fullpipe.models import DecoderStack

    config, w = model
    stack = DecoderStack(config, w, pool=own_pool)
    reqs = _requests(config, [17, 90, 3], seed=1)
    batch = [reqs[0], np.array([], np.int64), reqs[1], np.arange(config.max_context + 1) % config.vocab,
             np.array([0.5, 1.5]), reqs[2], np.array([config.vocab + 3])]
    result = stack.prefill(batch, stream=stream)
    stream.sync()
    assert result.indices == (0, 2, 5)
    assert [e.index for e in result.errors] == [1, 3, 4, 6]
    _check_against_reference(config, w, reqs, result.logits)


def test_torch_kernels_on_the_gpu_match_too(model, stream):
    """kernels='torch', PyTorch's allocator: the experiment's "level 1 only" stack."""
    from fullpipe.models import DecoderStack

    config, w = model
    stack = DecoderStack(config, w, kernels="torch")
    reqs = _requests(config, LENGTHS, seed=2)
    result = stack.prefill(reqs, stream=stream)
    stream.sync()
    _check_against_reference(config, w, reqs, result.logits)


def test_a_failure_midway_returns_the_scratch(model, own_pool, stream, monkeypatch):
    from fullpipe.models import DecoderStack

    config, w = model
    stack = DecoderStack(config, w, pool=own_pool)
    calls = []
    real = stack._attention

    def attention_that_fails_in_layer_1(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected failure in layer 1")
        return real(*args, **kwargs)

    monkeypatch.setattr(stack, "_attention", attention_that_fails_in_layer_1)
    start = own_pool.stats()
    with pytest.raises(RuntimeError, match="injected"):
        stack.prefill(_requests(config, [40, 7]), stream=stream)
    stream.sync()
    end = own_pool.stats()
    assert end.allocations == start.allocations and end.used_bytes == start.used_bytes
