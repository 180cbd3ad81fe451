"""GPU tests: batches of several arrays (pipeline/records.py) through StreamPipeline with
its defaults, against the naive loop (each array ``.cuda()``, ``f``, ``.cpu()``):
token ids with a padding mask through a transformer encoder (run_batches, imap, three
compute threads), a DataLoader's [images, labels] (pageable, and pinned: copied where they
are), a dict of bfloat16, int64 and bool fields cut into chunks by run() (padded, and with
staging="direct"), a pinned one-field tuple (kept in place), a CuPy function, graph=True
with two layouts of one row size.

Fresh random inputs; every field's values reach ``f`` exactly (checked bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe import StreamPipeline

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.fixture(scope="module", autouse=True)
def _torch_cuda(device):
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    torch.manual_seed(0)


def padded_requests(n, seed, vocab=1000):
    """Batches of requests padded to the batch's longest: (ids int64 (B, L), padding mask
    bool (B, L), True where padded); B and L differ from batch to batch."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b, seq = int(rng.integers(1, 24)), int(rng.choice([16, 40, 128]))
        lengths = torch.from_numpy(rng.integers(1, seq + 1, b))
        pad = torch.arange(seq)[None, :] >= lengths[:, None]
        out.append((torch.randint(0, vocab, (b, seq), generator=g), pad))
    return out


def encoder(vocab=1000, d=128):
    with torch.device("cuda"):
        emb = nn.Embedding(vocab, d)
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 256, dropout=0.0, batch_first=True), 2)
    emb.eval(), enc.eval()

    @torch.inference_mode()
    def f(batch):  # (ids, pad) -> the mean of each request's own tokens, float32 (B, d)
        ids, pad = batch
        h = enc(emb(ids), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return (h * keep).sum(1) / keep.sum(1)
    return f


def naive(f, batches):
    out = []
    for b in batches:
        on_gpu = {k: v.cuda() for k, v in b.items()} if isinstance(b, dict) else type(b)(v.cuda() for v in b)
        out.append(f(on_gpu).cpu())
    return out


@pytest.mark.parametrize("threads", [1, 3])
def test_padded_requests_through_an_encoder(threads):
    f = encoder()
    reqs = padded_requests(48, seed=1)
    want = naive(f, reqs)
    pipe = StreamPipeline(f, streams=3, compute_threads=threads)
    for _ in range(2):
        got = pipe.run_batches(reqs)
        assert all(isinstance(y, torch.Tensor) and y.device.type == "cpu" for y in got)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    got = list(pipe.imap(iter(reqs), window=10))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert pipe.resources()["pool_used_bytes"] == 0


@pytest.mark.parametrize("pad, staging", [("auto", "auto"), (True, "auto"), (True, "direct")])
def test_every_field_reaches_f_exactly_in_its_dtype_and_shape(pad, staging):
    """A dict of bfloat16 (B, 3, 5), int64 (B,) and bool (B, 7) fields (9.6 MB: gathered by
    the staging copy, or with staging="direct" filled on the host first), cut by run() into
    chunks, the last one padded with copies of each field's rows (pad_shapes=True): f
    returns all of them side by side as float64, compared bit for bit."""
    rows = 200_000
    x = {"a": torch.randn(rows, 3, 5).to(torch.bfloat16), "n": torch.randint(-2**40, 2**40, (rows,)),
         "m": torch.rand(rows, 7) < 0.5}
    seen = []

    def f(b):
        seen.append({k: (v.dtype, tuple(v.shape[1:]), v.is_contiguous()) for k, v in b.items()})
        return torch.cat([b["a"].double().flatten(1), b["n"].double()[:, None], b["m"].double()], dim=1)

    pipe = StreamPipeline(f, streams=3, chunk="1MiB", pad_shapes=pad, staging=staging)
    y = pipe.run(x)
    want = torch.cat([x["a"].double().flatten(1), x["n"].double()[:, None], x["m"].double()], dim=1)
    assert torch.equal(y, want) and pipe.stats.batches > 3
    assert (pipe.stats.staging["input"] == "direct") == (staging == "direct")  # (else bulk: 1 MiB chunks)
    if pad is True:
        assert pipe.stats.padded["rows"] == pipe.stats.chunk["rows"] - rows % pipe.stats.chunk["rows"]
    assert seen[0] == {"a": (torch.bfloat16, (3, 5), True), "n": (torch.int64, (), True),
                       "m": (torch.bool, (7,), True)}


def test_a_loaders_images_and_labels():
    """A DataLoader of (image, label) samples yields [uint8 images, int64 labels]; f uses
    both (the loss of a small convnet per image)."""
    from torch.utils.data import DataLoader, TensorDataset

    imgs = torch.randint(0, 256, (600, 3, 32, 32), dtype=torch.uint8)
    labels = torch.randint(0, 10, (600,))
    with torch.device("cuda"):
        net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            nn.Linear(16, 10)).eval()

    @torch.inference_mode()
    def f(batch):
        x, y = batch
        return nn.functional.cross_entropy(net(x.float() / 255), y, reduction="none")

    loader = DataLoader(TensorDataset(imgs, labels), batch_size=64)
    want = torch.cat(naive(f, list(loader)))
    got = torch.cat(list(StreamPipeline(f, streams=2).imap(loader)))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_pinned_loaders_batches_go_to_the_gpu_where_they_are():
    """A DataLoader with pin_memory=True yields pinned [images, labels]: each batch's H2D
    reads both fields where they are (staging "direct", no host copy), in imap as in
    run_batches; the outputs are right and pinned as the inputs were."""
    from torch.utils.data import DataLoader, TensorDataset

    imgs = torch.randint(0, 256, (2000, 3, 16, 16), dtype=torch.uint8)
    labels = torch.randint(0, 10, (2000,))
    loader = DataLoader(TensorDataset(imgs, labels), batch_size=100, pin_memory=True)

    def f(batch):
        x, y = batch
        return x.float().mean((1, 2, 3)) + y

    want = imgs.float().mean((1, 2, 3)) + labels
    pipe = StreamPipeline(f, streams=3)
    got = list(pipe.imap(loader))  # (its windows are short lists of small batches: some go plainly)
    torch.testing.assert_close(torch.cat(got), want)
    batches = list(loader)
    assert all(x.is_pinned() and y.is_pinned() for x, y in batches)
    got = pipe.run_batches(batches)
    torch.testing.assert_close(torch.cat(got), want)
    assert pipe.stats.staging["input"] == "direct" and all(y.is_pinned() for y in got)


