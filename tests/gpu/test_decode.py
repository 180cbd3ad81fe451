"""GPU tests of fullpipe.models.decode: greedy decode over the paged KV cache on fullpipe's
kernels against the PyTorch peers (models.torch_decode) on the same weights.

- Logits under teacher forcing (the same tokens fed to both) against the float32 static-cache
  peer: fullpipe's error at most twice the eager bf16 peer's own (plus 2e-3), and within
  3e-2 of the eager bf16 peer (relative L2 per sequence and step, as the prefill tests).
- Every way of running the steps (one by one from Python, CUDA graphs of several steps,
  layer groups on two streams, per-step scratch from the pool or cudaMalloc) generates
  the same tokens.
- Memory: the steps take nothing from the pool but KV pages; everything goes back at the end.
- A prompt that cannot be served is refused by name and the others still decode."""

from __future__ import annotations

import numpy as np
import pytest

from ._torch import needs_torch, torch

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)

LENGTHS = [1, 37, 64, 200, 65, 129]  # page boundaries (64) on both sides
NEW = 20


def _config():
    from fullpipe.models import StackConfig

    return StackConfig(layers=3, width=512, heads=4, kv_heads=2, head_dim=128, ffn_width=1536, vocab=4096,
                       max_context=512)


@pytest.fixture(scope="module")
def model():
    from fullpipe.models import DecoderStack, init_weights

    config = _config()
    weights = init_weights(config, seed=11, device="cuda")
    return config, weights, DecoderStack(config, weights, kernels="fullpipe", pool=None)


def _prompts(config, lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, config.vocab, n).astype(np.int32) for n in lengths]


def _rel(a, b):
    a, b = a.float().flatten(0, -2), b.float().flatten(0, -2)
    return (a - b).norm(dim=1) / b.norm(dim=1)


def _forced_peer_logits(config, weights, prompts, feed, cache, dtype=None):
    from fullpipe.models.torch_decode import TorchDecoder

    peer = TorchDecoder(config, weights, prompts, capacity=max(map(len, prompts)) + feed.shape[1] + 1, cache=cache,
                        dtype=dtype)
    return torch.stack([peer.step(torch.as_tensor(feed[:, t], device="cuda")) for t in range(feed.shape[1])])


@pytest.mark.parametrize("groups", [1, 2])
def test_forced_decode_matches_the_peers(model, own_pool, groups):
    from fullpipe.models.decode import Decoder

    config, weights, stack = model
    prompts = _prompts(config, LENGTHS)
    rng = np.random.default_rng(1)
    feed = rng.integers(0, config.vocab, (len(prompts), NEW - 1))
    res = Decoder(stack, pool=own_pool, graph=False, layer_groups=groups).generate(prompts, NEW, forced=feed)
    ours = res.stats["logits"]
    assert ours.shape == (NEW - 1, len(prompts), config.vocab) and not torch.isnan(ours).any()
    eager = _forced_peer_logits(config, weights, prompts, feed, "dynamic")
    ref32 = _forced_peer_logits(config, weights, prompts, feed, "static", dtype=torch.float32)
    o, e = _rel(ours, ref32), _rel(eager, ref32)
    assert bool((o <= 2 * e + 2e-3).all()), f"fullpipe {o.max():.2e} vs fp32, eager bf16 {e.max():.2e}"
    assert float(_rel(ours, eager).max()) < 3e-2


def test_every_way_of_running_the_steps_generates_the_same_tokens(model, own_pool):
    from fullpipe.models.decode import Decoder

    config, _, stack = model
    prompts = _prompts(config, LENGTHS, seed=3)
    base = own_pool.stats().used_bytes
    runs = {}
    for name, kw in {"eager": dict(graph=False), "graph": dict(graph=True, steps_per_graph=4),
                     "graph-8": dict(graph=True, steps_per_graph=8),
                     "groups": dict(graph=False, layer_groups=2), "groups-graph": dict(graph=True, layer_groups=2,
                                                                                       steps_per_graph=4),
                     "pool": dict(graph=False, layer_groups=2, scratch="pool"),
                     "cudaMalloc": dict(graph=False, layer_groups=2, scratch="cudaMalloc")}.items():
        res = Decoder(stack, pool=own_pool, **kw).generate(prompts, NEW)
        assert res.steps == NEW - 1 and res.tokens.shape == (len(prompts), NEW)
        runs[name] = res.tokens
        torch.cuda.synchronize()
        assert own_pool.stats().used_bytes == base, f"{name}: pool memory not given back"
    # greedy from the same logits: the one-stream forms use the same kernels in the same order
    np.testing.assert_array_equal(runs["graph"], runs["eager"])
    np.testing.assert_array_equal(runs["graph-8"], runs["eager"])
    np.testing.assert_array_equal(runs["groups-graph"], runs["groups"])
    np.testing.assert_array_equal(runs["pool"], runs["groups"])
    np.testing.assert_array_equal(runs["cudaMalloc"], runs["groups"])
    # two micro-batches may split the cached tokens otherwise (another summation order):
    # the tokens agree but for a rare near-tie
    assert (runs["groups"] == runs["eager"]).mean() > 0.95


