"""CPU tests of the decode half of fullpipe.models: the paged KV cache's bookkeeping (with a
pool that hands out fake addresses and checks every free), the step buffers and the cuts
of the batch and the layers, and the PyTorch peers' decode against the reference prefill
(feeding a sequence one token at a time must give the logits a prefill of the whole
sequence gives). The GPU tests (tests/gpu/test_decode.py) run fullpipe's Decoder."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe.models import StackConfig
from fullpipe.models.decode import split_layer_groups, split_rows, state_buffers, step_buffers
from fullpipe.models.kv_cache import PagedKVCache, page_bytes

TINY = StackConfig(layers=2, width=256, heads=4, kv_heads=2, head_dim=64, ffn_width=512, vocab=1000, max_context=64)


class FakePool:
    """allocate_ptr / free_ptr with distinct fake addresses; remembers what is live."""

    def __init__(self):
        self.live: dict[int, int] = {}
        self.next = 1 << 20
        self.streams: list = []

    def allocate_ptr(self, nbytes, stream):
        ptr = self.next
        self.next += nbytes + 4096
        self.live[ptr] = nbytes
        self.streams.append(stream)
        return ptr

    def free_ptr(self, ptr, stream):
        assert ptr in self.live, f"free of {ptr:#x}, which is not live"
        del self.live[ptr]


# --------------------------------------------------------------------------- the paged cache
def test_page_bytes_by_hand():
    # 2 layers x (K, V) x 2 K/V heads x 64 slots x 64 dims x 2 bytes
    assert page_bytes(TINY, 64) == 2 * 2 * 2 * 64 * 64 * 2


def test_cache_takes_pages_as_sequences_grow_and_gives_every_one_back():
    pytest.importorskip("torch")
    pool = FakePool()
    cache = PagedKVCache(TINY, 3, pool=pool, page_tokens=16, device="cpu", capacity=50)
    assert cache.max_pages == 4  # ceil(50 / 16)
    assert cache.reserve([1, 16, 17], "s") == 1 + 1 + 2
    assert [cache.slots(b) for b in range(3)] == [16, 16, 32]
    assert cache.reserve([16, 16, 32], "s") == 0  # nothing new: no allocation
    assert cache.reserve([17, 16, 33], "s") == 2
    table = cache.page_table.numpy()
    # each sequence's pages in order, distinct, the rest 0
    held = [int(p) for p in table.ravel() if p]
    assert len(held) == len(set(held)) == cache.pages_held == 6 == len(pool.live)
    assert list(table[1, 1:]) == [0, 0, 0] and table[2, 2] != 0 and table[2, 3] == 0
    assert cache.held_bytes == 6 * page_bytes(TINY, 16)
    assert cache.preallocated_bytes == 3 * 50 * TINY.kv_bytes_per_token
    cache.set_lengths([17, 5, 33])
    assert list(cache.seq_lens.numpy()) == [17, 5, 33]
    with pytest.raises(ValueError, match="sequence 1: length 17"):
        cache.set_lengths([1, 17, 1])
    cache.release("s")
    assert pool.live == {} and cache.pages_held == 0
    cache.release("s")  # twice is harmless
    with pytest.raises(RuntimeError, match="released"):
        cache.reserve([1, 1, 1], "s")


def test_cache_refuses_past_its_capacity_before_taking_any_page():
    pytest.importorskip("torch")
    pool = FakePool()
    cache = PagedKVCache(TINY, 2, pool=pool, page_tokens=16, device="cpu", capacity=40)
    with pytest.raises(ValueError, match="sequence 1 would hold 41 tokens"):
        cache.reserve([3, 41], "s")
    assert pool.live == {}
    with pytest.raises(ValueError, match="one entry per sequence"):
        cache.reserve([3], "s")


@pytest.mark.parametrize("kw, word", [(dict(sequences=0), "sequences"), (dict(page_tokens=48), "page_tokens"),
                                      (dict(capacity=65), "capacity")])
def test_cache_refuses_bad_arguments_by_name(kw, word):
    pytest.importorskip("torch")
    args = dict(sequences=2, pool=FakePool(), device="cpu")
    args.update(kw)
    sequences = args.pop("sequences")
    with pytest.raises(ValueError, match=word):
        PagedKVCache(TINY, sequences, **args)


# --------------------------------------------------------------------------- buffers and cuts
def test_step_buffers_are_aligned_disjoint_and_sized_by_hand():
    regions, nbytes = step_buffers(TINY, 3, workspace_bytes=1000)
    spans = sorted((r.offset, r.offset + r.nbytes) for r in regions)
    assert all(a % 256 == 0 for a, _ in spans)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
    assert spans[-1][1] <= nbytes
    by = {r.name: r.nbytes for r in regions}
    # qkv: 3 rows x (4 + 2 + 2) heads x 64 x 2 bytes; gate/up 3 x 1024 x 2; logits 3 x 1000 x 2
    assert (by["qkv"], by["gate_up"], by["logits"], by["workspace"]) == (3 * 512 * 2, 3 * 1024 * 2, 6000, 1000)
    state, _ = state_buffers(TINY, 3)
    assert {r.name: r.nbytes for r in state} == {"tokens": 24, "positions": 12, "seq_ids": 12}


def test_rows_and_layers_cut_evenly():
    assert [len(r) for r in split_rows(7, 2)] == [3, 4]
    assert split_rows(8, 1) == [range(0, 8)]
    assert split_layer_groups(12, 2) == [range(0, 6), range(6, 12)]
    assert split_layer_groups(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    with pytest.raises(ValueError):
        split_rows(2, 3)
    with pytest.raises(ValueError):
        split_layer_groups(2, 3)


# --------------------------------------------------------------------------- the PyTorch peers
def _prompts(rng, lengths):
    return [rng.integers(0, TINY.vocab, n).astype(np.int32) for n in lengths]


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_torch_decode_matches_a_prefill_of_the_whole_sequence(cache):
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights, reference_prefill
    from fullpipe.models.torch_decode import TorchDecoder

    w = init_weights(TINY, seed=1)
    rng = np.random.default_rng(0)
    prompts = _prompts(rng, [5, 1, 12])
    steps = 4
    forced = rng.integers(0, TINY.vocab, (3, steps))
    peer = TorchDecoder(TINY, w, prompts, capacity=12 + steps + 1, cache=cache, dtype=torch.float32)
    want0 = reference_prefill(TINY, w, prompts, dtype=torch.float32)
    torch.testing.assert_close(peer.prefill_logits, want0, rtol=1e-4, atol=1e-4)
    for t in range(steps):
        got = peer.step(torch.as_tensor(forced[:, t]))
        seqs = [np.concatenate([p, forced[b, :t + 1]]).astype(np.int32) for b, p in enumerate(prompts)]
        want = reference_prefill(TINY, w, seqs, dtype=torch.float32)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert list(peer.positions) == [5 + steps, 1 + steps, 12 + steps]


def test_static_peer_refuses_past_its_capacity():
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights
    from fullpipe.models.torch_decode import TorchDecoder

    w = init_weights(TINY, seed=1)
    peer = TorchDecoder(TINY, w, [np.arange(3, dtype=np.int32)], capacity=5, cache="static")
    t = torch.zeros(1, dtype=torch.int64)
    peer.step(t)
    peer.step(t)
    with pytest.raises(ValueError, match="capacity of 5"):
        peer.step(t)
    with pytest.raises(ValueError, match="compile=True needs cache='static'"):
        TorchDecoder(TINY, w, [np.arange(3, dtype=np.int32)], capacity=5, compile=True)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_restarted_peer_decodes_again_from_its_prefill(cache):
    torch = pytest.importorskip("torch")
    from fullpipe.models import init_weights
    from fullpipe.models.torch_decode import TorchDecoder

    w = init_weights(TINY, seed=2)
    prompts = _prompts(np.random.default_rng(5), [4, 9])
    peer = TorchDecoder(TINY, w, prompts, capacity=16, cache=cache, dtype=torch.float32)
    feed = torch.tensor([[3, 7, 1], [5, 5, 2]])
    first = [peer.step(feed[:, t]) for t in range(3)]
    peer.restart()
    again = [peer.step(feed[:, t]) for t in range(3)]
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
