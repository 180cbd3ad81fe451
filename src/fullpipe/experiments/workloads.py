"""workloads: do real PyTorch models run through StreamPipeline, with its defaults, at their
bound and ahead of what a user would write instead?

Three workloads, all in one run on one GPU, each a plain tensor function ``y = f(x)``
handed to ``StreamPipeline(f, streams=3, chunk="auto", pool=pool)``:

- copy-heavy: a bf16 MLP (Linear 1024→4096, GELU, Linear 4096→1024) over 1 GiB of
  pageable float32 rows in and 1 GiB out (256 MiB with --quick), ``pipe.run(x, out=y)``;
- compute-bound: a torchvision resnet50 (random weights, fp16, channels_last) over 4096
  pageable uint8 224×224×3 images (1024 with --quick; random noise, each image with its
  own colour and contrast); the uint8 → fp16 conversion and the normalization run on the
  GPU inside ``f``; float32 logits out;
- variable-length: ``pipe.run_batches`` over batches of random size (2k-16k tokens of
  64-512-token sequences, ~1M tokens in all, ~256k with --quick) of int32 token ids
  through an embedding and one ``torch.nn.TransformerEncoderLayer`` (d_model 1024, 16
  heads, FFN 4096, bf16), mean-pooled to one float32 vector per sequence.

Peers, each over the same pageable host data into the same preallocated pageable output,
timed by the host's clock from the first batch to the last output in host memory:

- naive loop: per batch ``y = f(x.cuda())`` and the result copied into the output (what
  ``.cpu()`` does, without its temporary): every copy and the host wait for each batch;
- hand-written pipeline: 4 pinned staging buffers each way, 3 streams, ``non_blocking``
  copies, events; one host thread stages, enqueues and drains in order;
- DataLoader: ``torch.utils.data.DataLoader(batch_size=None, pin_memory=True,
  num_workers=4)`` over the batches (a fresh iterator per run, so its workers' start is
  timed), ``non_blocking`` H2D and D2H (into pinned memory), outputs copied out two
  batches behind;
- fullpipe with its defaults; also ``y = pipe.run(x)`` with a new output each run, and a
  small sweep of fixed chunks against ``chunk="auto"``.

Compute alone, the peers and fullpipe are timed in alternating rounds (each once per
round, in the orders of a balanced Latin square; at least 3 rounds, up to a whole square
where rounds are cheap; the median of the rounds): a host's speed can drift by more than
the differences measured, and a compute whose Python launches take as long as its kernels
runs at the host's speed. Peers use 32 (copy-heavy)
or 16 (compute-bound) equal batches. Bounds measured in this run: compute alone (``f``
over device-resident batches back to back on one stream, waited for; at the peers'
batches and at the chunk fullpipe's timed runs use, the faster); the pinned copy peak
H2D, D2H and both at once; the host's memmove pageable ↔ pinned with the staging ring's own
threads, one direction and both at once. Every output is first checked against the naive
loop's: the output poisoned with NaN first, then each row within 5 % of the reference
row's norm (bf16 / fp16 results differ by well under 1 % between batch sizes; a row not
written is NaN, another row's result is off by 20-140 %).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import random
import time
from pathlib import Path
from typing import Any, Callable

from ..cuda.device import device_info
from ..cuda.pin_cache import default_pin_cache
from ..cuda.pool import DevicePool
from ..cuda.timing import median
from ..pipeline import StreamPipeline
from .claims import UNJUDGED, Data, Judged, Missing, at_least, is_num, rule, times, with_claims
from .measure import timed_rounds
from .figures import (BOUND, GREY, PAGEABLE, PINNED, PLAIN, RING, WIDE, label_bars, need, plain_log, pyplot,
                      rows_of, save)
from .result import Bound, Result

NAME = "workloads"
TITLE = "Real PyTorch workloads through StreamPipeline with its defaults, against the peers"
CLAIM = ("With its defaults (a plain tensor function, 3 streams, chunk='auto'), fullpipe runs real PyTorch "
         "workloads at their bound: a compute-bound convnet and variable-length transformer batches at ≥ 0.95× "
         "compute alone, a copy-heavy MLP at ≥ 0.9× the host's copy bound each way; and it beats the naive loop, "
         "a hand-written 3-stream pipeline and a DataLoader on every workload (≥ 2× the best on the pageable "
         "copy-heavy one)")
PRELOAD = ("torch", "torchvision")  # imported ahead while the previous experiment runs (report/worker.py)
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "A model applied to data that lives in host memory has three stages per batch: copy in, compute, copy "
    "out, plus the host's own work (staging pageable memory, launching kernels). Run one after another, "
    "every stage waits for the others. A pipeline overlaps them: while batch i computes, batch i+1 is "
    "staged and uploaded and batch i-1 downloaded, so the slowest stage alone sets the pace: the compute "
    "for a big model, the host's memory copies for a small one. StreamPipeline does this for any tensor "
    "function, with pinned staging filled by CPU threads and a chunk size it picks itself."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): those CLAIM makes.
VERDICT_FROM = ("workload-copy-heavy", "workload-compute-bound", "workload-variable-length", "workload-vs-peers",
                "workload-copy-heavy-2x")

MiB = 1 << 20
WORKLOADS = ("copy-heavy", "compute-bound", "variable-length")
TARGETS = {"copy-heavy": 0.9, "compute-bound": 0.95, "variable-length": 0.95}
PEERS = ("naive loop", "hand-written pipeline", "DataLoader")
FULLPIPE = "fullpipe"
FULLPIPE_NEW_OUTPUT = "fullpipe, y = pipe.run(x)"
# the host-bound workload also with its compute's calls forced onto 3 host threads (the defaults
# measure threads for a long list whose calls set the pace, and keep them unless slower:
# pipeline/list_paths.py)
FULLPIPE_THREADS = "fullpipe, compute_threads=3"
THREADS_VARIANT_FOR = ("variable-length",)
STREAMS = 3
LIST_TRIAL_MAX_RUNS = 10  # untimed runs at most, for a long list's trial of its ways to end
ROW_TOLERANCE = 0.05  # |row - reference row| / |reference row|
# copy-heavy
MLP_DIM, MLP_HIDDEN = 1024, 4096
COPY_PEER_BATCHES = 32
# compute-bound
CONVNET = "resnet50"
IMAGE_SHAPE = (224, 224, 3)  # HWC uint8, as images are stored
IMAGE_PEER_BATCHES = 16
# variable-length
VOCAB, D_MODEL, HEADS, D_FF = 32000, 1024, 16, 4096
SEQ_LENS = (64, 128, 256, 512)
TOKENS_PER_BATCH = (2048, 16384)
# the chunk sweep against chunk="auto" (run() workloads)
SWEEP = {"copy-heavy": ("8MiB", "16MiB", "32MiB", "64MiB"), "compute-bound": ("16MiB", "32MiB", "64MiB")}
HAND_SLOTS = 4
DATALOADER_WORKERS = 4
DATALOADER_TIMEOUT_S = 30  # a stuck worker raises instead of hanging the run


def _sizes(quick: bool) -> dict[str, int]:
    return {"copy_bytes": (256 if quick else 1024) * MiB, "images": 1024 if quick else 4096,
            "tokens": (256 if quick else 1024) * 1024, "peak_bytes": (128 if quick else 256) * MiB,
            "repeat": 3, "sweep_repeat": 3,
            # more rounds where they are cheap: up to a whole balanced square within this time
            "rounds_budget_s": 2.0 if quick else 5.0, "sweep_budget_s": 1.5 if quick else 4.0}


class _Mismatch(Exception):
    """An output differs from the naive loop's: nothing measured may be trusted."""


