"""fullpipe bench two-level: the two levels together, an LLM-style layer stack prefilling
variable-length requests; what each level adds over PyTorch eager.

Claims (issue 18): prefill of variable-length requests at >= 1.3x PyTorch eager's tokens/s
with the SMs busy >= 90 % of the span; no cudaMalloc in steady state; device memory held
<= 0.6x preallocating for the longest request. Decode is the two-level-decode experiment
(two_level_decode.py).

Workload. The issue's stack (fullpipe.models, default StackConfig: 12 layers, width 2048,
16 heads of 128, SwiGLU 5632, vocab 32000, bf16; weights from init_weights(seed=0)), a
seeded batch of requests of random prompt lengths (64 .. 2048 tokens), the same weights and
requests for every form, on one GPU. The forms:

- PyTorch eager ("neither"): fullpipe.models.reference_prefill, one request at a time
  (torch.matmul = cuBLAS, SDPA, the elementwise pieces in PyTorch), PyTorch's caching
  allocator, the default stream;
- the same eager in a child process started with
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (the allocator backend is chosen when
  torch starts: it is in the child's environment before torch is imported);
- level 1 only: StagedStack(devices=[gpu], kernels="torch"): the same PyTorch kernels
  (cuBLAS, SDPA per request, PyTorch elementwise) on requests packed into micro-batches of
  at most MICROBATCH_TOKENS tokens, each micro-batch's scratch exact-size from fullpipe's
  stream-ordered pool, all enqueued on one non-default stream with the index arrays
  uploaded from pinned memory: the host never waits for the GPU until the end;
- level 2 only: DecoderStack(kernels="fullpipe", pool=None): fullpipe's kernels (Hopper
  GEMM, flash attention, fused elementwise) on the whole batch packed at once, PyTorch's
  allocator, PyTorch's current stream;
- both: StagedStack(devices=[gpu]): fullpipe's kernels, the pool, the micro-batches.

Correct first: every form's logits (each request's last token) are compared with eager's,
relative L2 per request, before anything is timed (bound MAX_REL_ERR, see there); a few
requests also against the float32 reference (weights upcast), for the bf16 noise level.

Timing: wall time of a whole prefill (host enqueue included) between two
torch.cuda.synchronize(); a warm-up (the checked run) first, then REPEAT rounds, the forms
taking turns within a round; the median. tokens/s = the batch's tokens / that.

From the "both" form: three prefills under the CUPTI tracer, the median one judged (SMs
busy = the union of kernel intervals as a share of the span from the first to the last GPU
operation; idle gaps);
memory held (the pool's reserved bytes, and PyTorch's allocator above its level before the
prefill) vs preallocating for the longest request; pool stats and PyTorch's segment count
across further prefills after the first (steady state: no new memory from the driver).

    python -m fullpipe.experiments.two_level [--quick] [--json FILE]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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

NAME = "two-level"
TITLE = "The two levels together: an LLM-style layer stack prefilling variable-length requests"
CLAIM = ("Both levels together (streams, pool, micro-batches + pipelined kernels) prefill variable-length "
         "requests at >= 1.3x PyTorch eager's tokens/s with the SMs busy >= 90 % of the span, no cudaMalloc in "
         "steady state and <= 0.6x the memory of preallocating for the longest request")
PRELOAD = ("torch",)  # imported ahead while the previous experiment runs (report/worker.py)
TECHNIQUE = (
    "A decoder-only transformer stack (12 layers, width 2048, bf16) serving prompts of random lengths. Level 1 "
    "packs the requests into micro-batches, takes each one's scratch exact-size from a stream-ordered pool and "
    "enqueues everything on a stream without the host waiting; level 2 runs each layer on pipelined kernels "
    "(a TMA + wgmma warp-specialized GEMM, flash attention over the packed variable-length batch, fused "
    "elementwise kernels). Each level is measured alone and both together, against PyTorch eager one request "
    "at a time, with the same weights and requests."
)
PREFILL_KEY, SM_BUSY_KEY, MEMORY_KEY, NO_MALLOC_KEY = ("two-level-prefill", "two-level-sm-busy",
                                                       "two-level-memory", "two-level-no-malloc")
# The claims whose verdicts make this experiment's verdict (claims.summary): the prefill half of
# the issue (the decode half is two_level_decode's).
VERDICT_FROM = (PREFILL_KEY, SM_BUSY_KEY, MEMORY_KEY, NO_MALLOC_KEY)

EAGER, EAGER_ASYNC = "PyTorch eager", "PyTorch eager, cudaMallocAsync"
LEVEL1, LEVEL2, BOTH = "level 1 only", "level 2 only", "both levels"
BOTH_PIPELINE = "both levels, StreamPipeline"
FORMS = (EAGER, EAGER_ASYNC, LEVEL1, LEVEL2, BOTH, BOTH_PIPELINE)
PIPELINE_STREAMS = 2
WHAT = {
    EAGER: "reference_prefill per request: cuBLAS + SDPA + PyTorch elementwise, caching allocator (neither level)",
    EAGER_ASYNC: "the same eager, child process with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync",
    LEVEL1: "PyTorch kernels packed into micro-batches, scratch from fullpipe's pool, one stream, pinned uploads",
    LEVEL2: "fullpipe kernels (Hopper GEMM, flash attention, fused elementwise), whole batch, one stream, "
            "PyTorch's allocator",
    BOTH: "fullpipe kernels + pool + micro-batches on a stream (StagedStack on one GPU)",
    BOTH_PIPELINE: f"the same micro-batches through fullpipe's StreamPipeline on {PIPELINE_STREAMS} streams: token ids "
                   "H2D by the executor, logits D2H into pinned host memory (models.PipelinedPrefill)",
}

SEED = 0  # init_weights
REQUEST_SEED = 18
REQUESTS, QUICK_REQUESTS = 64, 24
MIN_LEN, MAX_LEN = 64, 2048  # prompt lengths, both ends included
MICROBATCH_TOKENS, QUICK_MICROBATCH_TOKENS = 8192, 4096
REPEAT, QUICK_REPEAT = 3, 2
STEADY_PREFILLS = 2  # further "both" prefills watched for new memory from the driver
FP32_REQUESTS = 4  # requests also checked against the float32 reference
# Each form vs eager, relative L2 of each request's logits. Both are bf16 stacks that differ
# in GEMM kernels and summation order (and fullpipe's fused elementwise kernels round at
# other points): ~10 bf16 roundings of the activations per layer (2^-9 relative each) over 12
# layers add up, as a random walk, to ~1-2 % in the logits of each; 5e-2 is ~3x that, and far
# below what a real mistake gives (a wrong mask, position or weight: 0.3 and more).
MAX_REL_ERR = 5e-2
CHILD_TIMEOUT_S = 150
EXCERPT_MS = 3.0  # the SM-busy timeline excerpt of the figure: the first milliseconds of the span
GAP_NS = 10_000  # idle gaps of the SMs at least this long are counted on their own
TRACED_PREFILLS = 3  # prefills under CUPTI: the median one is judged

# Targets (issue 18)
PREFILL_TARGET, PREFILL_PARTLY = 1.3, 1.0
SM_BUSY_TARGET, SM_BUSY_PARTLY = 0.9, 0.75
MEMORY_TARGET, MEMORY_PARTLY = 0.6, 1.0
MiB = 1 << 20


# --------------------------------------------------------------------------- the workload
def make_requests(n: int, vocab: int, seed: int = REQUEST_SEED) -> list[np.ndarray]:
    """``n`` prompts of random lengths MIN_LEN .. MAX_LEN (int32 token ids)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, n)
    return [rng.integers(0, vocab, int(L)).astype(np.int32) for L in lengths]


