"""GPU tests of decode attention over a paged KV cache (kernels/decode_attention): pages
allocated one by one and listed out of order, ragged lengths around page and split
boundaries, grouped K/V heads, d64/d128, bf16/fp16, against float32 attention over the
same K and V gathered to dense; outputs poisoned first. kv_write round trip; a captured
CUDA graph stays right while the lengths and pages change on the device.

Tolerance: the kernel computes in float32 from the bf16/fp16 cache and rounds once at the
end, so it is held to what PyTorch's own SDPA in the same dtype gets against the same
float32 reference (twice that, plus one rounding of the output)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ._torch import needs_torch, torch

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)

LAYERS = 3


class Cache:
    """Pages from torch, one allocation each, listed in a shuffled order."""

    def __init__(self, lengths, kv_heads, d, p, dtype, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.p, self.kv_heads, self.d, self.dtype = p, kv_heads, d, dtype
        self.max_pages = max(-(-n // p) for n in lengths) + 1
        self.pages = []
        table = np.zeros((len(lengths), self.max_pages), dtype=np.int64)
        slots = [(b, j) for b, n in enumerate(lengths) for j in range(-(-n // p))]
        order = np.random.default_rng(seed).permutation(len(slots))
        for i in order:
            b, j = slots[i]
            page = torch.randn(LAYERS, 2, kv_heads, p, d, generator=g, device="cuda").to(dtype)
            self.pages.append(page)
            table[b, j] = page.data_ptr()
        self.table = torch.as_tensor(table, device="cuda")
        self.lengths = lengths
        self.by_slot = {slots[i]: self.pages[k] for k, i in enumerate(order)}

    def dense(self, layer, b):
        """K and V of sequence b in layer ``layer``: [kv_heads, n, d] each."""
        n = self.lengths[b]
        pages = [self.by_slot[(b, j)][layer] for j in range(-(-n // self.p))]
        kv = torch.cat(pages, dim=2)[:, :, :n]  # [2, kv_heads, n, d]
        return kv[0], kv[1]


def _reference(q, cache, layer):
    """float32 attention of each sequence's one query token over its cached tokens."""
    B, H, d = q.shape
    rep = H // cache.kv_heads
    out = torch.empty(B, H, d, device="cuda")
    for b in range(B):
        k, v = cache.dense(layer, b)
        k, v = k.float().repeat_interleave(rep, 0), v.float().repeat_interleave(rep, 0)
        s = torch.einsum("hd,hnd->hn", q[b].float(), k) / math.sqrt(d)
        out[b] = torch.einsum("hn,hnd->hd", s.softmax(-1), v)
    return out


def _sdpa_error(q, cache, layer, ref):
    """The error of PyTorch's SDPA in q's dtype against the same reference."""
    B, H, d = q.shape
    rep = H // cache.kv_heads
    errs = []
    for b in range(B):
        k, v = cache.dense(layer, b)
        o = torch.nn.functional.scaled_dot_product_attention(
            q[b][:, None], k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0))[:, 0]
        errs.append((o.float() - ref[b]).abs().max())
    return float(torch.stack(errs).max())


def _run(q, cache, layer, lengths, p, *, split=None, sms=132):
    from fullpipe.kernels import decode_attention as da

    B, H, d = q.shape
    capacity = cache.max_pages * p
    split_tokens, max_splits = da.plan_decode(B, H, cache.kv_heads, capacity, p, sms)
    if split is not None:
        split_tokens, max_splits = split, -(-capacity // split)
    partial = torch.full((da.decode_workspace_bytes(B, H, d, max_splits),), 0xFF, dtype=torch.uint8, device="cuda")
    out = torch.full_like(q, float("nan"))
    seq_lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    da.decode_attention(q, out, cache.table, seq_lens, layer, LAYERS, p, kv_heads=cache.kv_heads,
                        split_tokens=split_tokens, partial=partial)
    return out


CASES = [  # (lengths, heads, kv_heads, d, page_tokens)
    ([1, 63, 64, 65, 200, 2050], 16, 16, 128, 64),
    ([3, 129, 700, 1], 32, 8, 128, 16),
    ([77, 1024, 5], 8, 1, 64, 64),
    ([300, 2, 4096 - 1], 12, 4, 64, 256),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16] if torch else [])