@dataclasses.dataclass
class _Workload:
    """One workload: the function, its host data as fullpipe takes it (``x`` and ``out``
    for run(); None: run_batches over ``xs``/``ys``), and the same cut into the peers'
    batches (views of ``x``/``out`` for run() workloads)."""

    name: str
    describe: str
    f: Callable[[Any], Any]
    xs: list
    ys: list
    x: Any = None
    out: Any = None
    items: int = 0
    item_name: str = "rows"

    @property
    def in_bytes(self) -> int:
        return sum(t.nbytes for t in self.xs)

    @property
    def out_bytes(self) -> int:
        return sum(t.nbytes for t in self.ys)

    @property
    def row_bytes(self) -> int:
        return self.xs[0].nbytes // self.xs[0].shape[0]

    def outputs(self) -> Any:
        """What fullpipe writes: ``out`` for run(), the list ``ys`` for run_batches."""
        return self.out if self.x is not None else self.ys


# --------------------------------------------------------------------------- workloads
def _no_grad(module: Any) -> Any:
    for p in module.parameters():
        p.requires_grad_(False)
    return module.eval()


def _copy_heavy(torch: Any, tdev: Any, nbytes: int, gen: Any) -> _Workload:
    rows = nbytes // (MLP_DIM * 4)
    with torch.device(tdev):
        mlp = _no_grad(torch.nn.Sequential(torch.nn.Linear(MLP_DIM, MLP_HIDDEN), torch.nn.GELU(),
                                           torch.nn.Linear(MLP_HIDDEN, MLP_DIM)).to(torch.bfloat16))

    def f(t):
        with torch.inference_mode():
            return mlp(t.to(torch.bfloat16)).float()

    x = torch.randn(rows, MLP_DIM, generator=gen)
    out = torch.empty_like(x)
    per = -(-rows // COPY_PEER_BATCHES)
    return _Workload("copy-heavy", f"bf16 MLP {MLP_DIM}→{MLP_HIDDEN}→{MLP_DIM} over {x.nbytes / 2**30:.2f} GiB of "
                     "pageable float32 rows, float32 out", f, list(x.split(per)), list(out.split(per)), x, out,
                     rows, "rows")


def _images(torch: Any, n: int, gen: Any, per: int = 256) -> Any:
    """n random uint8 HWC images, each with its own colour and contrast (uniform noise
    alone gives a random-weight resnet nearly the same logits for every image, too
    close together for the output check to see a misplaced image)."""
    x = torch.empty((n, *IMAGE_SHAPE), dtype=torch.uint8)
    for a in range(0, n, per):
        k = min(per, n - a)
        base = torch.randint(0, 256, (k, 1, 1, 3), dtype=torch.int16, generator=gen)
        amp = torch.randint(0, 129, (k, 1, 1, 1), dtype=torch.int16, generator=gen)
        noise = torch.randint(-128, 128, (k, *IMAGE_SHAPE), dtype=torch.int16, generator=gen)
        x[a:a + k] = noise.mul_(amp).div_(128, rounding_mode="floor").add_(base).clamp_(0, 255)
    return x


def _compute_bound(torch: Any, tv: Any, tdev: Any, n: int, gen: Any) -> _Workload:
    with torch.device(tdev):
        model = getattr(tv.models, CONVNET)(weights=None)
    model = _no_grad(model.to(tdev, memory_format=torch.channels_last).half())
    mean = torch.tensor([0.485, 0.456, 0.406], device=tdev).mul(255).view(1, 3, 1, 1).half()
    inv_std = torch.tensor([0.229, 0.224, 0.225], device=tdev).mul(255).reciprocal().view(1, 3, 1, 1).half()

    def f(t):  # t: (N, H, W, 3) uint8; permuted to NCHW it is channels_last already
        with torch.inference_mode():
            img = (t.permute(0, 3, 1, 2).half() - mean) * inv_std
            return model(img.contiguous(memory_format=torch.channels_last)).float()

    x = _images(torch, n, gen)
    out = torch.empty(n, 1000)
    per = -(-n // IMAGE_PEER_BATCHES)
    return _Workload("compute-bound", f"{CONVNET} fp16 channels_last, random weights, over {n} pageable uint8 "
                     f"{'×'.join(map(str, IMAGE_SHAPE))} images (normalized on the GPU), float32 logits out", f,
                     list(x.split(per)),
                     list(out.split(per)), x, out, n, "images")


def _variable_length(torch: Any, tdev: Any, total_tokens: int, gen: Any, seed: int) -> _Workload:
    with torch.device(tdev):
        emb = _no_grad(torch.nn.Embedding(VOCAB, D_MODEL, dtype=torch.bfloat16))
        layer = _no_grad(torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation="gelu",
                                                          batch_first=True, dtype=torch.bfloat16))

    def f(ids):  # (B, L) int32 token ids -> (B, D_MODEL) float32
        with torch.inference_mode():
            return layer(emb(ids)).float().mean(dim=1)

    rnd = random.Random(seed)
    xs, tokens = [], 0
    while tokens < total_tokens:
        seq = rnd.choice(SEQ_LENS)
        b = max(1, rnd.randint(*TOKENS_PER_BATCH) // seq)
        xs.append(torch.randint(0, VOCAB, (b, seq), dtype=torch.int32, generator=gen))
        tokens += b * seq
    ys = [torch.empty(t.shape[0], D_MODEL) for t in xs]
    return _Workload("variable-length", f"{len(xs)} batches of random size ({tokens} tokens in sequences of "
                     f"{'/'.join(map(str, SEQ_LENS))}) of int32 token ids through an embedding and one "
                     f"TransformerEncoderLayer (d {D_MODEL}, {HEADS} heads, FFN {D_FF}, bf16), mean-pooled, "
                     "float32 out", f, xs, ys, None, None, tokens, "tokens")


# --------------------------------------------------------------------------- peers
def _naive(torch: Any, tdev: Any, f: Callable, xs: list, ys: list, stream: Any) -> None:
    """Per batch: upload (pageable), compute, download into the output; each waits."""
    with torch.cuda.stream(stream):
        for xb, yb in zip(xs, ys):
            yb.copy_(f(xb.to(tdev)))


class _HandPipeline:
    """What a careful PyTorch user writes: ``slots`` pinned staging buffers each way, 3
    streams, non_blocking copies, events. One host thread, in order: copy batch i into
    its pinned slot once that slot's last H2D is done, enqueue H2D, compute and D2H on
    stream i % 3, and copy finished outputs out of their pinned slots (as soon as they
    are done, and at the latest when their slot is needed again)."""

    def __init__(self, torch: Any, tdev: Any, f: Callable, xs: list, ys: list, slots: int = HAND_SLOTS):
        self.torch, self.tdev, self.f = torch, tdev, f
        n_in, n_out = max(t.numel() for t in xs), max(t.numel() for t in ys)
        self.pin_in = [torch.empty(n_in, dtype=xs[0].dtype, pin_memory=True) for _ in range(slots)]
        self.pin_out = [torch.empty(n_out, dtype=ys[0].dtype, pin_memory=True) for _ in range(slots)]
        self.streams = [torch.cuda.Stream(tdev) for _ in range(STREAMS)]

    def __call__(self, xs: list, ys: list) -> None:
        torch, k_slots = self.torch, len(self.pin_in)
        h2d_done: list[Any] = [None] * k_slots
        pending: collections.deque = collections.deque()  # (event, pinned output, destination), in order

        def drain_one() -> None:
            ev, src, dst = pending.popleft()
            ev.synchronize()
            dst.copy_(src)

        for i, (xb, yb) in enumerate(zip(xs, ys)):
            k = i % k_slots
            while pending and pending[0][0].query():
                drain_one()
            if h2d_done[k] is not None:
                h2d_done[k].synchronize()
            px = self.pin_in[k][:xb.numel()].view(xb.shape)
            px.copy_(xb)
            while len(pending) >= k_slots:  # batch i - slots still holds this output slot
                drain_one()
            s = self.streams[i % len(self.streams)]
            with torch.cuda.stream(s):
                d = px.to(self.tdev, non_blocking=True)
                h2d_done[k] = torch.cuda.Event()
                h2d_done[k].record(s)
                y = self.f(d)
                py = self.pin_out[k][:yb.numel()].view(yb.shape)
                py.copy_(y, non_blocking=True)
                done = torch.cuda.Event()
                done.record(s)
            pending.append((done, py, yb))
        while pending:
            drain_one()


class _BatchList:
    """A map-style dataset of ready-made batches (DataLoader with batch_size=None)."""

    def __init__(self, xs: list):
        self.xs = xs

    def __len__(self) -> int:
        return len(self.xs)

    def __getitem__(self, i: int) -> Any:
        t = self.xs[i]
        # A view would take its whole base tensor along into shared memory when the worker sends it.
        return t.clone() if t.untyped_storage().nbytes() != t.nbytes else t


class _DataLoaderPeer:
    """DataLoader(pin_memory=True, num_workers=4, persistent_workers=True) over a
    workload's batches, made once and iterated once per call, with non_blocking copies
    both ways; each output is copied out of its pinned buffer ``lag`` batches later.

    Persistent workers, as a user running epochs would keep them: made per call, the
    four forked workers' start took 0.2-1.4 s of every round (session 15, quick report:
    the DataLoader peer was most of the workloads experiment's time) and their exit
    overlapped the next contender's timing."""

    def __init__(self, torch: Any, xs: list):
        self.loader = torch.utils.data.DataLoader(
            _BatchList(xs), batch_size=None, shuffle=False, num_workers=DATALOADER_WORKERS, pin_memory=True,
            persistent_workers=True, multiprocessing_context="fork", timeout=DATALOADER_TIMEOUT_S)

    def __call__(self, torch: Any, tdev: Any, f: Callable, ys: list, stream: Any, lag: int = 2) -> None:
        pending: collections.deque = collections.deque()  # (event, pinned output, destination), in order

        def drain_one() -> None:
            ev, src, dst = pending.popleft()
            ev.synchronize()
            dst.copy_(src)

        with torch.cuda.stream(stream):
            for i, xb in enumerate(self.loader):
                y = f(xb.to(tdev, non_blocking=True)).to("cpu", non_blocking=True)  # pinned, by torch
                ev = torch.cuda.Event()
                ev.record(stream)
                pending.append((ev, y, ys[i]))
                if len(pending) > lag:
                    drain_one()
            while pending:
                drain_one()

    def close(self) -> None:
        """Stop the workers (they would otherwise live until the loader is collected)."""
        shutdown = getattr(getattr(self.loader, "_iterator", None), "_shutdown_workers", None)
        if shutdown is not None:  # (a private method of PyTorch's; without it, at collection)
            shutdown()
        self.loader = None


# --------------------------------------------------------------------------- fullpipe


def _fullpipe(w: _Workload, pool: Any, dev: Any, chunk: str = "auto", compute_threads: int | str = "auto") -> Any:
    """fullpipe with its defaults: the plain tensor function, 3 streams, chunk='auto'."""
    return StreamPipeline(w.f, streams=STREAMS, chunk=chunk, pool=pool, device=dev, compute_threads=compute_threads)


def _fp_call(pipe: Any, w: _Workload, out: Any, x: Any = None) -> Any:
    """One fullpipe run of the workload into ``out`` (None: fullpipe makes the output);
    ``x``: fullpipe's own copy of the input array (see _measure)."""
    if w.x is not None:
        return pipe.run(w.x if x is None else x, out=out)
    return pipe.run_batches(w.xs, outs=out)


def _in_list_trial(pipe: Any) -> bool:
    """Was the pipeline's last run one of a long list's trial runs (list_paths.py)?"""
    list_path = getattr(getattr(pipe, "stats", None), "list_path", None)
    return bool(list_path) and "chosen" not in list_path


def _fp_stats(pipe: Any) -> dict[str, Any]:
    st = getattr(pipe, "stats", None)
    chunk = getattr(st, "chunk", None)
    host_us = getattr(st, "host_us", None)
    return {"enqueue_us": getattr(st, "enqueue_us_per_batch", None), "batches": getattr(st, "batches", None),
            "chunk": dict(chunk) if isinstance(chunk, dict) else None,
            "staging": dict(getattr(st, "staging", None) or {}),
            "host_us": dict(host_us) if isinstance(host_us, dict) else None,
            "list_path": dict(getattr(st, "list_path", None) or {}) or None,
            "in_place": dict((getattr(st, "pinned", None) or {}).get("in_place") or {}) or None}


# --------------------------------------------------------------------------- checking and timing
def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _poison(torch: Any, outs: Any) -> None:
    for t in _as_list(outs):
        t.fill_(float("nan"))


def _worst_row_error(torch: Any, got: Any, ref: Any, rows_per_step: int = 1 << 14) -> float:
    """Largest |row - reference row| / |reference row| over every row (inf for a NaN,
    a missing batch or a shape that differs)."""
    gs, rs = _as_list(got), _as_list(ref)
    if len(gs) != len(rs):
        return math.inf
    worst = 0.0
    for g, r in zip(gs, rs):
        g = torch.as_tensor(g)
        if tuple(g.shape) != tuple(r.shape):
            return math.inf
        g2, r2 = g.reshape(g.shape[0], -1), r.reshape(r.shape[0], -1)
        for a in range(0, r2.shape[0], rows_per_step):
            gg, rr = g2[a:a + rows_per_step].float(), r2[a:a + rows_per_step].float()
            err = torch.linalg.vector_norm(gg - rr, dim=1) / torch.linalg.vector_norm(rr, dim=1).clamp_min(1e-30)
            worst = max(worst, float(torch.nan_to_num(err, nan=math.inf).max()))
    return worst


def _all_finite(torch: Any, outs: Any) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in _as_list(outs))


def _wall_ms(fn: Callable[[], Any], repeat: int) -> tuple[float, list[float]]:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return median(ts), ts


def _compute_alone(torch: Any, tdev: Any, f: Callable, xs: list, stream: Any) -> Callable[[], None]:
    """The bound: ``f`` over the batches ``xs``, uploaded first, back to back on one
    stream, waited for. Returned as a contender (after one warm-up pass), timed in the
    same rounds as the peers and fullpipe: a compute whose Python launches take about
    as long as its kernels runs at the host's speed, and this host's speed drifts."""
    with torch.cuda.stream(stream):
        xs_dev = [t.to(tdev) for t in xs]
        for x in xs_dev:
            f(x)
    stream.synchronize()

    def run() -> None:
        with torch.cuda.stream(stream):
            for x in xs_dev:
                f(x)
        stream.synchronize()
    return run


def _time_together(torch: Any, tdev: Any, work: list[tuple[Any, Callable]], repeat: int) -> float:
    """Milliseconds from one start event until every stream in ``work`` is done (median)."""
    timing = torch.cuda.Stream(tdev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for it in range(1 + repeat):
        start.record(timing)
        for s, fn in work:
            s.wait_event(start)
            with torch.cuda.stream(s):
                fn()
        for s, _ in work:
            ev = torch.cuda.Event()
            ev.record(s)
            timing.wait_event(ev)
        end.record(timing)
        end.synchronize()
        if it:
            out.append(start.elapsed_time(end))
    return median(out)


def _bounds(torch: Any, tdev: Any, nbytes: int, repeat: int) -> dict[str, Any]:
    """The pinned copy peak (H2D, D2H, both at once) and the host's memmove bound
    (pageable ↔ pinned with the staging ring's threads), GB/s."""
    import numpy as np

    from .pinned import _host_memmove_bound

    pin_a = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).fill_(1)
    pin_b = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).fill_(2)
    dev_a = torch.empty(nbytes, dtype=torch.uint8, device=tdev)
    dev_b = torch.empty(nbytes, dtype=torch.uint8, device=tdev)
    s_in, s_out = torch.cuda.Stream(tdev), torch.cuda.Stream(tdev)
    h2d = (s_in, lambda: dev_a.copy_(pin_a, non_blocking=True))
    d2h = (s_out, lambda: pin_b.copy_(dev_b, non_blocking=True))
    ms = {k: _time_together(torch, tdev, w, repeat) for k, w in
          (("h2d", [h2d]), ("d2h", [d2h]), ("both_each_way", [h2d, d2h]))}
    peaks = {k: nbytes / (v * 1e6) for k, v in ms.items()}
    page_src = np.random.default_rng(5).integers(0, 256, nbytes, dtype=np.uint8)
    page_dst = np.ones(nbytes, np.uint8)  # touched: no first-touch faults inside the timing
    host = _host_memmove_bound(page_src, pin_a.numpy(), pin_b.numpy(), page_dst, nbytes, repeat)
    # The same bytes the way the hand-written peer moves them: torch's copy_ (all its
    # intra-op threads), pageable -> pinned, then pinned -> pageable. If this is faster
    # than the ring's threads, the host can do more than fullpipe's staging, and the
    # bound must say so (a peer beat the ring-thread bound on the H200).
    t_src, t_dst = torch.from_numpy(page_src), torch.from_numpy(page_dst)
    seq = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        pin_a.copy_(t_src)
        t_dst.copy_(pin_b)
        seq.append(time.perf_counter() - t0)
    torch_copy = {"threads": torch.get_num_threads(), "each_way_gbps": nbytes / median(seq) / 1e9}
    return {"pinned_peak": peaks, "host_memmove": host, "host_torch_copy": torch_copy, "bytes": nbytes}