def test_graph_steps_take_only_kv_pages_from_the_pool(model, own_pool):
    from fullpipe.models.decode import Decoder

    config, _, stack = model
    prompts = _prompts(config, [60, 3], seed=4)
    dec = Decoder(stack, pool=own_pool, graph=True, steps_per_graph=8, page_tokens=16)
    session = dec.start(prompts, 41)
    try:
        session.run(9)  # one eager step, the capture, one launch of 8 steps
        torch.cuda.synchronize()
        before, pages = own_pool.stats().allocations_total, session.cache.pages_allocated
        session.run()
        result = session.finish()
        taken = own_pool.stats().allocations_total - before
        assert taken == session.cache.pages_allocated - pages > 0  # the sequences crossed page boundaries
        assert result.stats["graphed"]
        # 60 + 41 tokens -> 7 pages of 16; 3 + 41 -> 3
        assert session.cache.pages_held == 7 + 3
    finally:
        session.close()


def test_a_prompt_that_cannot_be_served_is_named_and_the_others_decode(model, own_pool):
    from fullpipe.models.decode import Decoder

    config, _, stack = model
    good = _prompts(config, [10, 20], seed=5)
    prompts = [good[0], np.array([], dtype=np.int32), np.full(500, 1, dtype=np.int32), good[1],
               np.array([config.vocab], dtype=np.int32)]
    dec = Decoder(stack, pool=own_pool, graph=True, steps_per_graph=4)
    res = dec.generate(prompts, 16)
    assert res.indices == (0, 3)
    assert [e.index for e in res.errors] == [1, 2, 4]
    assert "max_context" in str(res.errors[1])
    alone = dec.generate(good, 16)
    np.testing.assert_array_equal(res.tokens, alone.tokens)


@pytest.mark.parametrize("groups", [1, 2])
def test_a_failure_mid_decode_gives_every_page_and_block_back(model, own_pool, monkeypatch, groups):
    import fullpipe.kernels.decode_attention as da
    from fullpipe.models.decode import Decoder

    config, _, stack = model
    real, calls = da.decode_attention, {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3 * config.layers * groups + 2:  # in the fourth step
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(da, "decode_attention", failing)
    used = own_pool.stats().used_bytes
    with pytest.raises(RuntimeError, match="injected"):
        Decoder(stack, pool=own_pool, graph=False, layer_groups=groups, scratch="pool").generate(
            _prompts(config, LENGTHS, seed=6), NEW)
    torch.cuda.synchronize()
    assert own_pool.stats().used_bytes == used


@pytest.mark.parametrize("dtype, head_dim, heads, kv_heads, page_tokens, batch, per_graph", [
    ("float16", 64, 8, 2, 16, 1, 3),      # one sequence, small pages, fp16, d64
    ("bfloat16", 128, 8, 1, 256, 5, 1),   # 8 query heads per K/V head, large pages, a graph per step
    ("float16", 128, 4, 4, 32, 16, 5),    # 16 sequences, no GQA
])
def test_other_shapes_decode_like_the_peers(own_pool, dtype, head_dim, heads, kv_heads, page_tokens, batch, per_graph):
    from fullpipe.models import DecoderStack, StackConfig, init_weights
    from fullpipe.models.decode import Decoder

    config = StackConfig(layers=2, width=heads * head_dim, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                         ffn_width=1024, vocab=1000, max_context=600, dtype=dtype)
    weights = init_weights(config, seed=12, device="cuda")
    stack = DecoderStack(config, weights, kernels="fullpipe", pool=None)
    rng = np.random.default_rng(batch)
    prompts = [rng.integers(0, config.vocab, n).astype(np.int32) for n in rng.integers(1, 300, batch)]
    steps = 12
    feed = rng.integers(0, config.vocab, (batch, steps - 1))
    ours = Decoder(stack, pool=own_pool, graph=False, page_tokens=page_tokens).generate(prompts, steps, forced=feed)
    eager = _forced_peer_logits(config, weights, prompts, feed, "dynamic")
    ref32 = _forced_peer_logits(config, weights, prompts, feed, "static", dtype=torch.float32)
    o, e = _rel(ours.stats["logits"], ref32), _rel(eager, ref32)
    assert bool((o <= 2 * e + 2e-3).all()), f"fullpipe {o.max():.2e} vs fp32, eager {e.max():.2e}"
    greedy = Decoder(stack, pool=own_pool, graph=False, page_tokens=page_tokens).generate(prompts, steps)
    graphed = Decoder(stack, pool=own_pool, graph=True, steps_per_graph=per_graph,
                      page_tokens=page_tokens).generate(prompts, steps)
    np.testing.assert_array_equal(graphed.tokens, greedy.tokens)


def test_too_many_query_heads_per_kv_head_is_refused_up_front(own_pool):
    from fullpipe.models import DecoderStack, StackConfig, init_weights
    from fullpipe.models.decode import Decoder

    config = StackConfig(layers=1, width=16 * 64, heads=16, kv_heads=1, head_dim=64, ffn_width=512, vocab=100)
    stack = DecoderStack(config, init_weights(config, seed=0, device="cuda"), kernels="fullpipe", pool=None)
    with pytest.raises(ValueError, match="at most 8 query heads per K/V head"):
        Decoder(stack, pool=own_pool)