@pytest.mark.parametrize("case", CASES)
def test_decode_attention_matches_float32(case, dtype):
    lengths, H, kvh, d, p = case
    cache = Cache(lengths, kvh, d, p, dtype, seed=len(lengths))
    q = torch.randn(len(lengths), H, d, device="cuda").to(dtype)
    for layer in (0, LAYERS - 1):
        ref = _reference(q, cache, layer)
        tol = 2 * _sdpa_error(q, cache, layer, ref) + float(ref.abs().max()) * (2**-8 if dtype == torch.bfloat16
                                                                                    else 2**-11)
        for split in (None, p, 4 * p):  # the plan's split, one page, several pages
            out = _run(q, cache, layer, lengths, p, split=split)
            torch.cuda.synchronize()
            assert not torch.isnan(out).any()
            err = float((out.float() - ref).abs().max())
            assert err <= tol, f"layer {layer} split {split}: {err:.3e} > {tol:.3e}"


def test_large_scores_do_not_overflow():
    cache = Cache([500, 33], 2, 128, 64, torch.bfloat16, seed=3)
    for page in cache.pages:
        page.mul_(30)  # scores of several thousand
    q = (30 * torch.randn(2, 4, 128, device="cuda")).to(torch.bfloat16)
    ref = _reference(q, cache, 1)
    out = _run(q, cache, 1, [500, 33], 64, split=64)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    rel = float((out.float() - ref).norm() / ref.norm())
    assert rel < 2e-2


def test_kv_write_round_trip_leaves_other_slots_alone():
    from fullpipe.kernels import decode_attention as da

    p, kvh, d = 16, 2, 64
    cache = Cache([40, 20], kvh, d, p, torch.bfloat16, seed=4)
    before = [page.clone() for page in cache.pages]
    T = 7
    seq_ids = torch.tensor([0, 1, 0, 0, 1, 1, 0], dtype=torch.int32, device="cuda")
    positions = torch.tensor([0, 19, 15, 16, 3, 4, 39], dtype=torch.int32, device="cuda")
    k = torch.randn(T, kvh, d, device="cuda").to(torch.bfloat16)
    v = torch.randn(T, kvh, d, device="cuda").to(torch.bfloat16)
    da.kv_write(k, v, cache.table, seq_ids, positions, 2, LAYERS, p)
    torch.cuda.synchronize()
    written = set()
    for t in range(T):
        b, pos = int(seq_ids[t]), int(positions[t])
        page = cache.by_slot[(b, pos // p)]
        assert torch.equal(page[2, 0, :, pos % p], k[t]) and torch.equal(page[2, 1, :, pos % p], v[t])
        written.add((page.data_ptr(), pos % p))
    for page, old in zip(cache.pages, before):  # every other slot and layer unchanged
        for slot in range(p):
            if (page.data_ptr(), slot) not in written:
                assert torch.equal(page[:, :, :, slot], old[:, :, :, slot])
        assert torch.equal(page[:2], old[:2])


def test_a_captured_launch_follows_lengths_and_pages_on_the_device():
    from fullpipe.kernels import decode_attention as da

    p, H, kvh, d = 64, 8, 4, 128
    lengths = [100, 300]
    cache = Cache([640, 640], kvh, d, p, torch.bfloat16, seed=5)  # pages for 640 tokens each
    q = torch.randn(2, H, d, device="cuda").to(torch.bfloat16)
    split_tokens, max_splits = da.plan_decode(2, H, kvh, cache.max_pages * p, p, 132)
    partial = torch.empty(da.decode_workspace_bytes(2, H, d, max_splits), dtype=torch.uint8, device="cuda")
    out = torch.empty_like(q)
    seq_lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        da.decode_attention(q, out, cache.table, seq_lens, 1, LAYERS, p, kv_heads=kvh, split_tokens=split_tokens,
                            partial=partial)  # warm-up outside the capture
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        da.decode_attention(q, out, cache.table, seq_lens, 1, LAYERS, p, kv_heads=kvh, split_tokens=split_tokens,
                            partial=partial)
    for lens in ([100, 300], [101, 640], [1, 64]):
        seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        cache.lengths = lens
        g.replay()
        torch.cuda.synchronize()
        ref = _reference(q, cache, 1)
        assert float((out.float() - ref).abs().max()) < 2e-2 * float(ref.abs().max()) + 1e-2, lens
    # swap two pages of sequence 0 in the table (and in the reference): the replay reads the new order
    t = cache.table[0].clone()
    cache.table[0, 0], cache.table[0, 1] = t[1], t[0]
    cache.by_slot[(0, 0)], cache.by_slot[(0, 1)] = cache.by_slot[(0, 1)], cache.by_slot[(0, 0)]
    cache.lengths = [1, 64]
    g.replay()
    torch.cuda.synchronize()
    ref = _reference(q, cache, 1)
    assert float((out.float() - ref).abs().max()) < 2e-2 * float(ref.abs().max()) + 1e-2
