"""fullpipe bench multi-gpu: do peer copies between two GPUs of one host reach the link's
rate, and do they overlap the other engines' work?

Claim (issue 19): peer copies reach >= 0.9x the link's bound each way, and a peer copy runs
at the same time as an H2D copy, a D2H copy and a kernel on the same GPU (copy engines busy
at once).

Workload. Plain cuMemAlloc buffers of 256 MiB on both GPUs (peer access enabled both ways:
context peer access covers plain allocations), the sources filled with random bytes.

a. Bandwidth. For sizes 1 MiB .. 256 MiB, each way (0->1, 1->0) and both ways at once:
   - copy engine: cuMemcpyPeerAsync (fullpipe.cuda.peer.copy_peer) on the source GPU's stream;
   - SM push: fullpipe's SM copy (kernels/peer_copy: 16-byte loads and stores) on the source
     GPU, storing into the peer's memory; SM pull: the same on the destination GPU, loading
     from the peer's memory;
   - beside them, on the first GPU: a local device-to-device copy (copy engine, and the SM
     copy), in the same run.
   Every method's output is checked (destination poisoned, every byte compared with the
   source) before anything is timed. Timing: CUDA events on the copying streams (both ways:
   the second GPU's stream waits on the first's start event, and the first waits on the
   second's end); each sample is a batch of copies queued behind a short GPU spin, so that
   the host's enqueueing is not on the clock (a sample whose spin ended before the host had
   queued everything is thrown away and the spin lengthened); one warm-up sample, then the
   median. GB/s counts the bytes copied.
   Bound: the link's nominal rate per direction from nvidia-smi (fullpipe.cuda.topology:
   NVLinks x per-link rate, or the slower GPU's PCIe link), twice that for both ways.

b. Overlap, on the first GPU: a peer copy to the second GPU (copy engine, a series of 64 MiB
   copies lasting about as long as the H2D copy), a pinned H2D copy, a pinned D2H copy and a
   kernel calibrated to last as long as the H2D copy, each on its own stream: alone, in pairs
   with the peer copy, and all four together (events on a timing stream that every working
   stream waits for and joins back into), then all four once under the CUPTI tracer. Overlap
   fraction: the part of the peer copy's busy time during which H2D, D2H and the kernel were
   all busy as well (CUPTI); each engine's GB/s alone (events) vs together (CUPTI: bytes /
   that engine's busy time).

c. The layer stack (fullpipe.models.StagedStack: the issue-18 stack, 12 layers of width 2048,
   bf16, prefilling requests of random lengths cut into micro-batches; 64 requests per GPU
   of the largest split) on one GPU vs split over 2, 4 and 8 GPUs (as many as the machine
   has that reach each other), with the boundary by peer copy and by SM pull; the logits of
   every split stack checked against one GPU's before anything is timed. Bound: N x one
   GPU's tokens/s in the same run; the fill-drain ideal beside it. The same stack with a
   process per GPU (NCCL) on the largest split.

    python -m fullpipe.experiments.multi_gpu [--quick] [--json FILE]
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..cuda import driver as drv
from ..cuda.device import Device, device_info, ensure_current
from ..cuda.events import create_event, elapsed_ms, record, wait
from ..cuda.memory import copy_d2d, copy_d2h, copy_h2d, memset_d8, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..cuda.timing import median, spread, time_streams
from ..cuda.topology import Link, link_between
from ..kernels import peer_copy
from . import Bound, Context, Result
from .claims import UNJUDGED, Data, Judged, Missing, at_least, is_num, rule, times, with_claims
from .figures import BOUND, GREY, PINNED, RING, WIDE, label_bars, need, plain_log, pyplot, save

NAME = "multi-gpu"
TITLE = "Two GPUs: peer copies vs the link's rate, and peer copies beside H2D, D2H and compute"
CLAIM = ("Peer copies between two GPUs reach >= 0.9x the link's nominal rate each way (nvidia-smi), and a peer "
         "copy overlaps an H2D copy, a D2H copy and a kernel on the same GPU")
PRELOAD = ("torch",)  # imported ahead while the previous experiment runs (report/worker.py)
TECHNIQUE = (
    "GPUs of one host reach each other's memory over NVLink or PCIe. A copy engine moves a buffer from one GPU "
    "to the other (cuMemcpyPeerAsync) like any asynchronous copy, ordered on a stream; or, once peer access is "
    "enabled, a kernel on one GPU loads from or stores to the other's memory directly (here a plain 16-byte "
    "copy kernel: push stores into the peer, pull loads from it). The link's rate on paper is the number of "
    "NVLinks between the two GPUs times each link's rate, as nvidia-smi reports them."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): its canonical claims.
VERDICT_FROM = ("peer-copy-link-bound", "peer-copy-overlap", "multi-gpu-stack-scaling")
STACK_SCALING_KEY = "multi-gpu-stack-scaling"

MiB = 1 << 20
BUFFER_BYTES = 256 * MiB
SIZES_MIB = (1, 4, 16, 64, 256)
QUICK_SIZES_MIB = (1, 16, 256)
SAMPLES, QUICK_SAMPLES = 7, 3
SAMPLE_BYTES = 256 * MiB  # bytes copied per timed sample (per direction): reps = this / size, 2 .. 32
HOLD_NS = 2_000_000  # GPU spin before each sample; doubled while the host needs longer to queue a sample
MAX_HOLD_NS = 64_000_000
OVERLAP_BYTES, QUICK_OVERLAP_BYTES = 256 * MiB, 128 * MiB
PEER_CHUNK = 64 * MiB  # the overlap section's peer copy: a series of copies of this size
OVERLAP_REPEAT, QUICK_OVERLAP_REPEAT = 7, 3

# Targets (issue 19): peer copy / link bound; overlap fraction of the peer copy's busy time.
LINK_TARGET, LINK_PARTLY = 0.9, 0.75
OVERLAP_TARGET, OVERLAP_PARTLY = 0.9, 0.7

CE, SM_PUSH, SM_PULL = "copy engine", "SM push", "SM pull"
LOCAL_CE, LOCAL_SM = "copy engine (local D2D)", "SM copy (local)"
PEER_METHODS = (CE, SM_PUSH, SM_PULL)


# --------------------------------------------------------------------------- the two GPUs
def peer_of(device: Any) -> tuple[int | None, str]:
    """(the other GPU to pair with ``device``, None when there is none, and why)."""
    from ..cuda.peer import can_access_peer, device_count

    a = device.index
    n = device_count()
    if n < 2:
        return None, f"this machine has {n} GPU; multi-gpu needs two GPUs of one host"
    others = [b for b in range(n) if b != a]
    for b in others:
        if can_access_peer(a, b) and can_access_peer(b, a):
            return b, ""
    return None, (f"GPU {a} and the other GPUs ({', '.join(map(str, others))}) cannot access each other's memory "
                  "(cuDeviceCanAccessPeer): no peer path")


@dataclasses.dataclass
class Side:
    """One GPU's part: its Device, a stream, a 256 MiB source (random) and destination."""

    index: int
    device: Any
    stream: Any
    src: int
    dst: int
    host_src: np.ndarray  # what src holds