def host_copy_rate(host_memmove: dict, host_torch_copy: dict | None) -> tuple[float, str]:
    """(GB/s each way, how) the host moved pageable <-> pinned bytes: the faster of the
    ring's threads with both directions at once and torch's copy_ one direction after
    the other."""
    ring = float(host_memmove["both_gbps_each_way"])
    text = f"ring's {host_memmove.get('threads', '?')} threads per direction, both at once {ring:.1f}"
    if not host_torch_copy:
        return ring, text
    seq = float(host_torch_copy["each_way_gbps"])
    text += f"; torch copy_ ({host_torch_copy.get('threads', '?')} threads), one way then the other {seq:.1f}"
    return max(ring, seq), text


# --------------------------------------------------------------------------- one workload
@dataclasses.dataclass
class _Env:
    torch: Any
    tdev: Any
    dev: Any
    pool: Any
    stream: Any
    repeat: int  # alternating rounds at least (more within rounds_budget_s)
    sweep_repeat: int
    rounds_budget_s: float
    sweep_budget_s: float
    copy_gbps: float  # min(host memmove, pinned peak) each way with both directions at once
    progress: Callable[[float, str], None]


def _row(w: _Workload, kind: str, what: str, ms: float, bound_ms: float | None, *, chunk_bytes: Any = None,
         enqueue_us: Any = None, error: Any = None) -> dict[str, Any]:
    return {"workload": w.name, "kind": kind, "what": what,
            "chunk_MiB": chunk_bytes / MiB if is_num(chunk_bytes) else None, "wall_ms": ms,
            "in_GB/s": w.in_bytes / (ms * 1e6), "items/s": w.items / (ms * 1e-3),
            "ratio_to_bound": bound_ms / ms if bound_ms else None, "enqueue_us": enqueue_us,
            "max_row_error": error}