def memory_bounds(config: Any, lengths: list[int], microbatch_tokens: int) -> dict[str, int]:
    """What preallocating would hold, from the plans of fullpipe.models.memory (bytes):

    - ``preallocated``: one buffer that fits any micro-batch of this run with each of its
      requests padded to the longest request of the batch (the same micro-batches as the
      pool's form, without exact sizes: the bound of the memory claim);
    - ``padded_whole``: the whole batch at once, each request padded to the longest
      (models.padded_scratch_bytes);
    - ``packed_whole``: the whole batch packed at once (what "level 2 only" takes);
    - ``largest_microbatch``: the largest micro-batch packed (what the pool needs at least)."""
    from ..models import packed_scratch_bytes, padded_scratch_bytes, plan_microbatches, scratch_plan

    groups = plan_microbatches(lengths, microbatch_tokens)
    longest, most = max(lengths), max(len(g) for g in groups)
    return {"preallocated": scratch_plan(config, most * longest, most).nbytes,
            "padded_whole": padded_scratch_bytes(config, lengths),
            "packed_whole": packed_scratch_bytes(config, lengths),
            "largest_microbatch": max(packed_scratch_bytes(config, [lengths[i] for i in g]) for g in groups),
            "microbatches": len(groups), "most_requests_per_microbatch": most, "longest": longest}


def rel_err_rows(a: Any, b: Any) -> list[float]:
    """Relative L2 error of each row of ``a`` against ``b`` (float32)."""
    a, b = a.float(), b.float()
    return [float(x) for x in ((a - b).norm(dim=1) / b.norm(dim=1)).cpu()]


# --------------------------------------------------------------------------- the cudaMallocAsync peer
def child_main(args_path: str) -> int:
    """The eager peer in this (child) process: PYTORCH_CUDA_ALLOC_CONF was set by the parent
    before torch was imported here. Reads its job from ``args_path`` (JSON), writes the
    logits of the warm-up (float32 .npy) and the timings (JSON)."""
    job = json.loads(Path(args_path).read_text())
    try:
        return _child(job)
    except BaseException as exc:  # the reason, without formatting source lines (which can fail too)
        import traceback

        frames = [f"{f.f_code.co_filename}:{line} {f.f_code.co_name}" for f, line in traceback.walk_tb(exc.__traceback__)]
        Path(job["out"]).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "frames": frames[-8:]}))
        return 1


