"""fullpipe bench two-level-decode: the layer stack generating tokens for a small batch of
sequences; what each level adds over PyTorch eager, against torch.compile.

Claims (issue 18): decode at batch <= 8 reaches >= 1.5x PyTorch eager's tokens/s, and at
least the tokens/s of torch.compile(mode="reduce-overhead") where it runs; layerwise
pipelining (layer groups on their own streams, micro-batches between them) on vs off; the
blocking allocator (cudaMalloc/cudaFree per step) against the stream-ordered pool in that
layerwise pipeline; the paged KV cache's memory against preallocating for the longest
sequence; no allocation from the driver in steady state.

Workload. The default StackConfig (12 layers, width 2048, 16 heads of 128, bf16), weights
from init_weights(seed=0); BATCH prompts of random lengths (MIN_LEN .. MAX_LEN tokens,
seeded); each form prefills them, takes WARMUP greedy steps (graph capture, compilation,
cuBLAS warm-up all happen there), then STEPS timed steps. tokens/s = BATCH x STEPS / wall
time of the timed steps (host enqueue included, between two torch.cuda.synchronize()).

The forms:

- PyTorch eager ("neither"): models.torch_decode.TorchDecoder(cache="dynamic"): the same
  math as the reference (cuBLAS, SDPA with a mask, PyTorch elementwise in fp32), K/V grown
  by torch.cat each step (Hugging Face's DynamicCache), caching allocator;
- torch.compile: TorchDecoder(cache="static", compile=True): mode="reduce-overhead"
  (Inductor's fused kernels, replayed as CUDA graphs), a static cache for the longest
  sequence;
- level 1 only: TorchDecoder(cache="static") captured by hand into one CUDA graph per step:
  PyTorch's kernels, no host enqueue per kernel;
- level 2 only: models.decode.Decoder(graph=False): fullpipe's kernels (paged decode
  attention, fused RMSNorm/RoPE/SwiGLU, cuBLAS for the few-row projections) enqueued from
  Python every step, one stream;
- both levels: Decoder(graph=True): the same kernels, steps_per_graph steps per graph
  launch, the cache's pages from the stream-ordered pool;
- and the layerwise-pipelining comparisons, each on graph=False and graph=True:
  Decoder(layer_groups=2) (two streams, two micro-batches), with scratch="pool" and
  scratch="cudaMalloc" for the allocator claim (graph=False: a graph cannot hold cudaMalloc).

Correct first: every form's logits are compared with eager's under teacher forcing (the
eager form's greedy tokens fed to each) for CHECK_STEPS steps, relative L2 per sequence and
step (bound MAX_REL_ERR, as the prefill experiment's), before anything is timed.

    python -m fullpipe.experiments.two_level_decode [--quick] [--json FILE]
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..cuda.device import device_info
from ..cuda.timing import median, spread
from . import Bound, Context, Result
from .claims import UNJUDGED, Data, Judged, at_least, at_most, is_num, rule, times, with_claims
from .measure import in_turn
from .figures import GREY, PINNED, RING, WIDE, need, pyplot, ratio_bars, save

NAME = "two-level-decode"
TITLE = "The two levels together: an LLM-style layer stack decoding a small batch"
CLAIM = ("Both levels together (fullpipe's decode kernels over a paged KV cache, CUDA-graph steps, a stream-ordered "
         "pool) decode a batch of <= 8 sequences at >= 1.5x PyTorch eager's tokens/s and at least "
         "torch.compile(mode='reduce-overhead')'s")
PRELOAD = ("torch",)  # imported ahead while the previous experiment runs (report/worker.py)
TECHNIQUE = (
    "A decode step has one token per sequence: every kernel is small, so the host's launch time and the GPU's "
    "idle gaps between kernels decide the speed. Level 1 removes them (the step's kernels replayed as one CUDA "
    "graph, several steps per launch; the KV cache's pages from a stream-ordered pool between launches; layer "
    "groups on separate streams so two micro-batches fill the GPU together); level 2 makes each kernel lean "
    "(flash-decoding attention split over the cached tokens reading K/V pages once for every query head of a "
    "group, fused RMSNorm, RoPE and SwiGLU)."
)
DECODE_KEY, DECODE_COMPILED_KEY = "two-level-decode", "two-level-decode-compiled"
LAYERWISE_KEY, MALLOC_KEY = "two-level-layerwise", "two-level-layerwise-malloc"
CACHE_MEMORY_KEY, NO_MALLOC_KEY = "two-level-kv-memory", "two-level-decode-no-malloc"
VERDICT_FROM = (DECODE_KEY, DECODE_COMPILED_KEY)

EAGER, EAGER_STATIC, COMPILED, LEVEL1, LEVEL2, BOTH = (
    "PyTorch eager", "PyTorch eager, static cache", "torch.compile", "level 1 only", "level 2 only", "both levels")
LAYERWISE_EAGER, LAYERWISE_POOL, LAYERWISE_MALLOC, LAYERWISE_GRAPH = (
    "level 2, 2 layer groups", "level 2, 2 layer groups, pool scratch", "level 2, 2 layer groups, cudaMalloc scratch",
    "both, 2 layer groups")
FORMS = (EAGER, EAGER_STATIC, COMPILED, LEVEL1, LEVEL2, BOTH, LAYERWISE_EAGER, LAYERWISE_POOL, LAYERWISE_MALLOC, LAYERWISE_GRAPH)
WHAT = {
    EAGER: "TorchDecoder(cache='dynamic'): cuBLAS + SDPA + PyTorch elementwise, torch.cat cache (neither level)",
    EAGER_STATIC: "TorchDecoder(cache='static') stepped from Python: the cache preallocated, written in place",
    COMPILED: "TorchDecoder(cache='static', compile=True): torch.compile(mode='reduce-overhead')",
    LEVEL1: "TorchDecoder(cache='static') captured by hand: one CUDA graph per step, PyTorch kernels",
    LEVEL2: "Decoder(graph=False): fullpipe kernels + paged cache, enqueued from Python each step, one stream",
    BOTH: "Decoder(graph=True): fullpipe kernels + paged cache, 8 steps per CUDA graph launch",
    LAYERWISE_EAGER: "Decoder(graph=False, layer_groups=2): 2 streams x 2 micro-batches, static scratch",
    LAYERWISE_POOL: "the same, each micro-batch's step scratch from the stream-ordered pool",
    LAYERWISE_MALLOC: "the same, each micro-batch's step scratch from cuMemAlloc/cuMemFree",
    LAYERWISE_GRAPH: "Decoder(graph=True, layer_groups=2): the layerwise pipeline inside the graphs",
}

SEED, PROMPT_SEED = 0, 18
BATCH = 8
MIN_LEN, MAX_LEN = 64, 2048
WARMUP, STEPS, QUICK_STEPS = 9, 96, 32  # WARMUP > steps_per_graph: the graph is captured in the warm-up
CHECK_STEPS = 4  # teacher-forced steps compared with eager
REPEAT, QUICK_REPEAT = 3, 2
MAX_REL_ERR = 5e-2  # as the prefill experiment's (see two_level.MAX_REL_ERR)
PAGE_TOKENS = 64
STEPS_PER_GRAPH = 8

DECODE_TARGET, DECODE_PARTLY = 1.5, 1.0
COMPILED_TARGET, COMPILED_PARTLY = 1.0, 0.8
LAYERWISE_TARGET, LAYERWISE_PARTLY = 1.0, 0.9
MALLOC_SLOWER = 1.1  # the blocking allocator "breaks" the pipeline: the pool at least this much faster
MEMORY_TARGET, MEMORY_PARTLY = 0.6, 1.0
MiB = 1 << 20


def make_prompts(n: int, vocab: int, seed: int = PROMPT_SEED) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, int(L)).astype(np.int32) for L in rng.integers(MIN_LEN, MAX_LEN + 1, n)]


def rel_err(a: Any, b: Any) -> float:
    """Largest relative L2 error over the rows of ``a`` vs ``b`` (``[..., vocab]``)."""
    a, b = a.float().flatten(0, -2), b.float().flatten(0, -2)
    return float(((a - b).norm(dim=1) / b.norm(dim=1)).max())


def bytes_per_step(config: Any, lengths: list[int], steps_done: float) -> int:
    """What one decode step must read from device memory at least: every weight but the
    embedding table (of which one row per sequence), and the cached K and V of every
    sequence after ``steps_done`` steps."""
    c = config
    weights = c.parameter_bytes - c.vocab * c.width * c.element_bytes + len(lengths) * c.width * c.element_bytes
    cached = sum(n + steps_done for n in lengths) * c.kv_bytes_per_token
    return int(weights + cached)


def copy_bandwidth(dev: Any, nbytes: int = 1 << 30, repeat: int = 5) -> float:
    """Device memory bandwidth of a plain device-to-device copy (bytes read + written per
    second), the best of ``repeat``: the bound a memory-bound step is held to."""
    import torch

    a = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(repeat + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * nbytes / best


# --------------------------------------------------------------------------- the forms
class _TorchForm:
    """A PyTorch peer as a step loop: greedy tokens stay on the GPU."""

    def __init__(self, config: Any, weights: Any, prompts: list, capacity: int, cache: str, *,
                 compile: bool = False, graph: bool = False):
        from ..models.torch_decode import TorchDecoder

        self.peer = TorchDecoder(config, weights, prompts, capacity=capacity, cache=cache, compile=compile)
        self.tokens = self.peer.first_tokens.clone()
        self.graph = None
        if graph:
            self.graph, self.logits = self.peer.graph(self.tokens)

    def restart(self) -> None:
        """Back to right after the prefill (the same compiled step, the same graph)."""
        self.peer.restart()
        self.tokens.copy_(self.peer.first_tokens)

    def steps(self, n: int, forced: Any = None) -> list[Any]:
        out = []
        for t in range(n):
            if forced is not None:
                self.tokens.copy_(forced[:, t])
            if self.graph is not None:
                self.graph.replay()
                logits = self.logits
            else:
                logits = self.peer.step(self.tokens)
            if forced is not None:
                out.append(logits.clone())
            self.tokens.copy_(logits.argmax(dim=-1))
        return out


# --------------------------------------------------------------------------- the measurement
def measure_decode(config: Any, prompts: list[np.ndarray], *, device_index: int = 0, steps: int = STEPS,
                   repeat: int = REPEAT, compiled: bool = True,
                   progress: Callable[[float, str], None] = lambda f, m: None) -> tuple[dict[str, Any], list[str]]:
    import torch

    from ..cuda.pool import DevicePool
    from ..models import DecoderStack, init_weights
    from ..models.decode import Decoder

    dev = torch.device(f"cuda:{device_index}")
    torch.cuda.set_device(dev)
    notes: list[str] = []
    B = len(prompts)
    lengths = [int(p.size) for p in prompts]
    total = WARMUP + steps + 1
    capacity = max(lengths) + total
    progress(0.02, "weights")
    weights = init_weights(config, seed=SEED, device=dev)
    stack = DecoderStack(config, weights, kernels="fullpipe", pool=None)
    pool = DevicePool(dev.index)
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731

    def decoder(**kw: Any) -> Any:
        return Decoder(stack, pool=pool, page_tokens=PAGE_TOKENS, steps_per_graph=STEPS_PER_GRAPH, **kw)

    fullpipe_forms = {
        LEVEL2: lambda: decoder(graph=False), BOTH: lambda: decoder(graph=True),
        LAYERWISE_EAGER: lambda: decoder(graph=False, layer_groups=2),
        LAYERWISE_POOL: lambda: decoder(graph=False, layer_groups=2, scratch="pool"),
        LAYERWISE_MALLOC: lambda: decoder(graph=False, layer_groups=2, scratch="cudaMalloc"),
        LAYERWISE_GRAPH: lambda: decoder(graph=True, layer_groups=2),
    }
    torch_forms = {EAGER: dict(cache="dynamic"), EAGER_STATIC: dict(cache="static"),
                   LEVEL1: dict(cache="static", graph=True)}
    if compiled:
        torch_forms[COMPILED] = dict(cache="static", compile=True)

    # 1. correct first: eager's greedy tokens and logits, then every form fed the same tokens
    progress(0.05, "eager: greedy tokens and logits")
    eager = _TorchForm(config, weights, prompts, capacity, "dynamic")
    feed, ref = [eager.tokens.clone()], []  # feed[t]: the token each sequence takes in at step t
    for t in range(CHECK_STEPS):
        logits = eager.peer.step(feed[t])
        ref.append(logits.clone())
        feed.append(logits.argmax(dim=-1))
    feed_t = torch.stack(feed[:CHECK_STEPS], dim=1)  # [B, CHECK_STEPS]
    ref_logits = torch.stack(ref)  # [CHECK_STEPS, B, vocab]
    del eager
    errors: dict[str, float] = {}
    peers: dict[str, _TorchForm] = {}  # each PyTorch form built once (compiled once), restarted per round
    for i, (name, kw) in enumerate(list(torch_forms.items())):
        progress(0.08 + 0.1 * i / len(torch_forms), f"{name}: check")
        try:
            t0 = time.perf_counter()
            form = peers[name] = _TorchForm(config, weights, prompts, capacity, **kw)
            if name != EAGER:
                errors[name] = rel_err(torch.stack(form.steps(CHECK_STEPS, forced=feed_t)), ref_logits)
            else:
                form.steps(CHECK_STEPS)
            sync()
            if name == COMPILED:
                metrics_compile_s = time.perf_counter() - t0
        except Exception as exc:  # torch.compile may not work on this machine: the peer is left out
            if name != COMPILED:
                raise
            notes.append(f"{COMPILED} left out: {type(exc).__name__}: {str(exc)[:300]}")
            del torch_forms[COMPILED]
            peers.pop(COMPILED, None)
    feed_np = feed_t.cpu().numpy()
    for i, (name, make) in enumerate(fullpipe_forms.items()):
        progress(0.2 + 0.1 * i / len(fullpipe_forms), f"{name}: check")
        res = make().generate(prompts, CHECK_STEPS + 1, forced=feed_np)
        errors[name] = rel_err(res.stats["logits"], ref_logits)
    wrong = {n: e for n, e in errors.items() if not e <= MAX_REL_ERR}
    metrics: dict[str, Any] = {"batch": B, "lengths": lengths, "check_steps": CHECK_STEPS,
                               "max_rel_err_vs_eager": errors, "max_rel_err_bound": MAX_REL_ERR}
    if COMPILED in peers:
        metrics["compile_and_check_s"] = metrics_compile_s
    if wrong:
        metrics["wrong"] = wrong
        return metrics, notes

    # 2. timing: each form prefills, warms up, then its timed steps; forms take turns per round
    walls: dict[str, list[float]] = {}
    memory: dict[str, Any] = {}
    names = list(torch_forms) + list(fullpipe_forms)
    for rep in range(repeat):
        for j, name in enumerate(in_turn(names, rep)):
            progress(0.35 + 0.6 * (rep * len(names) + j) / (repeat * len(names)), f"round {rep + 1}: {name}")
            if name in torch_forms:
                form = peers[name]
                form.restart()
                form.steps(WARMUP)
                sync()
                t0 = time.perf_counter()
                form.steps(steps)
                sync()
                walls.setdefault(name, []).append(time.perf_counter() - t0)
            else:
                dec = fullpipe_forms[name]()
                session = dec.start(prompts, total)
                try:
                    session.run(WARMUP)
                    sync()
                    seg0 = torch.cuda.memory_stats(dev).get("segment.all.allocated", 0)
                    pool0 = pool.stats()
                    t0 = time.perf_counter()
                    session.run(steps)
                    sync()
                    walls.setdefault(name, []).append(time.perf_counter() - t0)
                    if rep == 0 and name == BOTH:
                        pool1 = pool.stats()
                        memory = {
                            "cache_bytes": session.cache.held_bytes,
                            "cache_pages": session.cache.pages_held,
                            "page_bytes": session.cache.page_bytes,
                            "static_cache_bytes": B * capacity * config.kv_bytes_per_token,
                            "max_context_cache_bytes": B * config.max_context * config.kv_bytes_per_token,
                            "pool_allocations_in_timed_steps": pool1.allocations_total - pool0.allocations_total,
                            "pool_reserved_growth_in_timed_steps": pool1.reserved_bytes - pool0.reserved_bytes,
                            "torch_new_segments_in_timed_steps":
                                int(torch.cuda.memory_stats(dev).get("segment.all.allocated", 0) - seg0),
                        }
                    result = session.finish()
                    if rep == 0 and name == BOTH:
                        memory["pages_allocated"] = result.stats["pages_allocated"]
                        memory["split_tokens"] = result.stats["split_tokens"]
                        memory["max_splits"] = result.stats["max_splits"]
                finally:
                    session.close()
    sync()
    del peers
    wall = {n: median(w) for n, w in walls.items()}
    tokens = B * steps
    eager_ref = min((n for n in (EAGER, EAGER_STATIC) if n in wall), key=lambda n: wall[n])
    progress(0.97, "the memory bound: a device copy")
    hbm = copy_bandwidth(dev)
    step_bytes = bytes_per_step(config, lengths, WARMUP + steps / 2)
    metrics.update({
        "eager_reference": eager_ref, "hbm_copy_bytes_per_s": hbm, "bytes_per_step": step_bytes,
        "bound_ms_per_step": 1e3 * step_bytes / hbm,
        "steps": steps, "warmup": WARMUP, "repeat": repeat, "capacity": capacity, "page_tokens": PAGE_TOKENS,
        "steps_per_graph": STEPS_PER_GRAPH, "wall_s": wall, "spread": {n: spread(w) for n, w in walls.items()},
        "tokens_per_s": {n: tokens / w for n, w in wall.items()},
        "vs_eager": {n: wall[eager_ref] / w for n, w in wall.items()},
        "ms_per_step": {n: 1e3 * w / steps for n, w in wall.items()},
        "memory": memory,
        "matmul": "torch.matmul (cuBLAS) for every projection at decode's few rows",
    })
    pool.close()
    return metrics, notes


# --------------------------------------------------------------------------- the run
def run(ctx: Context) -> Result:
    dev = ctx.device
    try:
        import torch  # noqa: F401
    except ImportError:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=["skipped: PyTorch is not installed (the peers and the stack's weights are PyTorch)"])
    from ..models import StackConfig

    config = StackConfig()
    steps = QUICK_STEPS if ctx.quick else STEPS
    repeat = QUICK_REPEAT if ctx.quick else REPEAT
    prompts = make_prompts(BATCH, config.vocab)
    params = {"batch": BATCH, "lengths": f"{MIN_LEN}..{MAX_LEN}", "prompt_seed": PROMPT_SEED, "weight_seed": SEED,
              "steps": steps, "warmup": WARMUP, "repeat": repeat, "quick": ctx.quick, "forms": WHAT,
              "page_tokens": PAGE_TOKENS, "steps_per_graph": STEPS_PER_GRAPH}
    # --quick leaves torch.compile out: compiling the step takes ~20 s, more than the rest of the quick run
    metrics, notes = measure_decode(config, prompts, device_index=dev.index, steps=steps, repeat=repeat,
                                    compiled=not ctx.quick, progress=ctx.progress)
    if ctx.quick:
        metrics["compiled_skipped"] = "--quick leaves torch.compile out (compiling the step takes ~20 s)"
    if metrics.get("wrong"):
        return Result(NAME, CLAIM, "failed", device_info(dev), params, metrics,
                      notes=[f"wrong logits, nothing timed: {metrics['wrong']} (max relative L2 vs eager under "
                             f"teacher forcing; bound {MAX_REL_ERR})"] + notes)
    return with_claims(Result(
        NAME, CLAIM, UNJUDGED, device_info(dev), params, metrics,
        bound=Bound(f"{metrics['eager_reference']} tokens/s (the faster eager form; same run, weights and prompts)",
                    metrics["tokens_per_s"][metrics["eager_reference"]], "tokens/s"),
        ratio=metrics["vs_eager"].get(BOTH), table=table_rows(metrics), notes=_notes(metrics) + notes), VERDICT_FROM)


def table_rows(m: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name in FORMS:
        if name not in m["tokens_per_s"]:
            continue
        rows.append({"form": name, "tokens/s": m["tokens_per_s"][name], "x eager": m["vs_eager"][name],
                     "ms per step": m["ms_per_step"][name], "spread": m["spread"][name],
                     "max rel err vs eager": m["max_rel_err_vs_eager"].get(name, 0.0), "what": WHAT[name]})
    return rows


def _notes(m: dict[str, Any]) -> list[str]:
    return [f"batch of {m['batch']} prompts ({min(m['lengths'])}..{max(m['lengths'])} tokens); {m['warmup']} warm-up "
            f"steps, then {m['steps']} timed steps (median of {m['repeat']} rounds, forms taking turns)",
            "logits under teacher forcing vs eager, max relative L2: "
            + ", ".join(f"{k} {e:.2e}" for k, e in m["max_rel_err_vs_eager"].items())
            + f" (bound {m['max_rel_err_bound']})",
            m["matmul"]]


# --------------------------------------------------------------------------- verdicts
def _tps(d: Data) -> dict[str, float]:
    return {k: float(v) for k, v in d.m("tokens_per_s").items()}


@rule(NAME, DECODE_KEY, f"decode at batch ≤ 8 reaches ≥ {DECODE_TARGET}× PyTorch eager's tokens/s")
def _decode(d: Data) -> Judged:
    tps = _tps(d)
    ref = d.m("eager_reference")
    r = tps[BOTH] / tps[ref]
    others = ", ".join(f"{k} {tps[k] / tps[ref]:.2f}×" for k in (EAGER, EAGER_STATIC, COMPILED, LEVEL1, LEVEL2)
                       if k in tps and k != ref)
    return Judged(measured=f"{tps[BOTH]:,.0f} tokens/s = {times(r)} eager ({others}); "
                           f"{d.m('bound_ms_per_step'):.3f} ms per step would read every weight and cached K/V once at "
                           f"the device's copy bandwidth: both levels take {1e3 * d.m('wall_s')[BOTH] / d.m('steps'):.3f}"
                           f" ms = {d.m('bound_ms_per_step') / (1e3 * d.m('wall_s')[BOTH] / d.m('steps')):.2f}× that "
                           "bound",
                  bound=f"the faster PyTorch eager form, {ref}: {tps[ref]:,.0f} tokens/s (batch {d.m('batch')}, "
                        "same run)", ratio=r,
                  verdict=at_least(r, DECODE_TARGET, DECODE_PARTLY),
                  target=f"supported: ≥ {DECODE_TARGET}× eager, partly ≥ {DECODE_PARTLY}×")


@rule(NAME, DECODE_COMPILED_KEY, "decode at batch ≤ 8 is at least as fast as torch.compile(mode='reduce-overhead')")
def _decode_compiled(d: Data) -> Judged:
    tps = _tps(d)
    target = f"supported: ≥ {COMPILED_TARGET}× the compiled peer, partly ≥ {COMPILED_PARTLY}×"
    if COMPILED not in tps:
        why = d.m_or(None, "compiled_skipped") or "torch.compile did not run on this machine (see the notes)"
        return Judged(measured=why, bound="", ratio=None, verdict="skipped", target=target)
    r = tps[BOTH] / tps[COMPILED]
    return Judged(measured=f"{tps[BOTH]:,.0f} tokens/s = {times(r)} torch.compile",
                  bound=f"torch.compile(mode='reduce-overhead') {tps[COMPILED]:,.0f} tokens/s (same run)", ratio=r,
                  verdict=at_least(r, COMPILED_TARGET, COMPILED_PARTLY), target=target)


@rule(NAME, LAYERWISE_KEY, "layerwise pipelining (layer groups on their own streams, two micro-batches) speeds up "
                           "decode at a small batch")
def _layerwise(d: Data) -> Judged:
    tps = _tps(d)
    eager_r = tps[LAYERWISE_EAGER] / tps[LEVEL2]
    graph_r = tps[LAYERWISE_GRAPH] / tps[BOTH]
    r = max(eager_r, graph_r)
    return Judged(measured=f"2 layer groups vs 1: {times(eager_r)} from Python, {times(graph_r)} in CUDA graphs",
                  bound=f"the same decoder with one stream ({tps[LEVEL2]:,.0f} / {tps[BOTH]:,.0f} tokens/s)",
                  ratio=r, verdict=at_least(r, LAYERWISE_TARGET, LAYERWISE_PARTLY),
                  target=f"supported: faster than one stream (≥ {LAYERWISE_TARGET}×) in one of the two, "
                         f"partly ≥ {LAYERWISE_PARTLY}×")


@rule(NAME, MALLOC_KEY, "a blocking allocator (cudaMalloc/cudaFree per step) breaks the layerwise pipeline")
def _malloc(d: Data) -> Judged:
    tps = _tps(d)
    r = tps[LAYERWISE_POOL] / tps[LAYERWISE_MALLOC]
    return Judged(measured=f"pool scratch {tps[LAYERWISE_POOL]:,.0f} tokens/s, cudaMalloc scratch "
                           f"{tps[LAYERWISE_MALLOC]:,.0f} tokens/s: the pool {times(r)}",
                  bound=f"static scratch (nothing allocated per step) {tps[LAYERWISE_EAGER]:,.0f} tokens/s", ratio=r,
                  verdict="supported" if r >= MALLOC_SLOWER else "not supported",
                  target=f"supported: the pipeline with the pool ≥ {MALLOC_SLOWER}× the one with cudaMalloc")


@rule(NAME, CACHE_MEMORY_KEY, "the paged KV cache holds ≤ 0.6× a cache preallocated for the longest sequence")
def _memory(d: Data) -> Judged:
    m = d.m("memory")
    r = m["cache_bytes"] / m["static_cache_bytes"]
    return Judged(measured=f"{m['cache_bytes'] / MiB:,.0f} MiB in {m['cache_pages']} pages of "
                           f"{m['page_bytes'] / MiB:.0f} MiB = {times(r)}; "
                           f"{m['cache_bytes'] / m['max_context_cache_bytes']:.2f}× one sized for max_context",
                  bound=f"every sequence preallocated for the longest one ({d.m('capacity')} tokens): "
                        f"{m['static_cache_bytes'] / MiB:,.0f} MiB", ratio=r,
                  verdict=at_most(r, MEMORY_TARGET, MEMORY_PARTLY),
                  target=f"supported: ≤ {MEMORY_TARGET}×, partly ≤ {MEMORY_PARTLY}×")


@rule(NAME, NO_MALLOC_KEY, "no memory from the driver in steady-state decode")
def _no_malloc(d: Data) -> Judged:
    m = d.m("memory")
    grew, segs = int(m["pool_reserved_growth_in_timed_steps"]), int(m["torch_new_segments_in_timed_steps"])
    n = int(m["pool_allocations_in_timed_steps"])
    return Judged(measured=f"over {d.m('steps')} timed steps: {n} pool allocations (KV pages), the pool's reserve "
                           f"grew {grew / MiB:.1f} MiB, PyTorch made {segs} new segments",
                  bound="pool stats and torch.cuda.memory_stats around the timed steps (both levels)",
                  ratio=None, verdict="supported" if segs == 0 and grew == 0 else "not supported",
                  target="supported: no new segment and no growth of the pool's reserve")


# --------------------------------------------------------------------------- figure
COLOR = {EAGER: GREY, EAGER_STATIC: GREY, COMPILED: "#9467bd", LEVEL1: PINNED, LEVEL2: "#ff7f0e", BOTH: RING}


def figures(r: dict, out: Path) -> dict[str, Path]:
    """tokens/s of every form as bars labelled with x eager, the target as a line."""
    plt = pyplot()
    m = r.get("metrics") or {}
    tps = m.get("tokens_per_s") or {}
    forms = [f for f in FORMS if is_num(tps.get(f))]
    ref = m.get("eager_reference", EAGER)
    need(ref in forms and len(forms) > 1, "metrics.tokens_per_s with eager and another form")
    fig, ax = plt.subplots(figsize=WIDE)
    eager = tps[ref]
    lines = [(DECODE_TARGET * eager, "--", f"target: {DECODE_TARGET}× eager")]
    if is_num(m.get("bound_ms_per_step")):
        lines.append((m["batch"] * 1e3 / m["bound_ms_per_step"], ":", "memory bound (weights + K/V once per step)"))
    ratio_bars(ax, forms, [tps[f] for f in forms], [COLOR.get(f, "#8c564b") for f in forms], eager,
               ratio_label="eager", lines=lines)
    ax.set_xlabel("decode, tokens/s")
    ax.set_title(f"decode of {m.get('batch', '?')} sequences: what each level adds")
    return {"decode tokens/s of each form (x PyTorch eager)": save(fig, out / f"{NAME}.png")}


# --------------------------------------------------------------------------- without the report
def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'form':44} {'tokens/s':>10} {'x eager':>8} {'ms/step':>8} {'rel err':>9}"]
    for r in rows:
        lines.append(f"{r['form']:44} {r['tokens/s']:10.0f} {r['x eager']:8.2f} {r['ms per step']:8.3f} "
                     f"{r['max rel err vs eager']:9.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .standalone import main as standalone

    return standalone("python -m fullpipe.experiments.two_level_decode", run, format_table, "fewer timed steps", argv)


if __name__ == "__main__":
    raise SystemExit(main())