def _measure(env: _Env, w: _Workload, lo: float, hi: float) -> tuple[dict, list[dict], list[str]]:
    """Check every peer and fullpipe against the naive loop, then time them and the bounds."""
    torch, tdev, stream, repeat = env.torch, env.tdev, env.stream, env.repeat
    step = [0]
    n_steps = 5 + repeat + len(SWEEP.get(w.name, ())) * 2

    def progress(msg: str) -> None:
        env.progress(lo + (hi - lo) * min(step[0], n_steps) / n_steps, f"{w.name}: {msg}")
        step[0] += 1

    notes: list[str] = []
    # ---- the reference: the naive loop
    progress("naive loop (the reference)")
    _poison(torch, w.ys)
    _naive(torch, tdev, w.f, w.xs, w.ys, stream)
    if not _all_finite(torch, w.ys):
        raise _Mismatch(f"{w.name}: the naive loop's output holds NaN or inf")
    ref = w.out.clone() if w.x is not None else [y.clone() for y in w.ys]
    errors: dict[str, float] = {}
    peer_errors: dict[str, str] = {}

    def check(label: str, got: Any) -> None:
        errors[label] = _worst_row_error(torch, got, ref)
        if not errors[label] <= ROW_TOLERANCE:
            raise _Mismatch(f"{w.name}: the output of {label} differs from the naive loop's: worst row error "
                            f"{errors[label]:.3g} (tolerance {ROW_TOLERANCE})")

    # ---- every output checked before anything is timed
    progress("hand-written pipeline: check")
    hand = _HandPipeline(torch, tdev, w.f, w.xs, w.ys)
    _poison(torch, w.ys)
    hand(w.xs, w.ys)
    check("hand-written pipeline", w.outputs())
    progress("DataLoader: check")
    _poison(torch, w.ys)
    loader: _DataLoaderPeer | None = None
    try:
        loader = _DataLoaderPeer(torch, w.xs)
        loader(torch, tdev, w.f, w.ys, stream)
        check("DataLoader", w.outputs())
    except _Mismatch:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a small /dev/shm: the peer is reported, not fatal
        if loader is not None:
            loader.close()
        peer_errors["DataLoader"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        notes.append(f"{w.name}: the DataLoader peer did not run: {peer_errors['DataLoader']}")
    progress("fullpipe: check (chunk='auto' tunes here)")
    # fullpipe gets its own copy of a one-array workload: with its defaults it pins a
    # pageable array in place (cuMemHostRegister) the second time it sees it, and the
    # peers' copies must stay pageable (the naive loop's .cuda() would otherwise copy
    # straight from pinned memory too)
    fx, fout = (w.x.clone(), torch.empty_like(w.out)) if w.x is not None else (None, w.outputs())
    pin_cache = default_pin_cache()
    registered_s = pin_cache.stats.register_s
    pipe = _fullpipe(w, env.pool, env.dev)
    with pipe, contextlib.ExitStack() as variants:
        _poison(torch, fout)
        _fp_call(pipe, w, fout, fx)
        check(FULLPIPE, fout)
        fresh = _fp_call(pipe, w, None, fx)
        check(FULLPIPE_NEW_OUTPUT, fresh)
        del fresh
        threaded = None
        if w.name in THREADS_VARIANT_FOR:
            threaded = variants.enter_context(_fullpipe(w, env.pool, env.dev, compute_threads=3))
            _poison(torch, fout)
            _fp_call(threaded, w, fout, fx)  # (its threads see every shape once here: their cuDNN plans)
            check(FULLPIPE_THREADS, fout)

        # fullpipe's calls once more, untimed: its output array is seen for the second time
        # here, so it is pinned in place now and the chunk for that staging is chosen now,
        # not inside a timed round (the peers ran in their checks)
        _fp_call(pipe, w, fout, fx)
        _fp_call(pipe, w, None, fx)
        # a long list of small batches: its first runs measure it plainly, pipelined and (where
        # its calls set the pace) on threads (pipeline/list_paths.py), a one-time cost as the chunk's tuning is: run here, untimed,
        # until the pipeline has chosen (the count is reported)
        list_trial_runs = 0
        while list_trial_runs < LIST_TRIAL_MAX_RUNS and _in_list_trial(pipe):
            _fp_call(pipe, w, fout, fx)
            list_trial_runs += 1
        list_path = _fp_stats(pipe)["list_path"]
        # ---- the bound: compute alone on device-resident data, cut as the peers cut it and
        # as fullpipe's timed runs do (the faster counts), timed in the rounds below
        progress("compute alone")
        alone = {"peer batches": _compute_alone(torch, tdev, w.f, w.xs, stream)}
        auto_rows = (_fp_stats(pipe)["chunk"] or {}).get("rows")
        if w.x is not None and is_num(auto_rows) and 0 < int(auto_rows) != w.xs[0].shape[0]:
            alone["fullpipe's chunk"] = _compute_alone(torch, tdev, w.f, list(w.x.split(int(auto_rows))), stream)
        # ---- the bound, the peers and fullpipe, in alternating rounds: this host's speed drifts by
        # up to 1.8x over seconds (an H100 host, session 10: the same two contenders ran
        # 125 ms each, then 70 ms each, a few seconds later), so each contender is timed
        # once per round, in turn, and the median of its rounds is taken
        contenders: list[tuple[str, Callable[[], Any]]] = [(f"compute alone ({k})", fn) for k, fn in alone.items()]
        contenders += [
            ("naive loop", lambda: _naive(torch, tdev, w.f, w.xs, w.ys, stream)),
            ("hand-written pipeline", lambda: hand(w.xs, w.ys))]
        if "DataLoader" not in peer_errors:
            contenders.append(("DataLoader", lambda: loader(torch, tdev, w.f, w.ys, stream)))  # type: ignore[misc]
        contenders += [(FULLPIPE, lambda: _fp_call(pipe, w, fout, fx)),
                       (FULLPIPE_NEW_OUTPUT, lambda: _fp_call(pipe, w, None, fx))]
        if threaded is not None:
            contenders.append((FULLPIPE_THREADS, lambda: _fp_call(threaded, w, fout, fx)))
        samples: dict[str, list[tuple[float, dict[str, Any]]]] = {label: [] for label, _ in contenders}
        for r, rounds, order in timed_rounds(contenders, repeat, env.rounds_budget_s):
            progress(f"timing, round {r + 1} of {rounds}")
            for label, fn in order:
                t0 = time.perf_counter()
                fn()
                ms = (time.perf_counter() - t0) * 1e3
                samples[label].append((ms, _fp_stats(threaded if label == FULLPIPE_THREADS else pipe)
                                       if label.startswith(FULLPIPE) else {}))

        def median_run(label: str) -> tuple[float, dict[str, Any]]:
            runs = sorted(samples[label], key=lambda t: t[0])
            return runs[len(runs) // 2]

        compute_ms = {k: median_run(f"compute alone ({k})")[0] for k in alone}
        del alone, contenders  # the device-resident copies
        if loader is not None and loader.loader is not None:
            loader.close()  # (its workers: not alive while the sweep below is timed)
        torch.cuda.empty_cache()
        compute_alone = min(compute_ms.values())
        copy_ms = max(w.in_bytes, w.out_bytes) / (env.copy_gbps * 1e6)
        bound_ms = compute_alone if w.name != "copy-heavy" else max(compute_alone, copy_ms)
        peers_ms: dict[str, float] = {label: median_run(label)[0] for label in PEERS if label in samples}
        rows: list[dict] = []
        for label in PEERS:
            if label in peers_ms:
                rows.append(_row(w, "peer", label, peers_ms[label], bound_ms, error=errors.get(label, 0.0)))
        fp_ms, fp_stats = median_run(FULLPIPE)
        chunk_bytes = (fp_stats["chunk"] or {}).get("bytes")
        rows.append(_row(w, "peer", FULLPIPE, fp_ms, bound_ms, chunk_bytes=chunk_bytes,
                         enqueue_us=fp_stats["enqueue_us"], error=errors[FULLPIPE]))
        new_ms, new_stats = median_run(FULLPIPE_NEW_OUTPUT)
        rows.append(_row(w, "fullpipe variant", FULLPIPE_NEW_OUTPUT, new_ms, bound_ms,
                         enqueue_us=new_stats["enqueue_us"], error=errors[FULLPIPE_NEW_OUTPUT]))
        threads_ms = threads_stats = None
        if threaded is not None:
            threads_ms, threads_stats = median_run(FULLPIPE_THREADS)
            rows.append(_row(w, "fullpipe variant", FULLPIPE_THREADS, threads_ms, bound_ms,
                             enqueue_us=threads_stats["enqueue_us"], error=errors[FULLPIPE_THREADS]))

        # ---- chunk="auto" against a small sweep of fixed chunks (each checked first), timed
        # in alternating rounds with the auto pipeline (the host's speed drifts: see above)
        sweep_ms: dict[str, float] = {}
        auto_in_sweep: list[float] = []
        chunks = list(SWEEP.get(w.name, ())) if w.x is not None else []
        with contextlib.ExitStack() as stack:
            sweep = {}
            for chunk in chunks:
                progress(f"fullpipe, chunk {chunk}: check")
                p = sweep[chunk] = stack.enter_context(_fullpipe(w, env.pool, env.dev, chunk=chunk))
                _poison(torch, fout)
                _fp_call(p, w, fout, fx)
                check(f"{FULLPIPE}, chunk {chunk}", fout)
            times_: dict[str, list[float]] = {chunk: [] for chunk in chunks}
            swept = [("auto", pipe), *sweep.items()]
            for r, rounds, order in timed_rounds(swept, env.sweep_repeat if chunks else 0, env.sweep_budget_s):
                progress(f"fullpipe, chunk sweep: round {r + 1} of {rounds}")
                for chunk, p in order:
                    ms = _wall_ms(lambda: _fp_call(p, w, fout, fx), 1)[0]
                    (auto_in_sweep if chunk == "auto" else times_[chunk]).append(ms)
            for chunk, p in sweep.items():
                sweep_ms[chunk] = median(times_[chunk])
                st = _fp_stats(p)
                rows.append(_row(w, "sweep", f"{FULLPIPE}, chunk {chunk}", sweep_ms[chunk], bound_ms,
                                 chunk_bytes=(st["chunk"] or {}).get("bytes"), enqueue_us=st["enqueue_us"],
                                 error=errors[f"{FULLPIPE}, chunk {chunk}"]))
    del hand
    rows.append(_row(w, "bound", "compute alone (device-resident)", compute_alone, None))
    rows.append(_row(w, "bound", "copy bound (min(memmove, pinned) each way)", copy_ms, None))

    best_peer = min(peers_ms, key=peers_ms.get)
    metrics = {
        "describe": w.describe, "items": w.items, "item_name": w.item_name, "batches_peers": len(w.xs),
        "in_bytes": w.in_bytes, "out_bytes": w.out_bytes, "row_bytes": w.row_bytes,
        "bound_ms": bound_ms, "compute_alone_ms": compute_alone, "compute_alone_by_batching_ms": compute_ms,
        "copy_bound_ms": copy_ms, "fullpipe_ms": fp_ms, "fullpipe_new_output_ms": new_ms,
        "fullpipe_ratio": bound_ms / fp_ms, "peers_ms": peers_ms, "peer_errors": peer_errors,
        "best_peer": best_peer, "best_peer_ms": peers_ms[best_peer], "vs_best_peer": peers_ms[best_peer] / fp_ms,
        "enqueue_us": fp_stats["enqueue_us"], "fullpipe_batches": fp_stats["batches"],
        # how the timed run staged each side, and its host time per batch by part (stats.host_us)
        "fullpipe_staging": fp_stats.get("staging"), "fullpipe_host_us": fp_stats.get("host_us"),
        # the compute_threads=3 variant (THREADS_VARIANT_FOR): its time and host time per batch by part
        "fullpipe_threads_ms": threads_ms,
        "fullpipe_threads_host_us": threads_stats.get("host_us") if threads_stats else None,
        # arrays pinned in place by the pin-down cache, and the registrations' one-time cost
        "fullpipe_in_place": fp_stats.get("in_place"),
        "fullpipe_register_ms": (pin_cache.stats.register_s - registered_s) * 1e3,
        "auto_chunk": fp_stats["chunk"], "auto_chunk_bytes": chunk_bytes, "sweep_ms": sweep_ms,
        # a long list of small batches: the way it ran at the end of the timed rounds (plain, pipelined or
        # threads, list_paths.py: the choice follows each way's latest runs), the way its trial chose, and the
        # untimed runs of the list that measured the ways before the timed rounds
        "list_path": fp_stats["list_path"] or list_path, "list_path_after_trial": list_path,
        "list_trial_runs": list_trial_runs,
        "max_row_error": errors,
    }
    if sweep_ms:
        best = min(sweep_ms, key=sweep_ms.get)
        auto_ms = median(auto_in_sweep)  # chunk='auto', timed in the sweep's rounds
        metrics.update(best_fixed_chunk=best, best_fixed_ms=sweep_ms[best], auto_in_sweep_ms=auto_ms,
                       auto_vs_best_fixed=sweep_ms[best] / auto_ms)
    notes.append(
        f"{w.name}: {w.describe}. fullpipe {fp_ms:.1f} ms = {bound_ms / fp_ms:.3f}× the bound ({bound_ms:.1f} ms; "
        f"compute alone {compute_alone:.1f} ms, copies at min(memmove, pinned) {copy_ms:.1f} ms); "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in peers_ms.items())
        + (f"; chunk='auto' chose {chunk_bytes / MiB:.1f} MiB" if is_num(chunk_bytes) else "")
        + (f", {fp_stats['enqueue_us']:.1f} µs enqueue per batch" if is_num(fp_stats["enqueue_us"]) else "")
        + (f"; fullpipe pinned its pageable arrays in place at their second run (the timed run's "
           f"{' and '.join(k for k in ('input', 'output') if k in fp_stats['in_place'])}; "
           f"{metrics['fullpipe_register_ms']:.0f} ms of cuMemHostRegister, once)"
           if fp_stats.get("in_place") else "") + ".")
    return metrics, rows, notes


# --------------------------------------------------------------------------- the experiment
def _measure_all(ctx: Any, torch: Any, tv: Any, tv_missing: str | None, tdev: Any, pool: Any
                 ) -> tuple[dict, dict, list[dict], list[str], str | None]:
    """The bounds, then each workload: (params, metrics, table, notes, why it failed or None)."""
    dev, sizes = ctx.device, _sizes(ctx.quick)
    gen = torch.Generator().manual_seed(1414)
    ctx.progress(0.0, "bounds: pinned copy peak, host memmove")
    bounds = _bounds(torch, tdev, sizes["peak_bytes"], sizes["repeat"])
    copy_gbps = min(bounds["pinned_peak"]["both_each_way"],
                    host_copy_rate(bounds["host_memmove"], bounds["host_torch_copy"])[0])
    env = _Env(torch, tdev, dev, pool, torch.cuda.Stream(tdev), sizes["repeat"], sizes["sweep_repeat"],
               sizes["rounds_budget_s"], sizes["sweep_budget_s"], copy_gbps, ctx.progress)
    params = {"quick": ctx.quick, "streams": STREAMS, "chunk": "auto",
              "torch": torch.__version__, "torchvision": getattr(tv, "__version__", None), **sizes,
              "row_tolerance": ROW_TOLERANCE, "dataloader_workers": DATALOADER_WORKERS, "hand_slots": HAND_SLOTS,
              "sweep": {k: list(v) for k, v in SWEEP.items()}}
    metrics: dict[str, Any] = {**bounds, "copy_bound_gbps_each_way": copy_gbps, "workloads": {}}
    table: list[dict] = []
    notes = [
        f"Pinned copy peak: H2D {bounds['pinned_peak']['h2d']:.1f}, D2H {bounds['pinned_peak']['d2h']:.1f}, "
        f"both at once {bounds['pinned_peak']['both_each_way']:.1f} GB/s each way; host memmove pageable ↔ pinned "
        f"({bounds['host_memmove']['threads']} threads per direction): {bounds['host_memmove']['in_gbps']:.1f} "
        f"GB/s one way, {bounds['host_memmove']['both_gbps_each_way']:.1f} GB/s each way at once; torch copy_ "
        f"({bounds['host_torch_copy']['threads']} threads), one way then the other: "
        f"{bounds['host_torch_copy']['each_way_gbps']:.1f} GB/s each way.",
    ]
    plan = [("copy-heavy", 0.06, 0.32), ("compute-bound", 0.32, 0.78), ("variable-length", 0.78, 0.98)]
    for name, lo, hi in plan:
        if name == "compute-bound" and tv is None:
            metrics["workloads"][name] = {"skipped": tv_missing}
            notes.append(f"{name}: skipped: {tv_missing}")
            continue
        ctx.progress(lo, f"{name}: data and model")
        if name == "copy-heavy":
            w = _copy_heavy(torch, tdev, sizes["copy_bytes"], gen)
        elif name == "compute-bound":
            w = _compute_bound(torch, tv, tdev, sizes["images"], gen)
        else:
            w = _variable_length(torch, tdev, sizes["tokens"], gen, seed=14)
        try:
            m, rows, wnotes = _measure(env, w, lo, hi)
        except _Mismatch as exc:
            return params, metrics, table, notes, str(exc)
        finally:
            del w
            torch.cuda.empty_cache()
        metrics["workloads"][name] = m
        table += rows
        notes += wnotes
    return params, metrics, table, notes, None


def run(ctx) -> Result:
    dev = ctx.device
    try:
        import torch
    except ImportError as exc:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=[f"skipped: PyTorch is not installed ({exc})"])
    if not torch.cuda.is_available():
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=["skipped: this PyTorch has no CUDA (a CPU-only build?)"])
    try:
        import torchvision as tv
        tv_missing = None
    except Exception as exc:  # noqa: BLE001 - missing, or built for another torch
        tv, tv_missing = None, f"torchvision could not be imported ({type(exc).__name__}: {exc})"

    tdev = torch.device("cuda", dev.index)
    torch.cuda.set_device(tdev)
    pool = DevicePool(dev, release_threshold="max")
    # Setup work (model init, uploads) on a stream of its own, not on the legacy default stream.
    with torch.cuda.stream(torch.cuda.Stream(tdev)):
        params, metrics, table, notes, failed = _measure_all(ctx, torch, tv, tv_missing, tdev, pool)
    torch.cuda.synchronize(tdev)
    if failed is not None:
        return with_claims(Result(NAME, CLAIM, "failed", device_info(dev), params, metrics, table=table,
                                  notes=[failed] + notes), VERDICT_FROM)
    ctx.progress(0.99, "verdicts")
    judged = {k: v for k, v in metrics["workloads"].items() if "fullpipe_ratio" in v}
    worst = min(judged, key=lambda k: judged[k]["fullpipe_ratio"])
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict=UNJUDGED, device=device_info(dev), params=params, metrics=metrics,
        bound=Bound(f"{worst}: its bound, this run", judged[worst]["bound_ms"], "ms"),
        ratio=judged[worst]["fullpipe_ratio"], table=table, notes=notes,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