def _child(job: dict[str, Any]) -> int:
    import torch

    from ..models import StackConfig, init_weights, reference_prefill

    config = StackConfig(**job["config"])
    device = job["device"]
    # raw int32 tokens, lengths in the job: no .npz (on an H200 machine the child could not parse
    # a 64-member .npz the parent had written: null bytes in an array header)
    tokens = np.fromfile(job["requests"], dtype=np.int32)
    requests = np.split(tokens, np.cumsum(job["lengths"])[:-1])
    backend = torch.cuda.get_allocator_backend() if device.startswith("cuda") else "cpu"
    weights = init_weights(config, seed=job["seed"], device=device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    logits = reference_prefill(config, weights, requests)
    sync()
    logits.float().cpu().numpy().tofile(job["logits"])
    walls = []
    for _ in range(job["repeat"]):
        sync()
        t0 = time.perf_counter()
        reference_prefill(config, weights, requests)
        sync()
        walls.append(time.perf_counter() - t0)
    Path(job["out"]).write_text(json.dumps({"walls": walls, "backend": backend}))
    return 0


def run_async_peer(config: Any, seed: int, requests: list[np.ndarray], device: str, repeat: int,
                   timeout_s: float = CHILD_TIMEOUT_S, log: Path | None = None
                   ) -> tuple[dict[str, Any] | None, np.ndarray | None, str | None]:
    """(timings, logits, None) from the eager peer under cudaMallocAsync in a child process,
    or (None, None, why it could not run). ``log``: where the child's stderr goes when it fails."""
    import dataclasses

    with tempfile.TemporaryDirectory(prefix="fullpipe-two-level-") as tmp:
        t = Path(tmp)
        np.concatenate(requests).astype(np.int32).tofile(t / "requests.i32")
        job = {"config": dataclasses.asdict(config), "seed": seed, "device": device, "repeat": repeat,
               "requests": str(t / "requests.i32"), "lengths": [int(r.size) for r in requests],
               "logits": str(t / "logits.f32"), "out": str(t / "out.json")}
        (t / "job.json").write_text(json.dumps(job))
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
        src = str(Path(__file__).resolve().parents[2])  # this fullpipe first on the child's path
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        code = f"import sys; from fullpipe.experiments.two_level import child_main; sys.exit(child_main({str(t / 'job.json')!r}))"
        try:
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None, None, f"the child process did not finish in {timeout_s:.0f} s"
        if p.returncode != 0:
            if log is not None:
                Path(log).parent.mkdir(parents=True, exist_ok=True)
                Path(log).write_text(f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
            try:
                err = json.loads((t / "out.json").read_text())
                said = f"{err['error']} (at {' <- '.join(reversed(err['frames'][-3:]))})"
            except (OSError, ValueError, KeyError):
                said = " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
            return None, None, f"the child process failed (exit {p.returncode}): {said[:500]}"
        out = json.loads((t / "out.json").read_text())
        if device.startswith("cuda") and out["backend"] != "cudaMallocAsync":
            return None, None, f"PyTorch in the child reports allocator backend {out['backend']!r}, not cudaMallocAsync"
        logits = np.fromfile(t / "logits.f32", dtype=np.float32).reshape(len(requests), config.vocab)
        return out, logits, None


# --------------------------------------------------------------------------- the measurement
def measure_prefill(config: Any, requests: list[np.ndarray], *, device_index: int = 0, seed: int = SEED,
                    microbatch_tokens: int = MICROBATCH_TOKENS, repeat: int = REPEAT, async_peer: bool = True,
                    traced: bool = True, out_dir: Path | None = None,
                    progress: Callable[[float, str], None] = lambda f, m: None) -> tuple[dict[str, Any], list[str]]:
    """Every form on ``requests``: logits checked against eager first, then timed; the
    "both" form's memory, steady state and CUPTI trace. Returns (metrics, notes); metrics
    has ``wrong`` (form -> max relative error) when a form's logits are off, and then
    nothing was timed."""
    import torch

    from ..models import DecoderStack, StagedStack, init_weights, reference_prefill

    dev = torch.device(f"cuda:{device_index}")
    torch.cuda.set_device(dev)
    lengths = [int(r.size) for r in requests]
    tokens = sum(lengths)
    notes: list[str] = []
    progress(0.02, "weights")
    weights = init_weights(config, seed=seed, device=dev)

    def sync() -> None:
        torch.cuda.synchronize(dev)

    level1 = StagedStack(config, weights, devices=[device_index], kernels="torch")
    both = StagedStack(config, weights, devices=[device_index])
    level2 = DecoderStack(config, weights, kernels="fullpipe", pool=None)
    from ..cuda.pool import DevicePool
    from ..models.pipelined import PipelinedPrefill

    pipe_pool = DevicePool(device_index)
    pipelined = PipelinedPrefill(DecoderStack(config, weights, kernels="fullpipe", pool=pipe_pool),
                                 streams=PIPELINE_STREAMS)
    level2_stream = torch.cuda.Stream(dev)  # one stream, as the others (the legacy default stream is not one)
    prefill: dict[str, Callable[[], Any]] = {
        EAGER: lambda: reference_prefill(config, weights, requests),
        LEVEL1: lambda: level1.prefill(requests, microbatch_tokens=microbatch_tokens).logits,
        LEVEL2: lambda: level2.prefill(requests, stream=level2_stream).logits,
        BOTH: lambda: both.prefill(requests, microbatch_tokens=microbatch_tokens).logits,
        BOTH_PIPELINE: lambda: pipelined.prefill(requests, microbatch_tokens=microbatch_tokens).logits,
    }
    try:
        # 1. correct first: the warm-up's logits of every form against eager's
        logits: dict[str, Any] = {}
        for i, (name, fn) in enumerate(prefill.items()):
            progress(0.05 + 0.25 * i / len(prefill), f"{name}: warm-up and check")
            out = fn()
            sync()
            logits[name] = out.float().to(dev)  # the pipelined form's logits are on the host
        ref = logits[EAGER]
        pool = both.stages[0].pool
        pool_first = pool.stats()  # after the first "both" prefill: what steady state is compared with
        errors = {name: rel_err_rows(x, ref) for name, x in logits.items() if name != EAGER}
        k = min(FP32_REQUESTS, len(requests))
        ref32 = reference_prefill(config, weights, requests[:k], dtype=torch.float32).float()
        sync()
        vs_fp32 = {name: max(rel_err_rows(x[:k], ref32)) for name, x in logits.items()}
        del ref32
        metrics: dict[str, Any] = {
            "tokens": tokens, "requests": len(requests), "lengths": lengths, "microbatch_tokens": microbatch_tokens,
            "max_rel_err_vs_eager": {n: max(e) for n, e in errors.items()}, "max_rel_err_bound": MAX_REL_ERR,
            "max_rel_err_vs_fp32": vs_fp32, "fp32_requests": k,
            "matmul_choices": {n: c.backend for n, c in level2.matmul_choices.items()},
            "attention": level2.attention_backend,
        }
        wrong = {n: max(e) for n, e in errors.items() if not max(e) <= MAX_REL_ERR}
        if wrong:
            metrics["wrong"] = wrong
            return metrics, notes
        del logits

        # 2. timing: rounds in which the forms take turns
        walls: dict[str, list[float]] = {n: [] for n in prefill}
        for rep in range(repeat):
            progress(0.3 + 0.3 * rep / repeat, f"timing: round {rep + 1} of {repeat}")
            for name, fn in in_turn(list(prefill.items()), rep):
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                walls[name].append(time.perf_counter() - t0)

        # 3. the "both" form: memory held in one prefill, steady state, trace
        progress(0.62, "both levels: memory and steady state")
        segments0 = torch.cuda.memory_stats(dev).get("segment.all.allocated", 0)
        for _ in range(STEADY_PREFILLS):
            prefill[BOTH]()
            sync()
        after = pool.stats()
        segments1 = torch.cuda.memory_stats(dev).get("segment.all.allocated", 0)
        pool.reset_high_water_marks()
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        prefill[BOTH]()
        sync()
        one = pool.stats()
        torch_extra = torch.cuda.max_memory_allocated(dev) - base
        metrics.update({
            "pool_after_first": pool_first.as_dict(), "pool_after_steady": after.as_dict(),
            "steady_prefills": repeat + STEADY_PREFILLS,
            "pool_reserved_growth_bytes": after.reserved_bytes - pool_first.reserved_bytes,
            "pool_reserved_high_growth_bytes": after.reserved_high_bytes - pool_first.reserved_high_bytes,
            "pool_allocations_per_prefill": (after.allocations_total - pool_first.allocations_total)
                                            / (repeat + STEADY_PREFILLS),
            "torch_steady_prefills": STEADY_PREFILLS,
            "torch_new_segments_steady": int(segments1 - segments0),
            "pool_reserved_high_bytes": one.reserved_high_bytes, "pool_used_high_bytes": one.used_high_bytes,
            "torch_peak_extra_bytes": int(torch_extra),
            "held_bytes": one.reserved_high_bytes + int(torch_extra),
            "memory_bounds": memory_bounds(config, lengths, microbatch_tokens),
        })
        if traced:
            progress(0.7, f"both levels: {TRACED_PREFILLS} prefills under CUPTI")
            try:
                metrics.update(_traced(lambda: prefill[BOTH](), sync, out_dir))
            except Exception as exc:  # CUPTI missing or refused: the timings stand without it
                metrics["trace_error"] = f"{type(exc).__name__}: {exc}"
                notes.append(f"no CUPTI trace of the both-levels prefill: {metrics['trace_error']}")
            try:
                metrics.update(_traced_pipeline(lambda: prefill[BOTH_PIPELINE](), sync))
            except Exception as exc:
                notes.append(f"no CUPTI trace of the StreamPipeline prefill: {type(exc).__name__}: {exc}")
        if level2.matmul_choices["wqkv"].backend == "hopper":  # the roles inside one of the stack's GEMMs
            progress(0.76, "inside one kernel: the warp-specialized GEMM's roles")
            try:
                metrics.update(role_timeline(config, microbatch_tokens, device_index))
            except Exception as exc:  # the figure's lower half is left out, the claims stand
                metrics["roles_error"] = f"{type(exc).__name__}: {exc}"
                notes.append(f"no role timeline: {metrics['roles_error']}")
    finally:
        level1.close()
        both.close()
        pipelined.close()
    del level1, both, level2, pipelined, weights
    pipe_pool.close()
    torch.cuda.empty_cache()

    # 4. the eager peer under cudaMallocAsync, in its own process (after the others: its GPU is idle)
    if async_peer:
        progress(0.8, "PyTorch eager under cudaMallocAsync (child process)")
        out, child_logits, why = run_async_peer(config, seed, requests, f"cuda:{device_index}", repeat,
                                                log=None if out_dir is None else Path(out_dir) / f"{NAME}-child.log")
        if why is None:
            err = max(rel_err_rows(torch.from_numpy(child_logits), ref.cpu()))
            metrics["max_rel_err_vs_eager"][EAGER_ASYNC] = err
            if not err <= MAX_REL_ERR:
                why = f"its logits differ from eager's (max relative error {err:.3g}): not timed"
            else:
                walls[EAGER_ASYNC] = out["walls"]
        if why is not None:
            metrics["async_skipped"] = why
            notes.append(f"{EAGER_ASYNC} skipped: {why}")
    else:
        metrics["async_skipped"] = "not asked for"

    wall = {n: median(w) for n, w in walls.items()}
    metrics.update({
        "wall_s": wall, "spread": {n: spread(w) for n, w in walls.items()},
        "tokens_per_s": {n: tokens / w for n, w in wall.items()},
        "vs_eager": {n: wall[EAGER] / w for n, w in wall.items()},
        "repeat": repeat,
    })
    return metrics, notes


def _traced(fn: Callable[[], Any], sync: Callable[[], None], out_dir: Path | None) -> dict[str, Any]:
    """TRACED_PREFILLS prefills under the CUPTI tracer; the one with the median SMs-busy
    share gives the numbers (SMs busy over the span, idle gaps, an excerpt, the trace
    file), and every prefill's share is kept: one traced prefill read anywhere from 43 % to
    96 % on one H100 machine within minutes (a Python-launched prefill follows the host)."""
    from .. import trace

    runs = []
    for _ in range(TRACED_PREFILLS):
        t0 = time.perf_counter()
        with trace.capture(backend="cupti", tags=False) as tl:
            fn()
            sync()
        traced_wall = time.perf_counter() - t0
        recs = tl.timeline.device_records()
        kernels = [(r.start_ns, r.end_ns) for r in recs if r.kind == "kernel"]
        if not kernels:
            raise RuntimeError("the trace holds no kernel records")
        start, end = tl.timeline.span_ns()
        runs.append((sm_stats(kernels, start, end), tl, recs, kernels, start, traced_wall))
    runs.sort(key=lambda r: r[0]["sm_busy_fraction"])
    out, tl, recs, kernels, start, traced_wall = runs[len(runs) // 2]
    out["sm_busy_fractions"] = [r[0]["sm_busy_fraction"] for r in runs]
    cut = start + int(EXCERPT_MS * 1e6)
    out["kernel_excerpt_ms"] = [[(r.start_ns - start) / 1e6, (min(r.end_ns, cut) - start) / 1e6, kernel_kind(r.name)]
                                for r in recs if r.kind == "kernel" and r.start_ns < cut]
    out.update({"trace_kernels": len(kernels), "trace_records": len(recs), "trace_wall_s": traced_wall,
                "trace_copies": sum(1 for r in recs if r.kind == "memcpy")})
    if out_dir is not None:
        tdir = Path(out_dir) / "traces"
        tdir.mkdir(parents=True, exist_ok=True)
        tl.save(tdir / f"{NAME}-both.json")
        out["trace_file"] = f"traces/{NAME}-both.json"
    return out


def _traced_pipeline(fn: Callable[[], Any], sync: Callable[[], None]) -> dict[str, Any]:
    """One prefill through the StreamPipeline under CUPTI: its copies (token ids up,
    logits down) and how much of their time the SMs were computing."""
    from .. import trace
    from ..trace import metrics as tm

    with trace.capture(backend="cupti", tags=False) as tl:
        fn()
        sync()
    s = tm.summarize(tl.timeline)
    recs = tl.timeline.device_records()
    copies = [(r.start_ns, r.end_ns) for r in recs if r.kind == "memcpy" and r.direction in ("h2d", "d2h")]
    return {"pipeline_copy_busy_ns": tm.busy(copies), "pipeline_copy_under_compute_ns": s.copy_compute_overlap_ns,
            "pipeline_h2d_bytes": s.engines["h2d"].bytes, "pipeline_d2h_bytes": s.engines["d2h"].bytes,
            "pipeline_sm_busy_fraction": s.engines["compute"].busy_fraction}


KERNEL_KINDS = ("GEMM", "attention", "elementwise", "other")


def kernel_kind(name: str) -> str:
    """What a kernel of the stack does, from its name (fullpipe's and PyTorch's/cuBLAS's)."""
    n = name.lower()
    if "gemm" in n or "nvjet" in n or "cublas" in n or "cutlass" in n:
        return "GEMM"
    if "attention" in n or "flash" in n or "fmha" in n:
        return "attention"
    if any(w in n for w in ("rms_norm", "rope", "swiglu", "elementwise", "index")):
        return "elementwise"
    return "other"


def role_timeline(config: Any, tokens: int, device_index: int) -> dict[str, Any]:
    """Inside one kernel: the stack's fused QKV projection (``tokens`` x width @ width x
    qkv_width) by the warp-specialized Hopper GEMM's role-stamped build: each role's
    activity in its first blocks (kernels.role_stamps), ns from the first block's start."""
    import torch

    from ..kernels.role_stamps import gemm_role_stamps

    g = torch.Generator(device=f"cuda:{device_index}").manual_seed(1)
    a = torch.randn(tokens, config.width, device=f"cuda:{device_index}", generator=g).to(torch.bfloat16)
    b = (torch.randn(config.width, config.qkv_width, device=f"cuda:{device_index}", generator=g) / 45).to(torch.bfloat16)
    out, blocks = gemm_role_stamps(a, b)
    err = float(((out.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()))
    return {"roles_shape": [tokens, config.qkv_width, config.width], "roles_rel_err": err,
            "roles_blocks": [{"sm": r.sm, "span": list(r.span), "producer": [list(x) for x in r.producer_wait],
                              "consumer_wait": [[list(x) for x in wg] for wg in r.consumer_wait],
                              "consumer_mma": [[list(x) for x in wg] for wg in r.consumer_mma],
                              "epilogue": [list(x) for x in r.epilogue], "busy": r.busy_fraction()}
                             for r in blocks]}


def sm_stats(kernels: list[tuple[int, int]], start: int, end: int) -> dict[str, Any]:
    """SMs busy (the union of kernel intervals) over ``[start, end)`` and its idle gaps;
    the busy intervals of the first EXCERPT_MS as an excerpt (ms from the start)."""
    from ..trace import metrics as tm

    span = end - start
    busy = tm.busy(kernels)
    idle = tm.gaps(kernels, start, end)
    long = [(s, e) for s, e in idle if e - s >= GAP_NS]
    cut = start + int(EXCERPT_MS * 1e6)
    excerpt = [[(max(s, start) - start) / 1e6, (min(e, cut) - start) / 1e6] for s, e in tm.merge(kernels) if s < cut]
    return {"trace_span_ms": span / 1e6, "sm_busy_ms": busy / 1e6, "sm_busy_fraction": busy / span if span else 0.0,
            "sm_gaps": len(idle), "sm_idle_ms": sum(e - s for s, e in idle) / 1e6,
            "sm_largest_gap_ms": max((e - s for s, e in idle), default=0) / 1e6,
            "sm_gaps_over_10us": len(long), "sm_idle_in_gaps_over_10us_ms": sum(e - s for s, e in long) / 1e6,
            "sm_excerpt_ms": excerpt, "sm_excerpt_window_ms": min(EXCERPT_MS, span / 1e6)}


# --------------------------------------------------------------------------- the run
def run(ctx: Context) -> Result:
    dev = ctx.device
    try:
        import torch  # noqa: F401
    except ImportError:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=["skipped: PyTorch is not installed (the eager peers and the stack's weights are PyTorch)"])
    from ..models import StackConfig

    config = StackConfig()
    n = QUICK_REQUESTS if ctx.quick else REQUESTS
    mb = QUICK_MICROBATCH_TOKENS if ctx.quick else MICROBATCH_TOKENS
    repeat = QUICK_REPEAT if ctx.quick else REPEAT
    requests = make_requests(n, config.vocab)
    params = {"config": {"layers": config.layers, "width": config.width, "heads": config.heads,
                         "kv_heads": config.kv_heads, "head_dim": config.head_dim, "ffn_width": config.ffn_width,
                         "vocab": config.vocab, "dtype": config.dtype},
              "requests": n, "lengths": f"{MIN_LEN}..{MAX_LEN}", "request_seed": REQUEST_SEED, "weight_seed": SEED,
              "microbatch_tokens": mb, "repeat": repeat, "quick": ctx.quick, "forms": WHAT}
    metrics, notes = measure_prefill(config, requests, device_index=dev.index, microbatch_tokens=mb, repeat=repeat,
                                     out_dir=ctx.out_dir, progress=ctx.progress)
    if metrics.get("wrong"):
        return Result(NAME, CLAIM, "failed", device_info(dev), params, metrics,
                      notes=[f"wrong logits, nothing timed: {metrics['wrong']} (max relative L2 vs eager per request; "
                             f"bound {MAX_REL_ERR})"] + notes)
    traces = {"both levels, one prefill (CUPTI)": metrics["trace_file"]} if metrics.get("trace_file") else {}
    eager_tps = metrics["tokens_per_s"][EAGER]
    return with_claims(Result(
        NAME, CLAIM, UNJUDGED, device_info(dev), params, metrics,
        bound=Bound("PyTorch eager tokens/s (same run, same weights and requests)", eager_tps, "tokens/s"),
        ratio=metrics["vs_eager"].get(BOTH), table=table_rows(metrics),
        notes=_notes(metrics) + notes, traces=traces), VERDICT_FROM)


def table_rows(m: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per form: tokens/s, x eager, its error against eager."""
    rows = []
    for name in FORMS:
        if name not in m["tokens_per_s"]:
            continue
        rows.append({"form": name, "tokens/s": m["tokens_per_s"][name], "x eager": m["vs_eager"][name],
                     "wall ms": 1e3 * m["wall_s"][name], "spread": m["spread"][name],
                     "max rel err vs eager": m["max_rel_err_vs_eager"].get(name, 0.0), "what": WHAT[name]})
    return rows


def _notes(m: dict[str, Any]) -> list[str]:
    v = m["vs_eager"]
    out = [f"{m['requests']} requests of {MIN_LEN}..{MAX_LEN} tokens ({m['tokens']} tokens); micro-batches of "
           f"<= {m['microbatch_tokens']} tokens ({m['memory_bounds']['microbatches']} of them); wall time of a "
           f"whole prefill between two synchronizes, median of {m['repeat']} rounds after a warm-up",
           f"logits checked before timing: max relative L2 per request vs eager "
           + ", ".join(f"{k} {e:.2e}" for k, e in m["max_rel_err_vs_eager"].items())
           + f" (bound {MAX_REL_ERR}); vs float32 on {m['fp32_requests']} requests: "
           + ", ".join(f"{k} {e:.2e}" for k, e in m["max_rel_err_vs_fp32"].items()),
           "what each level adds: "
           + f"level 1 alone {times(v[LEVEL1])} eager, level 2 alone {times(v[LEVEL2])}, both {times(v[BOTH])}; "
           + f"level 1 on top of level 2 {times(v[BOTH] / v[LEVEL2])}, level 2 on top of level 1 "
           + f"{times(v[BOTH] / v[LEVEL1])}",
           "projections: " + ", ".join(f"{k} {b}" for k, b in m["matmul_choices"].items())
           + f"; attention: {m['attention']}"]
    if m.get("pipeline_copy_busy_ns"):
        copy, under = m["pipeline_copy_busy_ns"], m["pipeline_copy_under_compute_ns"]
        out.append(f"{BOTH_PIPELINE} (CUPTI): its copies (token ids up {m['pipeline_h2d_bytes'] / MiB:.1f} MiB, logits "
                   f"down {m['pipeline_d2h_bytes'] / MiB:.1f} MiB) took {copy / 1e6:.2f} ms of copy-engine time, "
                   f"{under / copy:.0%} of it while the SMs were computing; SMs busy "
                   f"{m['pipeline_sm_busy_fraction']:.1%} of its span")
    return out


# --------------------------------------------------------------------------- verdicts
@rule(NAME, PREFILL_KEY)
def _prefill(d: Data) -> Judged:
    target = f"supported: both levels ≥ {PREFILL_TARGET}× PyTorch eager's tokens/s, partly ≥ {PREFILL_PARTLY}×"
    tps = d.m("tokens_per_s")
    eager, both = float(tps[EAGER]), float(tps[BOTH])
    r = both / eager
    others = ", ".join(f"{k} {tps[k] / eager:.2f}×" for k in (EAGER_ASYNC, LEVEL1, LEVEL2, BOTH_PIPELINE) if is_num(tps.get(k)))
    skipped = d.m_or(None, "async_skipped")
    return Judged(measured=f"{both:,.0f} tokens/s = {times(r)} eager ({others}"
                           + (f"; cudaMallocAsync peer not run: {skipped}" if skipped else "") + ")",
                  bound=f"PyTorch eager {eager:,.0f} tokens/s (same run: {d.m('requests')} requests, "
                        f"{d.m('tokens')} tokens)",
                  ratio=r, verdict=at_least(r, PREFILL_TARGET, PREFILL_PARTLY), target=target)


@rule(NAME, SM_BUSY_KEY)
def _sm_busy(d: Data) -> Judged:
    target = f"supported: SMs busy ≥ {SM_BUSY_TARGET:.0%} of the span (CUPTI), partly ≥ {SM_BUSY_PARTLY:.0%}"
    err = d.m_or(None, "trace_error")
    if err is not None:
        return Judged(measured=f"not measured: no CUPTI trace ({err})", bound="", ratio=None, verdict="skipped",
                      target=target)
    f = float(d.m("sm_busy_fraction"))
    every = d.m_or(None, "sm_busy_fractions")  # (results before session 12: one traced prefill)
    which = (f"the median of {len(every)} traced prefills ({min(every):.0%}–{max(every):.0%}): " if every else "")
    return Judged(measured=f"{which}SMs busy {f:.1%} of the prefill's span ({d.m('trace_kernels')} kernels; idle "
                           f"{d.m('sm_idle_ms'):.2f} ms in {d.m('sm_gaps')} gaps, {d.m('sm_gaps_over_10us')} of them "
                           f"≥ 10 µs, largest {1e3 * d.m('sm_largest_gap_ms'):.0f} µs)",
                  bound=f"span {d.m('trace_span_ms'):.1f} ms, first to last GPU operation (both levels, CUPTI)",
                  ratio=f, verdict=at_least(f, SM_BUSY_TARGET, SM_BUSY_PARTLY), target=target)


@rule(NAME, MEMORY_KEY)
def _memory(d: Data) -> Judged:
    target = (f"supported: memory held ≤ {MEMORY_TARGET}× preallocating for the longest request, "
              f"partly ≤ {MEMORY_PARTLY}×")
    b = d.m("memory_bounds")
    held, pool, extra = d.m("held_bytes"), d.m("pool_reserved_high_bytes"), d.m("torch_peak_extra_bytes")
    r = held / b["preallocated"]
    return Judged(measured=f"{held / MiB:,.0f} MiB held (pool reserved {pool / MiB:,.0f} MiB + PyTorch's allocator "
                           f"{extra / MiB:,.0f} MiB) = {times(r)}; {held / b['padded_whole']:.2f}× the whole batch "
                           f"padded ({b['padded_whole'] / MiB:,.0f} MiB), {held / b['packed_whole']:.2f}× the whole "
                           f"batch packed ({b['packed_whole'] / MiB:,.0f} MiB)",
                  bound=f"preallocated for the longest request ({b['longest']} tokens) × the most requests of a "
                        f"micro-batch ({b['most_requests_per_microbatch']}): {b['preallocated'] / MiB:,.0f} MiB",
                  ratio=r, verdict=at_most(r, MEMORY_TARGET, MEMORY_PARTLY), target=target)


@rule(NAME, NO_MALLOC_KEY)
def _no_malloc(d: Data) -> Judged:
    target = ("supported: after the first prefill, neither the pool nor PyTorch's allocator takes memory from the "
              "driver; partly: the pool does not, PyTorch's allocator (logits, small temporaries) does")
    grew = int(d.m("pool_reserved_growth_bytes")) + int(d.m("pool_reserved_high_growth_bytes"))
    segs = int(d.m("torch_new_segments_steady"))
    first = int(d.m("pool_after_first", "reserved_bytes"))
    last = int(d.m("pool_after_steady", "reserved_bytes"))
    measured = (f"over {d.m('steady_prefills')} prefills after the first: the pool's reserved bytes grew by "
                f"{grew / MiB:.1f} MiB ({d.m('pool_allocations_per_prefill'):.0f} stream-ordered allocations per "
                f"prefill); over the last {d.m('torch_steady_prefills')}, PyTorch's allocator made {segs} new "
                f"segments (cudaMalloc)")
    verdict = "supported" if grew == 0 and segs == 0 else "partly supported" if grew == 0 else "not supported"
    return Judged(measured=measured, bound=f"the pool's reserved bytes after the first prefill: {first / MiB:,.0f} MiB "
                                           "(pool stats; PyTorch: torch.cuda.memory_stats segment.all.allocated)",
                  ratio=last / first if first else None, verdict=verdict, target=target)


# --------------------------------------------------------------------------- figure
FORM_COLOR = {EAGER: GREY, EAGER_ASYNC: GREY, LEVEL1: PINNED, LEVEL2: "#ff7f0e", BOTH: RING, BOTH_PIPELINE: "#17becf"}


def figures(r: dict, out: Path) -> dict[str, Path]:
    """tokens/s of each form as bars labelled with x eager, the target as a line (left);
    the SM-busy timeline excerpt of the both-levels prefill (right, when traced)."""
    plt = pyplot()
    m = r.get("metrics") or {}
    tps = m.get("tokens_per_s") or {}
    forms = [f for f in FORMS if is_num(tps.get(f))]
    need(EAGER in forms and len(forms) > 1, "metrics.tokens_per_s with eager and another form")
    excerpt = m.get("sm_excerpt_ms") or []
    fig, axes = plt.subplots(1, 2 if excerpt else 1, figsize=WIDE, squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2] if excerpt else [1]})
    ax = axes[0][0]
    eager = tps[EAGER]
    ratio_bars(ax, forms, [tps[f] for f in forms], [FORM_COLOR[f] for f in forms], eager, ratio_label="eager",
               lines=[(PREFILL_TARGET * eager, "--", f"target: {PREFILL_TARGET}× eager")], scale=1e3, margin=1.25)
    ax.set_xlabel("prefill, thousand tokens/s")
    ax.set_title(f"what each level adds ({m.get('requests', '?')} requests, {m.get('tokens', '?')} tokens)")
    if excerpt:
        a2 = axes[0][1]
        a2.broken_barh([(s, e - s) for s, e in excerpt], (0, 1), color=RING)
        a2.set_xlim(0, m.get("sm_excerpt_window_ms") or EXCERPT_MS)
        a2.set_ylim(0, 1)
        a2.set_yticks([])
        a2.set_xlabel("ms from the first GPU operation")
        f = m.get("sm_busy_fraction")
        a2.set_title("SMs busy, both levels (CUPTI)" + (f": {f:.1%} of the span" if is_num(f) else ""))
    figs = {"prefill tokens/s of each form (x PyTorch eager), and the SM-busy timeline of the both-levels prefill":
            save(fig, out / f"{NAME}.png")}
    if m.get("kernel_excerpt_ms") and m.get("roles_blocks"):
        figs["the two levels, measured: the stream's kernels over the first milliseconds of the prefill (CUPTI), "
             "and inside one GEMM of it, what each warp role does (%globaltimer stamps)"] = _two_levels(m, out)
    return figs


KIND_COLOR = {"GEMM": RING, "attention": "#ff7f0e", "elementwise": PINNED, "other": GREY}


def _two_levels(m: dict, out: Path) -> Path:
    """Level 1 on top: the prefill's kernels, one after another on the stream, by kind.
    Level 2 below: block 0 of the warp-specialized GEMM at the stack's QKV shape: the
    producer waiting for a free ring slot, each consumer warpgroup waiting for its slice
    and running its wgmma, the epilogue."""
    plt = pyplot()
    fig, (top, low) = plt.subplots(2, 1, figsize=(WIDE[0], WIDE[1] * 1.3), gridspec_kw={"height_ratios": [1, 2]})
    for kind in KERNEL_KINDS:
        bars = [(s, e - s) for s, e, k in m["kernel_excerpt_ms"] if k == kind]
        if bars:
            top.broken_barh(bars, (0, 1), color=KIND_COLOR[kind], label=kind)
    top.set_xlim(0, m.get("sm_excerpt_window_ms") or EXCERPT_MS)
    top.set_yticks([])
    top.set_xlabel("ms from the first GPU operation")
    top.set_title("level 1: the both-levels prefill's stream, kernel after kernel (CUPTI)")
    top.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.35), frameon=False)
    b = m["roles_blocks"][0]
    us = 1e-3
    rows = [("producer (TMA)", [(s * us, (e - s) * us) for s, e in b["producer"]], "#c7c7c7", None)]
    for c in range(len(b["consumer_mma"])):
        rows.append((f"consumer {c} (wgmma)", [(s * us, (e - s) * us) for s, e in b["consumer_wait"][c]], "#c7c7c7",
                     [(s * us, (e - s) * us) for s, e in b["consumer_mma"][c]]))
    for i, (label, waits, color, work) in enumerate(rows):
        low.broken_barh(waits, (i, 0.8), color=color)
        if work:
            low.broken_barh(work, (i, 0.8), color=RING)
    issued = [e * us for _, e in b["producer"]]
    low.plot(issued, [0.4] * len(issued), "|", color="k", ms=9, label="a slice's TMA loads issued")
    low.legend(fontsize=7, loc="lower right")
    for c, (s, e) in enumerate(b["epilogue"]):
        low.broken_barh([(s * us, (e - s) * us)], (1 + c, 0.8), color=PINNED)
    low.set_yticks([i + 0.4 for i in range(len(rows))], [r[0] for r in rows])
    low.invert_yaxis()
    low.set_xlabel("µs from the block's start")
    mm, nn, kk = m["roles_shape"]
    low.set_title(f"level 2: inside one block of the warp-specialized GEMM ({mm}×{kk} @ {kk}×{nn}, SM {b['sm']})\n"
                  f"grey: waiting; green: a slice's wgmma in flight; blue: epilogue; some wgmma in flight "
                  f"{b['busy']:.0%} of the block's time", fontsize=9)
    fig.tight_layout()
    return save(fig, out / f"{NAME}-two-levels.png")


# --------------------------------------------------------------------------- without the report
def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'form':32} {'tokens/s':>10} {'x eager':>8} {'wall ms':>9} {'rel err':>9}"]
    for r in rows:
        lines.append(f"{r['form']:32} {r['tokens/s']:10.0f} {r['x eager']:8.2f} {r['wall ms']:9.1f} "
                     f"{r['max rel err vs eager']:9.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The experiment without the report: prints the table and the claims, writes the JSON."""
    from .standalone import main as standalone

    return standalone("python -m fullpipe.experiments.two_level", run, format_table, "fewer requests, smaller micro-batches", argv)


if __name__ == "__main__":
    raise SystemExit(main())