def test_a_pinned_one_field_tuple_is_not_copied():
    x = torch.randn(32768, 256).pin_memory()  # (32 MiB: cut into chunks, not run plainly)
    pipe = StreamPipeline(lambda b: b[0] * 2, streams=2)
    y = pipe.run((x,))
    assert torch.equal(y, x * 2) and y.is_pinned()  # (a pinned input's output is pinned: x itself went)
    assert pipe.stats.staging["input"] == "direct"


def test_a_cupy_function_of_two_arrays():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(4)
    batches = [(rng.random((int(r), 64), dtype=np.float32), rng.integers(0, 64, int(r)))
               for r in rng.integers(10, 500, 30)]

    def pick(b):  # row i: x[i, k[i]] * 3
        x, k = b
        return x[cp.arange(x.shape[0]), k] * 3

    got = StreamPipeline(pick, form="cupy", streams=3).run_batches(batches)
    for (x, k), y in zip(batches, got):
        np.testing.assert_array_equal(y, x[np.arange(len(x)), k] * 3)
    x, k = rng.random((100_000, 32), dtype=np.float32), rng.integers(0, 32, 100_000)  # (13 MB, chunks, padded)
    pipe = StreamPipeline(pick, form="cupy", streams=3, chunk=30_000, pad_shapes=True)
    np.testing.assert_array_equal(pipe.run((x, k)), x[np.arange(len(x)), k] * 3)
    assert pipe.stats.padded["rows"] == 20_000


def test_a_namedtuple_of_sliced_tensors():
    """Fields that are slices of wider tensors (not contiguous: copied while packed) in a
    namedtuple, which f gets back as itself."""
    import collections

    Pair = collections.namedtuple("Pair", "x w")
    wide = torch.randn(30, 5000, 16)
    batches = [Pair(wide[i, :, :8], wide[i, :, 8:]) for i in range(30)]

    def f(b):
        assert isinstance(b, Pair) and b.x.is_contiguous()
        return (b.x * b.w).sum(1)

    got = StreamPipeline(f, streams=3).run_batches(batches)
    for b, y in zip(batches, got):
        torch.testing.assert_close(y, (b.x * b.w).sum(1))


def test_graphs_of_records_one_per_layout():
    """graph=True: a batch of several arrays replays a PyTorch graph per lane, shape and
    layout. Batches A and B have the same bytes per row (128) with fields of other shapes
    at other offsets: replaying A's graph on B's bytes would read them wrong."""
    torch.manual_seed(6)

    def a(rows):
        return (torch.randn(rows, 24), torch.randint(-9, 9, (rows, 4)))  # 96 + 32 bytes a row

    def b(rows):
        return (torch.randn(rows, 16), torch.randint(-9, 9, (rows, 8)))  # 64 + 64

    batches = [(a if i % 2 else b)(64) for i in range(12)] + [a(32), b(32)]

    def f(batch):
        x, k = batch
        return x.sum(1) * 2 + k.float().sum(1)

    pipe = StreamPipeline(f, streams=3, graph=True)
    for _ in range(2):
        got = pipe.run_batches(batches)
        for (x, k), y in zip(batches, got):
            torch.testing.assert_close(y, x.sum(1) * 2 + k.float().sum(1))
    g = pipe.stats.graph
    assert g["launches"] == len(batches) and g["captures"] == 0 and g["graphs"] >= 4