def _workload(d: Data, name: str) -> dict[str, Any]:
    w = d.m("workloads", name)
    if not isinstance(w, dict):
        raise Missing(f"metrics.workloads.{name}")
    return w


def _peers_text(w: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.1f} ms" for k, v in (w.get("peers_ms") or {}).items())


def _vs_compute_alone(w: dict[str, Any]) -> tuple[float, str, str]:
    """(fullpipe's ratio to compute alone, what was measured, the bound) of one workload."""
    ratio = float(w["compute_alone_ms"]) / float(w["fullpipe_ms"])
    measured = (f"{w['fullpipe_ms']:.1f} ms = {times(ratio)} compute alone "
                f"({w['items'] / w['fullpipe_ms'] * 1e3:.0f} {w.get('item_name', 'items')}/s; "
                f"peers: {_peers_text(w)})")
    return ratio, measured, f"compute alone on device-resident data = {w['compute_alone_ms']:.1f} ms"


def _list_note(w: dict[str, Any]) -> str:
    """Which way fullpipe ran a long list of small batches at the end of the timed rounds
    (list_paths.py), each way's median µs per batch then, and the trial's choice; empty for
    other runs."""
    lp = w.get("list_path")
    if not lp:
        return ""
    best = ", ".join(f"{p} {lp[f'{p}_us_per_batch']:.0f}" for p in ("plain", "pipelined", "threads")
                     if is_num(lp.get(f"{p}_us_per_batch")))
    trial = w.get("list_path_after_trial") or {}
    said = f"its trial chose {trial['chosen']}, " if trial.get("chosen") else ""
    return (f"; the list ran {lp.get('chosen', lp['path'])} at the end of the rounds (median µs per batch of each "
            f"way's latest runs: {best}; {said}{w.get('list_trial_runs', 0)} untimed trial runs after the 4 checked "
            "runs)")