def _side(index: int, rng: np.random.Generator) -> Side:
    dev = Device(index)
    ensure_current(index)
    src = int(drv.call("cuMemAlloc", BUFFER_BYTES))
    dst = int(drv.call("cuMemAlloc", BUFFER_BYTES))
    stream = create_stream(dev)
    host = pinned_empty(BUFFER_BYTES, np.uint8)
    host[:] = np.frombuffer(rng.bytes(BUFFER_BYTES), np.uint8)
    copy_h2d(src, host, stream)
    stream.sync()
    return Side(index, dev, stream, src, dst, host)


def _free(side: Side) -> None:
    ensure_current(side.index)
    side.stream.sync()
    drv.call("cuMemFree", side.src)
    drv.call("cuMemFree", side.dst)


# --------------------------------------------------------------------------- the copies
# A copy: (the GPU that runs it, the stream, enqueue(nbytes), where it writes, what it reads)
@dataclasses.dataclass
class Copy:
    method: str
    direction: str  # "0->1", "1->0", "local"
    runs_on: Side
    enqueue: Callable[[int], Any]
    writes: Side
    reads: Side


def copies(a: Side, b: Side) -> list[Copy]:
    """Every (method, direction) of section a, and the local copies on ``a``."""
    from ..cuda.peer import copy_peer

    def ce(src: Side, dst: Side) -> Copy:
        return Copy(CE, f"{src.index}->{dst.index}", src,
                    lambda n: copy_peer(dst.dst, dst.index, src.src, src.index, n, src.stream), dst, src)

    def sm(src: Side, dst: Side, on: Side, method: str) -> Copy:
        return Copy(method, f"{src.index}->{dst.index}", on,
                    lambda n: peer_copy.copy_sm(dst.dst, src.src, n, on.stream, device=on.index), dst, src)

    out = []
    for src, dst in ((a, b), (b, a)):
        out += [ce(src, dst), sm(src, dst, src, SM_PUSH), sm(src, dst, dst, SM_PULL)]
    out.append(Copy(LOCAL_CE, "local", a, lambda n: (ensure_current(a.index), copy_d2d(a.dst, a.src, n, a.stream)),
                    a, a))
    out.append(sm(a, a, a, LOCAL_SM))
    out[-1].direction = "local"
    return out


def check(c: Copy, back: np.ndarray) -> str | None:
    """Run ``c`` once over the whole buffer into a poisoned destination, and an odd-sized
    copy at odd offsets; compare every byte. None, or what was wrong."""
    w = c.writes
    for nbytes, off in ((BUFFER_BYTES, 0), (BUFFER_BYTES - 4099, 3)):
        ensure_current(w.index)
        memset_d8(w.dst, 0xA5, BUFFER_BYTES, w.stream)
        w.stream.sync()
        if off:  # the same offset on both sides: the 16-byte kernel with a head and a tail
            _enqueue_at(c, nbytes, off)
        else:
            c.enqueue(nbytes)
        c.runs_on.stream.sync()
        ensure_current(w.index)
        copy_d2h(back, w.dst, w.stream)
        w.stream.sync()
        got = np.asarray(back)
        want = c.reads.host_src[off:off + nbytes]
        if not np.array_equal(got[off:off + nbytes], want):
            bad = int(np.count_nonzero(got[off:off + nbytes] != want))
            return f"{c.method} {c.direction}: {bad} of {nbytes} bytes differ from the source (offset {off})"
        if (got[:off] != 0xA5).any() or (got[off + nbytes:] != 0xA5).any():
            return f"{c.method} {c.direction}: wrote outside [{off}, {off + nbytes})"
    return None


def _enqueue_at(c: Copy, nbytes: int, off: int) -> None:
    from ..cuda.peer import copy_peer

    r, w, on = c.reads, c.writes, c.runs_on
    if c.method == CE:
        copy_peer(w.dst + off, w.index, r.src + off, r.index, nbytes, on.stream)
    elif c.method == LOCAL_CE:
        ensure_current(on.index)
        copy_d2d(w.dst + off, r.src + off, nbytes, on.stream)
    else:
        peer_copy.copy_sm(w.dst + off, r.src + off, nbytes, on.stream, device=on.index)


# --------------------------------------------------------------------------- timing
class Clock:
    """Times batches of copies on one or more streams of one or two GPUs with CUDA events.

    A sample: the lead stream (the first copy's) spins for ``hold_ns``, records the start
    event; every other stream waits for it; the copies are queued, ``reps`` of each,
    alternating; each other stream records an event of its own device that the lead
    stream waits for; the lead stream records the end event. If the start event has
    already happened when the host has queued all of it, the host was on the clock: the
    sample is thrown away and the spin doubled."""

    def __init__(self) -> None:
        self.hold_ns = HOLD_NS
        self.redone = 0

    def sample(self, work: list[Copy], nbytes: int, reps: int) -> float:
        lead = work[0].runs_on
        others = []
        for c in work[1:]:
            if c.runs_on.stream is not lead.stream and all(c.runs_on.stream is not o.stream for o in others):
                others.append(c.runs_on)
        while True:
            start = create_event(lead.device, timing=True)
            end = create_event(lead.device, timing=True)
            joins = [create_event(o.device) for o in others]
            ensure_current(lead.index)
            peer_copy.hold(lead.stream, self.hold_ns, device=lead.index)
            record(lead.stream, start)
            for o in others:
                wait(o.stream, start)
            for _ in range(reps):
                for c in work:
                    c.enqueue(nbytes)
            for o, ev in zip(others, joins):
                ensure_current(o.index)
                record(o.stream, ev)
            ensure_current(lead.index)
            for ev in joins:
                wait(lead.stream, ev)
            record(lead.stream, end)
            late = _done(start)
            with drv.translated("cuEventSynchronize"):
                end.sync()
            if not late or self.hold_ns >= MAX_HOLD_NS:
                return elapsed_ms(start, end)
            self.redone += 1
            self.hold_ns *= 2

    def median_ms(self, work: list[Copy], nbytes: int, reps: int, samples: int) -> tuple[float, float]:
        """(median ms per batch of ``reps``, spread) after one warm-up sample."""
        self.sample(work, nbytes, reps)
        xs = [self.sample(work, nbytes, reps) for _ in range(samples)]
        return median(xs), spread(xs)