def _host_note(w: dict[str, Any]) -> str:
    """Whether the host set the pace: fullpipe's host time per batch (the compute's own call
    and fullpipe's part) against compute alone's time per batch (its GPU time, or its own
    calls where those are slower). Empty without the per-call breakdown."""
    host, n = w.get("fullpipe_host_us"), w.get("fullpipe_batches")
    if not host or not n or "compute_call" not in host:
        return ""
    own = sum(v for k, v in host.items() if k not in ("compute_call", "staging_wait", "wait"))  # (plain: "rest")
    alone_us = float(w["compute_alone_ms"]) * 1e3 / n
    note = (f"; host per batch in fullpipe: the compute's call {host['compute_call']:.0f} µs + fullpipe's "
            f"{own:.0f} µs, against {alone_us:.0f} µs per batch for compute alone")
    threads_ms = w.get("fullpipe_threads_ms")
    if is_num(threads_ms) and threads_ms > 0:
        note += (f"; with compute_threads=3 (forced): {float(w['bound_ms']) / float(threads_ms):.2f}× compute "
                 f"alone ({float(threads_ms):.1f} ms)")
    return note


@rule(NAME, "workload-copy-heavy",
      "a copy-heavy model (bf16 MLP over pageable float32 rows, in and out) runs through fullpipe with its "
      "defaults at ≥ 0.9× min(host memmove bound, pinned copy peak) each way")
def _copy_heavy_rule(d: Data) -> Judged:
    w = _workload(d, "copy-heavy")
    pin = d.m("pinned_peak", "both_each_way")
    mem, how = host_copy_rate(d.m("host_memmove"), d.m_or(None, "host_torch_copy"))
    rate = min(pin, mem)
    got = float(w["in_bytes"]) / (float(w["fullpipe_ms"]) * 1e6)
    ratio = got / rate
    in_place = w.get("fullpipe_in_place") or {}
    sides = [k for k in ("input", "output") if k in in_place]
    how_staged = (f"; its {' and '.join(sides)} pinned in place at the second run, so no host memmove: "
                  f"{times(got / pin)} the pinned peak; {w.get('fullpipe_register_ms', 0):.0f} ms of "
                  "cuMemHostRegister once" if sides else "")
    return Judged(measured=f"{got:.1f} GB/s each way = {times(ratio)} the copy bound ({w['fullpipe_ms']:.1f} ms; "
                           f"compute alone {w['compute_alone_ms']:.1f} ms; peers: {_peers_text(w)}{how_staged})",
                  bound=f"min(host copies {mem:.1f}, pinned both at once {pin:.1f}) GB/s each way; host copies: "
                        f"the faster of {how}",
                  ratio=ratio, verdict=at_least(ratio, 0.9, 0.7), target="supported ≥ 0.9×, partly ≥ 0.7×")


@rule(NAME, "workload-compute-bound",
      "a compute-bound convnet (fp16 resnet50, channels_last, over pageable uint8 images) runs through fullpipe "
      "with its defaults at ≥ 0.95× compute alone")
def _compute_bound_rule(d: Data) -> Judged:
    w = _workload(d, "compute-bound")
    if w.get("skipped"):
        return Judged(measured=f"not run: {w['skipped']}", bound="", ratio=None, verdict="skipped", target="")
    ratio, measured, bound = _vs_compute_alone(w)
    return Judged(measured=measured, bound=bound, ratio=ratio, verdict=at_least(ratio, 0.95, 0.8),
                  target="supported ≥ 0.95×, partly ≥ 0.8×")