def _done(event: Any) -> bool:
    """Whether the GPU has passed ``event`` (cuEventQuery: no wait)."""
    from cuda.bindings import driver

    (err,) = driver.cuEventQuery(event.handle)
    return int(err) == 0


def reps_for(nbytes: int) -> int:
    return int(min(32, max(2, SAMPLE_BYTES // nbytes)))


def bandwidth(ctx: Context, a: Side, b: Side, sizes: list[int], samples: int, link: Link) -> tuple[list, dict]:
    """Section a: table rows and metrics."""
    cs = copies(a, b)
    clock = Clock()
    rows: list[dict[str, Any]] = []
    by = {(c.method, c.direction): c for c in cs}
    nominal = link.nominal_gbps_per_direction
    fwd, back = f"{a.index}->{b.index}", f"{b.index}->{a.index}"
    plans = [([c], c.method, c.direction) for c in cs]
    plans += [([by[(m, fwd)], by[(m, back)]], m, "both") for m in PEER_METHODS]
    local_at: dict[int, float] = {}
    steps = len(plans) * len(sizes)
    done = 0
    for work, method, direction in plans:
        for size in sizes:
            reps = reps_for(size)
            ms, sp = clock.median_ms(work, size, reps, samples)
            moved = size * reps * len(work)
            gbps = moved / (ms * 1e6)
            bound = (nominal * len(work)) if nominal else None
            if method == LOCAL_CE:
                local_at[size] = gbps
            rows.append({"section": "bandwidth", "method": method, "direction": direction, "MiB": size // MiB,
                         "ms": ms / reps, "GB/s": gbps, "spread": sp, "bound_GB/s": bound,
                         "vs_link": gbps / bound if bound else None, "vs_local_d2d": None, "reps": reps})
            done += 1
            ctx.progress(0.6 * done / steps, f"{method} {direction} {size // MiB} MiB")
    for r in rows:
        local = local_at.get(r["MiB"] * MiB)
        r["vs_local_d2d"] = r["GB/s"] / local if local else None
    top = max(sizes)
    best = {}
    for direction in (fwd, back, "both"):
        cand = [r for r in rows if r["direction"] == direction and r["MiB"] * MiB == top]
        best[direction] = {r["method"]: r["GB/s"] for r in cand}
    metrics = {"link": link.as_dict(), "link_nominal_gbps_per_direction": nominal,
               "largest_MiB": top // MiB, "peer_gbps_at_largest": best,
               "local_d2d_gbps_at_largest": local_at.get(top),
               "local_sm_gbps_at_largest": next((r["GB/s"] for r in rows if r["method"] == LOCAL_SM
                                                 and r["MiB"] * MiB == top), None),
               "directions": [fwd, back], "samples_redone_for_host_time": clock.redone,
               "hold_ns_final": clock.hold_ns}
    return rows, metrics


# --------------------------------------------------------------------------- overlap
def overlap(ctx: Context, a: Side, b: Side, repeat: int, nbytes: int) -> tuple[list, dict, list[str]]:
    """Section b, on GPU a: the peer copy a->b beside H2D, D2H and a kernel."""
    from ..cuda.peer import copy_peer
    from ..pipeline.workload import MixKernel, calibrate_rounds

    dev = a.device
    ensure_current(a.index)
    t, s_p, s_h, s_d, s_k = (create_stream(dev) for _ in range(5))
    pool = DevicePool(dev)
    n32 = nbytes // 4
    k_in, k_out = pool.empty(n32, np.uint32, t), pool.empty(n32, np.uint32, t)
    h_in, h_out = pinned_empty(nbytes, np.uint8), pinned_empty(nbytes, np.uint8)
    h_in[:] = a.host_src[:nbytes]
    copy_d2d(k_in.ptr, a.src, nbytes, t)
    t.sync()
    kernel = MixKernel(dev)
    chunks = {"n": 1}

    def peer() -> None:
        for _ in range(chunks["n"]):
            copy_peer(b.dst, b.index, a.src, a.index, PEER_CHUNK, s_p)
        ensure_current(a.index)

    ops = {
        "peer": (s_p, peer),
        "H2D": (s_h, lambda: copy_h2d(a.dst, h_in, s_h)),
        "D2H": (s_d, lambda: copy_d2h(h_out, a.src, s_d, nbytes)),
        "compute": (s_k, lambda: kernel(s_k, k_in, k_out)),
    }
    alone: dict[str, float] = {}
    ctx.progress(0.62, "overlap: each alone")
    alone["H2D"] = median(time_streams(dev, t, [ops["H2D"]], repeat=repeat))
    chunk_ms = median(time_streams(dev, t, [ops["peer"]], repeat=repeat))
    chunks["n"] = max(1, round(alone["H2D"] / chunk_ms))
    alone["peer"] = median(time_streams(dev, t, [ops["peer"]], repeat=repeat))
    calibrate_rounds(kernel, s_k, k_in, k_out, alone["H2D"])
    ensure_current(a.index)
    alone["D2H"] = median(time_streams(dev, t, [ops["D2H"]], repeat=repeat))
    alone["compute"] = median(time_streams(dev, t, [ops["compute"]], repeat=repeat))
    moved = {"peer": PEER_CHUNK * chunks["n"], "H2D": nbytes, "D2H": nbytes}
    rows = [{"section": "overlap", "work": k, "ms": v, "max_alone_ms": v, "sum_alone_ms": v, "ratio": 1.0,
             "GB/s": moved[k] / (v * 1e6) if k in moved else None} for k, v in alone.items()]
    combos = [("peer", "H2D"), ("peer", "D2H"), ("peer", "compute"), ("H2D", "D2H", "compute"),
              ("peer", "H2D", "D2H", "compute")]
    ratios = {}
    for i, combo in enumerate(combos):
        ctx.progress(0.65 + 0.2 * i / len(combos), "overlap: " + " + ".join(combo))
        together = median(time_streams(dev, t, [ops[k] for k in combo], repeat=repeat))
        longest = max(alone[k] for k in combo)
        ratios[" + ".join(combo)] = longest / together
        rows.append({"section": "overlap", "work": " + ".join(combo), "ms": together, "max_alone_ms": longest,
                     "sum_alone_ms": sum(alone[k] for k in combo), "ratio": longest / together, "GB/s": None})
    metrics: dict[str, Any] = {"overlap_alone_ms": alone, "overlap_ratio": ratios, "overlap_bytes": moved,
                               "overlap_peer_chunks": chunks["n"], "overlap_compute_rounds": kernel.rounds}
    notes: list[str] = []
    ctx.progress(0.87, "overlap: all four under CUPTI")
    try:
        metrics.update(_traced(ctx, dev, t, ops, moved, alone))
    except Exception as exc:  # CUPTI missing or refused: the event timings still stand
        metrics["overlap_trace_error"] = f"{type(exc).__name__}: {exc}"
        notes.append(f"no CUPTI trace of the overlap run: {metrics['overlap_trace_error']}")
    for x in (k_in, k_out):
        pool.free_array(x, t)
    t.sync()
    pool.close()
    return rows, metrics, notes


def _traced(ctx: Context, dev: Any, t: Any, ops: dict, moved: dict, alone: dict) -> dict[str, Any]:
    """All four once under the CUPTI tracer: busy time per engine, overlap fractions, GB/s together."""
    from .. import trace
    from ..trace import metrics as tm

    with trace.capture(backend="cupti", tags=False) as tl:
        time_streams(dev, t, list(ops.values()), warmup=0, repeat=1)
        t.sync()
    recs = tl.timeline.device_records()
    engines = {
        "peer": [r for r in recs if r.kind == "memcpy" and r.direction in ("p2p", "d2d")],
        "H2D": [r for r in recs if r.kind == "memcpy" and r.direction == "h2d"],
        "D2H": [r for r in recs if r.kind == "memcpy" and r.direction == "d2h"],
        "compute": [r for r in recs if r.kind == "kernel" and "workload_mix" in r.name],
    }
    iv = {k: [(r.start_ns, r.end_ns) for r in v] for k, v in engines.items()}
    missing = [k for k, v in iv.items() if not v]
    if missing:
        raise RuntimeError(f"the trace holds no records of {', '.join(missing)}")
    busy = {k: tm.busy(v) for k, v in iv.items()}
    others = [iv["H2D"], iv["D2H"], iv["compute"]]
    # the peer copy's busy time during which H2D, D2H and the kernel were all busy too
    all_three = tm.at_least([tm.merge(iv["peer"]), *others], 4)
    out: dict[str, Any] = {
        "overlap_trace_busy_ms": {k: v / 1e6 for k, v in busy.items()},
        "overlap_fraction": all_three / busy["peer"],
        "overlap_fraction_with": {k: tm.both(iv["peer"], iv[k]) / busy["peer"] for k in ("H2D", "D2H", "compute")},
        "overlap_trace_span_ms": (max(e for v in iv.values() for _, e in v) - min(s for v in iv.values()
                                                                                   for s, _ in v)) / 1e6,
        "overlap_gbps_alone": {k: moved[k] / (alone[k] * 1e6) for k in moved},
        "overlap_gbps_together": {k: sum(r.bytes or 0 for r in engines[k]) / busy[k] for k in moved},
        "overlap_peer_copy_kinds": sorted({r.direction for r in engines["peer"]}),
    }
    tdir = ctx.out_dir / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    tl.save(tdir / f"{NAME}-overlap.json")
    out["overlap_trace_file"] = f"traces/{NAME}-overlap.json"
    try:
        tl.plot(ctx.out_dir / f"{NAME}-overlap-timeline.png", title="peer copy ‖ H2D ‖ D2H ‖ compute on one GPU (CUPTI)")
        out["overlap_timeline_png"] = str(ctx.out_dir / f"{NAME}-overlap-timeline.png")
    except Exception:  # matplotlib missing: the numbers stand without the picture
        pass
    return out


# --------------------------------------------------------------------------- c. the layer stack
# The issue's stack (12 layers, width 2048, 16 heads of 128, bf16) prefilling requests of
# random lengths, cut into micro-batches: all layers on one GPU vs split over 2, 4, 8 GPUs.
# Requests scale with the GPUs so that the fill and drain of N stages stay a small part
# of the run (GPipe's bubble: (N - 1) / (M + N - 1) of M micro-batches).
STACK_REQUESTS_PER_GPU, QUICK_STACK_REQUESTS_PER_GPU = 64, 24
STACK_MICROBATCH_TOKENS, QUICK_STACK_MICROBATCH_TOKENS = 8192, 4096
STACK_REPEAT, QUICK_STACK_REPEAT = 3, 2
STACK_TARGET, STACK_PARTLY = 0.85, 0.7
STACK_MAX_REL_ERR = 1e-3  # the same kernels on the same inputs: N GPUs must give one GPU's logits
STACK_SIZES = (2, 4, 8)  # GPU counts tried, as many as the machine has


def peer_group(first: int) -> list[int]:
    """``first`` and the other GPUs that it and each other can reach (cuDeviceCanAccessPeer),
    in index order: the GPUs a split stack may use."""
    from ..cuda.peer import can_access_peer, device_count

    group = [first]
    for g in range(device_count()):
        if g != first and all(can_access_peer(g, h) and can_access_peer(h, g) for h in group):
            group.append(g)
    return group


def _stack_scaling(ctx: Context, gpus: list[int]) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """The layer stack (fullpipe.models.StagedStack) on one GPU and split over 2, 4 and 8 of
    ``gpus`` (as many as there are), the same micro-batches in the same run: throughput,
    its ratio to linear and to the fill-drain ideal, and what the stage boundary costs per
    micro-batch. Returns (metrics, rows, notes)."""
    try:
        import torch
    except ImportError:
        return {"stack_skipped": "PyTorch is not installed (the stack's elementwise pieces are PyTorch)"}, [], []
    from ..models import StackConfig, StagedStack, init_weights
    from ..pipeline.schedule import bubble_fraction, ideal_speedup

    sizes = [n for n in STACK_SIZES if n <= len(gpus)]
    config = StackConfig()
    n_requests = (QUICK_STACK_REQUESTS_PER_GPU if ctx.quick else STACK_REQUESTS_PER_GPU) * max(sizes)
    mb_tokens = QUICK_STACK_MICROBATCH_TOKENS if ctx.quick else STACK_MICROBATCH_TOKENS
    repeat = QUICK_STACK_REPEAT if ctx.quick else STACK_REPEAT
    rng = np.random.default_rng(18)
    requests = [rng.integers(0, config.vocab, int(n)) for n in rng.integers(64, 2048, n_requests)]
    ctx.progress(0.7, "layer stack: weights")
    weights = init_weights(config, seed=0, device=f"cuda:{gpus[0]}")
    forms: dict[str, dict[str, Any]] = {"1 GPU": dict(devices=gpus[:1])}
    for n in sizes:
        forms[f"{n} GPUs, peer copy"] = dict(devices=gpus[:n], mode="copy")
        forms[f"{n} GPUs, SM pull"] = dict(devices=gpus[:n], mode="pull")
    wall: dict[str, float] = {}
    logits: dict[str, Any] = {}
    splits: dict[int, list[list[int]]] = {}
    microbatches, tokens = 0, 0
    for i, (name, kw) in enumerate(forms.items()):
        ctx.progress(0.7 + 0.25 * i / len(forms), f"layer stack: {name}")
        with StagedStack(config, weights, **kw) as pipe:
            first = pipe.prefill(requests, microbatch_tokens=mb_tokens)  # also the warm-up
            pipe.synchronize()
            logits[name] = first.logits.float().cpu()
            microbatches, tokens = first.microbatches, first.tokens
            splits[len(kw["devices"])] = [[r.start, r.stop] for r in pipe.split]
            samples = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                pipe.prefill(requests, microbatch_tokens=mb_tokens)
                pipe.synchronize()
                samples.append(time.perf_counter() - t0)
            wall[name] = median(samples)
    del weights
    torch.cuda.empty_cache()
    top = max(sizes)
    ctx.progress(0.95, f"layer stack: a process per GPU on {top} GPUs (NCCL)")
    processes = _stack_in_processes(config, requests, mb_tokens, gpus[:top])
    ref = logits["1 GPU"]
    errors = {k: float(((v - ref).norm(dim=1) / ref.norm(dim=1)).max()) for k, v in logits.items() if k != "1 GPU"}
    tps = {k: tokens / t for k, t in wall.items()}
    one = tps["1 GPU"]
    scaling = {}
    for n in sizes:
        best_n = max((k for k in tps if k.startswith(f"{n} GPUs")), key=lambda k: tps[k])
        scaling[str(n)] = {"best": best_n, "x_one_gpu": tps[best_n] / one, "of_linear": tps[best_n] / one / n,
                           "ideal_x": ideal_speedup(n, microbatches), "split": splits[n]}
    best = scaling[str(top)]["best"]
    boundary_bytes = mb_tokens * config.width * config.element_bytes
    boundary_ms = _peer_copy_ms_between(gpus[0], gpus[1], boundary_bytes)
    stage_ms = wall["1 GPU"] * 1e3 / microbatches / top
    metrics = {
        "stack_config": {"layers": config.layers, "width": config.width, "heads": config.heads,
                         "head_dim": config.head_dim, "ffn_width": config.ffn_width, "dtype": config.dtype},
        "stack_requests": n_requests, "stack_tokens": tokens, "stack_microbatches": microbatches,
        "stack_microbatch_tokens": mb_tokens, "stack_split": splits[top], "stack_gpus": top,
        "stack_gpu_counts": sizes, "stack_scaling": scaling,
        "stack_wall_s": wall, "stack_tokens_per_s": tps, "stack_best": best,
        "stack_speedup": tps[best] / one,
        "stack_ideal_speedup": ideal_speedup(top, microbatches), "stack_bubble": bubble_fraction(top, microbatches),
        "stack_max_rel_err_vs_1gpu": errors,
        "stack_boundary_bytes": boundary_bytes, "stack_boundary_ms": boundary_ms, "stack_stage_ms": stage_ms,
        "stack_processes": processes,
    }
    rows = []
    for k in tps:
        n = len(forms[k]["devices"])
        rows.append({"section": "layer stack", "form": k, "tokens/s": tps[k], "x one GPU": tps[k] / one,
                     "of linear": tps[k] / one / n, "max rel err vs 1 GPU": errors.get(k, 0.0)})
    notes = [f"layer stack: {n_requests} requests of 64..2047 tokens ({tokens} tokens) in {microbatches} micro-batches "
             f"of <= {mb_tokens} tokens on GPUs {gpus[:top]}; layers per stage "
             + "; ".join(f"{n} GPUs {splits[n]}" for n in sizes)
             + f"; wall time of a whole prefill (median of {repeat}, after a warm-up that also checked the logits "
               "against one GPU's)",
             "scaling: " + "; ".join(f"{n} GPUs {v['x_one_gpu']:.2f}× one GPU = {v['of_linear']:.2f} of linear "
                                     f"({v['best']}; fill-drain ideal {v['ideal_x']:.2f}×)"
                                     for n, v in scaling.items()),
             f"stage boundary: the residual stream of a full micro-batch ({boundary_bytes / MiB:.0f} MiB) crosses in "
             f"{boundary_ms:.3f} ms by peer copy, on the copy engines, beside {stage_ms:.1f} ms of each stage's "
             f"compute on {top} GPUs"]
    if "tokens_per_s" in processes:
        rows.append({"section": "layer stack", "form": f"{top} GPUs, a process per stage (NCCL), steady pace",
                     "tokens/s": processes["tokens_per_s"], "x one GPU": processes["tokens_per_s"] / one,
                     "of linear": processes["tokens_per_s"] / one / top,
                     "max rel err vs 1 GPU": processes["max_rel_err_vs_1gpu"]})
        notes.append("a process per stage (fullpipe.pipeline.distributed, NCCL send/recv of the residual stream): "
                     "the micro-batches twice over, tokens/s from the last rank's second pass (a steady pace without "
                     "fill or drain, so not the claim's number); its logits checked against one GPU's")
    else:
        notes.append(f"a process per stage (NCCL): not measured: {processes.get('error')}")
    bad = {k: e for k, e in errors.items() if e > STACK_MAX_REL_ERR}
    if bad:
        metrics["stack_wrong"] = bad
        notes.append(f"WRONG: the split stack's logits differ from one GPU's: {bad}")
    return metrics, rows, notes


def _stack_in_processes(config: Any, requests: list, mb_tokens: int, gpus: list[int]) -> dict[str, Any]:
    """The same stack and micro-batches with one process per GPU, the boundary through
    torch.distributed (NCCL). Runs the micro-batches twice; the second pass on the last
    rank gives a steady pace. Returns its tokens/s and its logits' error vs one GPU, or
    why it could not run."""
    import torch

    from ..models import StackStageFactory, pack_microbatches, stage_split
    from ..models.decoder import DecoderStack
    from ..models.weights import init_weights
    from ..pipeline.distributed import spawn_stages

    batches, _ = pack_microbatches(requests, config, mb_tokens)
    factory = StackStageFactory(config, seed=0, batches=batches + batches, split=stage_split(config, len(gpus)))
    try:
        res = spawn_stages(len(gpus), factory, factory.inputs(), backend="nccl", devices=gpus, timeout=120)
    except Exception as exc:  # no NCCL, a rank failed: say why, the in-process rows stand
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    M = len(batches)
    last = res.stats[-1]
    second = sum(b.total_tokens for b in batches)
    pace_s = last.done_s[2 * M - 1] - last.done_s[M - 1]
    stack = DecoderStack(config, init_weights(config, seed=0, device=f"cuda:{gpus[0]}"))
    worst = 0.0
    for b, got in zip(batches, res.outputs[M:]):
        want, _ = stack.prefill_packed(b)
        want = want.float().cpu()
        worst = max(worst, float(((got.float() - want).norm(dim=1) / want.norm(dim=1)).max()))
    del stack
    torch.cuda.empty_cache()
    return {"tokens_per_s": second / pace_s, "pace_s": pace_s, "microbatches": M, "max_rel_err_vs_1gpu": worst,
            "wall_s_with_startup": res.wall_s, "rank_idle_fraction": [s.idle_fraction for s in res.stats]}


def _peer_copy_ms_between(src_gpu: int, dst_gpu: int, nbytes: int, reps: int = 10) -> float:
    """One peer copy of ``nbytes`` from GPU ``src_gpu`` to ``dst_gpu``, by the copy engine
    (median of ``reps``), between buffers allocated here."""
    from ..cuda.peer import copy_peer, enable_peer_access

    enable_peer_access(src_gpu, dst_gpu)
    ensure_current(dst_gpu, force=True)
    dst = int(drv.call("cuMemAlloc", nbytes))
    ensure_current(src_gpu, force=True)
    src = int(drv.call("cuMemAlloc", nbytes))
    stream = create_stream(Device(src_gpu))
    times_ms = []
    try:
        for _ in range(reps):
            t0 = record(stream, timing=True)
            copy_peer(dst, dst_gpu, src, src_gpu, nbytes, stream)
            t1 = record(stream, timing=True)
            stream.sync()
            times_ms.append(elapsed_ms(t0, t1))
    finally:
        stream.sync()
        drv.call("cuMemFree", src)
        ensure_current(dst_gpu, force=True)
        drv.call("cuMemFree", dst)
    return median(times_ms)


# --------------------------------------------------------------------------- the run
def run(ctx: Context) -> Result:
    dev = ctx.device
    try:
        other, why = peer_of(dev)
    except ImportError as exc:
        return Result(NAME, CLAIM, "failed", device_info(dev), {}, {},
                      notes=[f"fullpipe.cuda.peer is missing ({exc}): this fullpipe cannot do peer copies"])
    if other is None:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {}, notes=[f"skipped: {why}"])
    from ..cuda.peer import enable_peer_access

    enable_peer_access(dev.index, other)
    enable_peer_access(other, dev.index)
    link = link_between(dev.index, other)
    sizes = [m * MiB for m in (QUICK_SIZES_MIB if ctx.quick else SIZES_MIB)]
    samples = QUICK_SAMPLES if ctx.quick else SAMPLES
    rng = np.random.default_rng(19)
    ctx.progress(0.0, "buffers")
    a, b = _side(dev.index, rng), _side(other, rng)
    notes: list[str] = []
    try:
        back = pinned_empty(BUFFER_BYTES, np.uint8)
        wrong = [w for w in (check(c, back) for c in copies(a, b)) if w]
        if wrong:
            return Result(NAME, CLAIM, "failed", device_info(dev), {"sizes_MiB": [s // MiB for s in sizes]},
                          {"link": link.as_dict()}, notes=["wrong copies, nothing timed:"] + wrong)
        rows, metrics = bandwidth(ctx, a, b, sizes, samples, link)
        o_rows, o_metrics, o_notes = overlap(ctx, a, b, QUICK_OVERLAP_REPEAT if ctx.quick else OVERLAP_REPEAT,
                                             QUICK_OVERLAP_BYTES if ctx.quick else OVERLAP_BYTES)
    finally:
        _free(a)
        _free(b)
    s_metrics, s_rows, s_notes = _stack_scaling(ctx, peer_group(dev.index))
    metrics.update(o_metrics)
    metrics.update(s_metrics)
    notes += _notes(metrics, link) + o_notes + s_notes
    figures, traces = {}, {}
    if metrics.get("overlap_timeline_png"):
        figures["timeline: peer copy beside H2D, D2H and compute (CUPTI)"] = metrics.pop("overlap_timeline_png")
    if metrics.get("overlap_trace_file"):
        traces["peer copy beside H2D, D2H and compute"] = metrics["overlap_trace_file"]
    nominal = link.nominal_gbps_per_direction
    fwd = metrics["peer_gbps_at_largest"][f"{a.index}->{b.index}"]
    return with_claims(Result(
        NAME, CLAIM, UNJUDGED, device_info(dev),
        {"gpus": [a.index, b.index], "peer_name": b.device.name, "sizes_MiB": [s // MiB for s in sizes],
         "samples": samples, "buffer_bytes": BUFFER_BYTES, "peer_chunk_bytes": PEER_CHUNK,
         "sm_copy_threads": peer_copy.THREADS, "sm_copy_unroll": peer_copy.UNROLL, "quick": ctx.quick},
        metrics,
        bound=Bound(f"link nominal per direction: {link.describe()} (nvidia-smi)", nominal, "GB/s") if nominal else None,
        ratio=fwd[CE] / nominal if nominal and is_num(fwd.get(CE)) else None,
        table=rows + o_rows + s_rows, notes=notes, figures=figures, traces=traces), VERDICT_FROM)


def _notes(m: dict[str, Any], link: Link) -> list[str]:
    out = [f"link: {link.describe()}; source: {link.source}",
           "every copy was checked before it was timed (destination poisoned with 0xA5, every byte compared, the "
           "whole 256 MiB and an odd size at an odd offset); GB/s counts bytes copied (a local copy reads and "
           "writes each byte: twice that in memory traffic)",
           f"timing: CUDA events on the copying streams, each sample a batch of copies queued behind a GPU spin; "
           f"{m.get('samples_redone_for_host_time', 0)} samples were redone with a longer spin because the host "
           "had not queued the whole batch before the spin ended"]
    if m.get("overlap_peer_copy_kinds"):
        out.append(f"CUPTI names the peer copies {', '.join(m['overlap_peer_copy_kinds'])}")
    return out


# --------------------------------------------------------------------------- verdicts
def _best_peer(d: Data, direction: str) -> tuple[str, float]:
    at = d.m("peer_gbps_at_largest", direction)
    best = max((k for k in PEER_METHODS if is_num(at.get(k))), key=lambda k: at[k], default=None)
    if best is None:
        raise Missing(f"metrics.peer_gbps_at_largest.{direction}")
    return best, float(at[best])


@rule(NAME, "peer-copy-link-bound")
def _link_bound(d: Data) -> Judged:
    target = f"supported: the slower direction's best method ≥ {LINK_TARGET}× the link, partly ≥ {LINK_PARTLY}×"
    nominal = d.m_or(None, "link_nominal_gbps_per_direction")
    if not is_num(nominal):
        link = d.m_or({}, "link")
        return Judged(measured="not judged: the link's rate is unknown", bound=f"link: {link.get('source', '?')}",
                      ratio=None, verdict="skipped", target=target)
    fwd, back = d.m("directions")
    size = d.m("largest_MiB")
    parts, ratios = [], []
    for direction in (fwd, back):
        method, gbps = _best_peer(d, direction)
        at = d.m("peer_gbps_at_largest", direction)
        ratios.append(gbps / nominal)
        parts.append(f"{direction} {gbps:.0f} GB/s = {times(gbps / nominal)} ({method}; "
                     + ", ".join(f"{k} {at[k]:.0f}" for k in PEER_METHODS if k != method and is_num(at.get(k))) + ")")
    r = min(ratios)
    local = d.m_or(None, "local_d2d_gbps_at_largest")
    return Judged(measured=f"{size} MiB: " + "; ".join(parts),
                  bound=f"link {nominal:.0f} GB/s per direction (nvidia-smi: {d.m('link')['kind']})"
                        + (f"; local D2D copy {local:.0f} GB/s (same run)" if is_num(local) else ""),
                  ratio=r, verdict=at_least(r, LINK_TARGET, LINK_PARTLY), target=target)


@rule(NAME, "peer-copy-both-ways",
      f"both ways at once, peer copies carry ≥ {LINK_TARGET}× twice the link's per-direction rate")
def _both_ways(d: Data) -> Judged:
    target = f"supported ≥ {LINK_TARGET}×, partly ≥ {LINK_PARTLY}×"
    nominal = d.m_or(None, "link_nominal_gbps_per_direction")
    if not is_num(nominal):
        return Judged(measured="not judged: the link's rate is unknown", bound="", ratio=None, verdict="skipped",
                      target=target)
    method, gbps = _best_peer(d, "both")
    at = d.m("peer_gbps_at_largest", "both")
    r = gbps / (2 * nominal)
    return Judged(measured=f"{gbps:.0f} GB/s both ways together = {times(r)} ({method}; "
                           + ", ".join(f"{k} {at[k]:.0f}" for k in PEER_METHODS if k != method and is_num(at.get(k)))
                           + f"; {d.m('largest_MiB')} MiB each way)",
                  bound=f"2 × {nominal:.0f} GB/s (nvidia-smi)", ratio=r, verdict=at_least(r, LINK_TARGET, LINK_PARTLY),
                  target=target)


@rule(NAME, "peer-copy-overlap")
def _overlap_rule(d: Data) -> Judged:
    target = (f"supported: H2D, D2H and the kernel all busy during ≥ {OVERLAP_TARGET:.0%} of the peer copy (CUPTI), "
              f"partly ≥ {OVERLAP_PARTLY:.0%}")
    ratio4 = float(d.m("overlap_ratio", "peer + H2D + D2H + compute"))
    alone = d.m("overlap_alone_ms")
    if not is_num(d.m_or(None, "overlap_fraction")):
        err = d.m_or(None, "overlap_trace_error")
        if err is None:
            raise Missing("metrics.overlap_fraction")
        return Judged(measured=f"all four together {1 / ratio4:.2f}× the longest alone (events); no CUPTI trace: {err}",
                      bound=f"longest alone = {max(alone.values()):.2f} ms", ratio=ratio4,
                      verdict=at_least(ratio4, OVERLAP_TARGET, OVERLAP_PARTLY), target=target)
    f = float(d.m("overlap_fraction"))
    g1, g2 = d.m("overlap_gbps_alone"), d.m("overlap_gbps_together")
    rates = ", ".join(f"{k} {g1[k]:.0f}→{g2[k]:.0f}" for k in ("peer", "H2D", "D2H"))
    return Judged(measured=f"H2D, D2H and the kernel all busy during {f:.0%} of the peer copy (CUPTI); all four "
                           f"together {1 / ratio4:.2f}× the longest alone (events); GB/s alone→together: {rates}",
                  bound=f"the peer copy's busy time; longest alone = {max(alone.values()):.2f} ms", ratio=f,
                  verdict=at_least(f, OVERLAP_TARGET, OVERLAP_PARTLY), target=target)


@rule(NAME, STACK_SCALING_KEY)
def _stack_scaling_rule(d: Data) -> Judged:
    target = (f"supported: N GPUs ≥ {STACK_TARGET} × N × one GPU's tokens/s (same run, same micro-batches), "
              f"partly ≥ {STACK_PARTLY}")
    skipped = d.m_or(None, "stack_skipped")
    if skipped:
        return Judged(measured=f"not measured: {skipped}", bound="", ratio=None, verdict="skipped", target=target)
    top, tps = int(d.m("stack_gpus")), d.m("stack_tokens_per_s")
    sizes = [int(n) for n in d.m_or([top], "stack_gpu_counts")]
    one = tps["1 GPU"]
    parts, ratios = [], []
    for n in sizes:  # each GPU count judged by its faster boundary
        best = max((k for k in tps if k.startswith(f"{n} GPUs")), key=lambda k: tps[k])
        ratios.append(tps[best] / one / n)
        others = ", ".join(f"{k.split(', ', 1)[1]} {tps[k] / one:.2f}×" for k in tps
                           if k.startswith(f"{n} GPUs") and k != best)
        parts.append(f"{best}: {tps[best]:.0f} tokens/s = {tps[best] / one:.2f}× one GPU = {ratios[-1]:.2f} of linear"
                     + (f" ({others})" if others else ""))
    r = min(ratios)
    missing = [n for n in STACK_SIZES if n not in sizes]
    wrong = d.m_or(None, "stack_wrong")
    measured = ("; ".join(parts)
                + f"; fill-drain ideal {d.m('stack_ideal_speedup'):.2f}× on {top} GPUs at "
                  f"{d.m('stack_microbatches')} micro-batches of ≤ {d.m('stack_microbatch_tokens')} tokens; boundary "
                  f"{d.m('stack_boundary_ms'):.3f} ms per micro-batch (peer copy) beside "
                  f"{d.m('stack_stage_ms'):.1f} ms of stage compute"
                + (f"; {' and '.join(map(str, missing))} GPUs not measured ({top} GPUs here)" if missing else ""))
    if wrong:
        return Judged(measured=f"wrong logits on a split stack ({wrong}); {measured}", bound="", ratio=r,
                      verdict="not supported", target=target)
    return Judged(measured=measured, bound="N × one GPU's " + f"{one:.0f} tokens/s (same run), N = "
                  + ", ".join(map(str, sizes)), ratio=r, verdict=at_least(r, STACK_TARGET, STACK_PARTLY),
                  target=target)


# --------------------------------------------------------------------------- figure
METHOD_STYLE = {CE: (PINNED, "o-"), SM_PUSH: (RING, "s-"), SM_PULL: ("#ff7f0e", "^-")}


def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, from the result's JSON: GB/s vs size for each method and direction
    with the link's bound as a line (left); each copy's GB/s alone vs beside the other
    engines (right, when the overlap run was traced)."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if x.get("section") == "bandwidth" and is_num(x.get("GB/s"))]
    need(rows, "table rows of section bandwidth")
    m = r.get("metrics") or {}
    g1, g2 = m.get("overlap_gbps_alone") or {}, m.get("overlap_gbps_together") or {}
    rates = [k for k in ("peer", "H2D", "D2H") if is_num(g1.get(k)) and is_num(g2.get(k))]
    fig, axes = plt.subplots(1, 2 if rates else 1, figsize=WIDE, squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1] if rates else [1]})
    ax = axes[0][0]
    dirs = list(dict.fromkeys(x["direction"] for x in rows if x["direction"] not in ("local", "both")))
    for method in PEER_METHODS:
        color, style = METHOD_STYLE[method]
        for k, direction in enumerate(dirs):
            pts = sorted((x["MiB"], x["GB/s"]) for x in rows if x["method"] == method and x["direction"] == direction)
            if pts:
                ax.plot(*zip(*pts), style, color=color, alpha=1.0 if k == 0 else 0.5, ms=4,
                        label=f"{method} {direction}")
    nominal = m.get("link_nominal_gbps_per_direction")
    top = max(x["GB/s"] for x in rows if x["method"] in PEER_METHODS and x["direction"] in dirs)
    if is_num(nominal):
        ax.axhline(nominal, color=BOUND, ls="--", lw=1.2,
                   label=f"bound: link {nominal:.0f} GB/s per direction ({(m.get('link') or {}).get('kind', '')})")
        top = max(top, nominal)
    local = m.get("local_d2d_gbps_at_largest")
    if is_num(local):  # far above the link: a note, not a line that flattens the others
        ax.text(0.02, 0.97, f"local D2D copy (same run): {local:.0f} GB/s at {m.get('largest_MiB')} MiB",
                transform=ax.transAxes, va="top", fontsize=8, color=GREY)
    ax.set_xscale("log", base=2)
    plain_log(ax)
    ax.set_ylim(0, 1.15 * top)
    ax.set_xlabel("copy size (MiB)")
    ax.set_ylabel("GB/s (bytes copied)")
    ax.set_title("peer copies each way vs the link")
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)
    if rates:
        a2 = axes[0][1]
        xs = np.arange(len(rates))
        b1 = a2.bar(xs - 0.2, [g1[k] for k in rates], 0.4, color=GREY, label="alone")
        b2 = a2.bar(xs + 0.2, [g2[k] for k in rates], 0.4, color=PINNED, label="all four at once")
        label_bars(a2, list(b1) + list(b2), "{:.0f}", horizontal=False)
        a2.set_xticks(xs, rates)
        a2.set_yscale("log")
        plain_log(a2, "y")
        a2.set_ylabel("GB/s")
        frac = m.get("overlap_fraction")
        a2.set_title(f"beside each other: {frac:.0%} overlap" if is_num(frac) else "beside each other")
        a2.legend(fontsize=7, loc="upper right")
    return {"peer copy GB/s vs size, each method and direction, with the link's bound":
            save(fig, out / f"{NAME}.png")}


# --------------------------------------------------------------------------- without the report
def format_table(rows: list[dict[str, Any]]) -> str:
    def f(x, fmt):
        return format(x, fmt) if is_num(x) else "-"

    lines = [f"{'method':24} {'direction':9} {'MiB':>5} {'GB/s':>8} {'/ link':>7} {'/ local':>8} {'spread':>7}"]
    for r in rows:
        if r.get("section") == "bandwidth":
            lines.append(f"{r['method']:24} {r['direction']:9} {r['MiB']:5d} {f(r['GB/s'], '8.1f')} "
                         f"{f(r['vs_link'], '7.3f')} {f(r['vs_local_d2d'], '8.3f')} {f(r['spread'], '7.3f')}")
    lines.append(f"{'overlap work':36} {'ms':>8} {'longest alone':>13} {'ratio':>6}")
    for r in rows:
        if r.get("section") == "overlap":
            lines.append(f"{r['work']:36} {f(r['ms'], '8.3f')} {f(r['max_alone_ms'], '13.3f')} {f(r['ratio'], '6.3f')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The experiment without the report: prints the table and the claims, writes the JSON."""
    from .standalone import main as standalone

    return standalone("python -m fullpipe.experiments.multi_gpu", run, format_table, "fewer sizes and samples", argv)


if __name__ == "__main__":
    raise SystemExit(main())