@rule(NAME, "workload-variable-length",
      "variable-length transformer batches (run_batches) run through fullpipe with its defaults at ≥ 0.95× "
      "compute alone")
def _variable_length_rule(d: Data) -> Judged:
    w = _workload(d, "variable-length")
    ratio, measured, bound = _vs_compute_alone(w)
    return Judged(measured=measured + _host_note(w) + _list_note(w), bound=bound, ratio=ratio,
                  verdict=at_least(ratio, 0.95, 0.8), target="supported ≥ 0.95×, partly ≥ 0.8×")


@rule(NAME, "workload-vs-peers",
      "fullpipe with its defaults is at least as fast as the best peer (naive loop, hand-written 3-stream "
      "pipeline, DataLoader) on every workload")
def _vs_peers_rule(d: Data) -> Judged:
    ws = {k: v for k, v in d.m("workloads").items() if isinstance(v, dict) and "vs_best_peer" in v}
    if not ws:
        raise Missing("metrics.workloads.*.vs_best_peer")
    worst = min(ws, key=lambda k: ws[k]["vs_best_peer"])
    ratio = float(ws[worst]["vs_best_peer"])
    missing = [f"{k}: {p}" for k, v in ws.items() for p in (v.get("peer_errors") or {})]
    skipped = [k for k, v in d.m("workloads").items() if isinstance(v, dict) and v.get("skipped")]
    return Judged(
        measured="; ".join(f"{k}: {times(v['vs_best_peer'])} {v['best_peer']}" for k, v in ws.items())
                 + (f" (peers that did not run: {', '.join(missing)})" if missing else "")
                 + (f" (not run: {', '.join(skipped)})" if skipped else ""),
        bound=f"the best peer's time on each workload (worst: {worst}, {ws[worst]['best_peer']} "
              f"{ws[worst]['best_peer_ms']:.1f} ms)",
        ratio=ratio, verdict=at_least(ratio, 1.0, 0.9), target="supported ≥ 1× on every workload, partly ≥ 0.9×")


@rule(NAME, "workload-copy-heavy-2x",
      "on the pageable copy-heavy workload fullpipe with its defaults is ≥ 2× the best peer")
def _copy_heavy_2x_rule(d: Data) -> Judged:
    w = _workload(d, "copy-heavy")
    ratio = float(w["vs_best_peer"])
    return Judged(measured=f"{times(ratio)} {w['best_peer']} ({w['fullpipe_ms']:.1f} ms vs "
                           f"{w['best_peer_ms']:.1f} ms; {_peers_text(w)})",
                  bound=f"the best peer: {w['best_peer']} {w['best_peer_ms']:.1f} ms", ratio=ratio,
                  verdict=at_least(ratio, 2.0, 1.5), target="supported ≥ 2×, partly ≥ 1.5×")


@rule(NAME, "workload-auto-chunk",
      "chunk='auto' is within 5 % of the best fixed chunk of a sweep in the same run, on each workload")
def _auto_chunk_rule(d: Data) -> Judged:
    ws = {k: v for k, v in d.m("workloads").items() if isinstance(v, dict) and "auto_vs_best_fixed" in v}
    if not ws:
        raise Missing("metrics.workloads.*.auto_vs_best_fixed")
    parts = []
    for k, v in ws.items():
        chosen = v.get("auto_chunk_bytes")
        auto_ms = v.get("auto_in_sweep_ms", v["fullpipe_ms"])  # (older results: the timed run)
        parts.append(f"{k}: {times(v['auto_vs_best_fixed'])} (auto "
                     + (f"{chosen / MiB:.1f} MiB" if is_num(chosen) else "?")
                     + f" {auto_ms:.1f} ms; best fixed {v['best_fixed_chunk']} {v['best_fixed_ms']:.1f} ms)")
    worst = min(float(v["auto_vs_best_fixed"]) for v in ws.values())
    return Judged(measured="; ".join(parts), bound="the best fixed chunk's time (sweep: "
                  + ", ".join(f"{k} {'/'.join(v['sweep_ms'])}" for k, v in ws.items()) + ")",
                  ratio=worst, verdict=at_least(worst, 1 / 1.05, 0.8),
                  target="supported: auto ≤ 1.05× the best fixed chunk's time; partly ≤ 1.25×")


# --------------------------------------------------------------------------- figure
PEER_COLORS = {"naive loop": PAGEABLE, "hand-written pipeline": PLAIN, "DataLoader": PINNED, FULLPIPE: RING,
               FULLPIPE_NEW_OUTPUT: "#98df8a", FULLPIPE_THREADS: "#c5b0d5"}


def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figures, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    names = [w for w in WORKLOADS if rows_of(r, workload=w, kind="peer")]
    need(names, "table rows kind='peer'")
    fig, axes = plt.subplots(1, len(names), figsize=WIDE, squeeze=False)
    for ax, w in zip(axes[0], names):
        rows = [x for x in rows_of(r, workload=w) if x["kind"] in ("peer", "fullpipe variant")
                and is_num(x.get("ratio_to_bound"))]
        bars = ax.barh(range(len(rows)), [x["ratio_to_bound"] for x in rows],
                       color=[PEER_COLORS.get(x["what"], GREY) for x in rows])
        label_bars(ax, bars, "{:.2f}")
        ax.set_yticks(range(len(rows)), [x["what"].replace(", ", ",\n") for x in rows], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(1.0, color=BOUND, ls="--", lw=1.2)
        ax.axvline(TARGETS[w], color=GREY, ls=":", lw=1)
        ax.set_xlim(0, max([1.15] + [x["ratio_to_bound"] * 1.15 for x in rows]))
        ax.set_xlabel("throughput / bound")
        bound = "copies (min(memmove, pinned))" if w == "copy-heavy" else "compute alone"
        ax.set_title(f"{w}\nbound: {bound}; target {TARGETS[w]}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    drawn = {"each workload: fullpipe and its peers as a fraction of the bound measured in this run (dashed)":
             save(fig, out / f"{NAME}.png")}
    swept = [w for w in WORKLOADS if any(is_num(x.get("chunk_MiB")) for x in rows_of(r, workload=w, kind="sweep"))]
    if swept:
        fig, axes = plt.subplots(1, len(swept), figsize=(11, 3.4), squeeze=False)
        for ax, w in zip(axes[0], swept):
            pts = sorted((x for x in rows_of(r, workload=w, kind="sweep") if is_num(x.get("chunk_MiB"))),
                         key=lambda x: x["chunk_MiB"])
            ax.plot([x["chunk_MiB"] for x in pts], [x["wall_ms"] for x in pts], "o-", color=GREY,
                    label="fixed chunk")
            auto = next((x for x in rows_of(r, workload=w, what=FULLPIPE) if is_num(x.get("chunk_MiB"))), None)
            if auto is not None:
                ax.plot([auto["chunk_MiB"]], [auto["wall_ms"]], "*", ms=14, color=RING,
                        label=f"chunk='auto' ({auto['chunk_MiB']:.1f} MiB)")
            ax.set_xscale("log", base=2)
            plain_log(ax)
            ax.set_xlabel("chunk, MiB")
            ax.set_ylabel("wall time, ms")
            ax.set_ylim(bottom=0)
            ax.set_title(f"{w}: chunk='auto' against fixed chunks", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=8)
        drawn["chunk='auto' against a sweep of fixed chunks"] = save(fig, out / f"{NAME}-1.png")
    return drawn
