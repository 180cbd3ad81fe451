"""llm-scratch: per-sequence scratch memory for variable-length sequences.

Sequences with lengths L drawn log-normal between 128 and 8192 go through two
streams (alternating). Each sequence needs scratch sized by L:

- attention scores, L^2 x heads x 2 bytes (fp16), alive during prefill;
- activations, L x hidden x 2 bytes;
- a KV cache of L x (2 x hidden x 2) bytes that grows by one token per decode step
  (a new buffer one token longer, the old contents copied in, the old one freed),
  plus a per-step attention row of heads x (L + t) x 4 bytes.

Three ways to get the scratch, everything else identical (kernels, copies, streams,
one host wait per stream before its next sequence):

- the fullpipe pool (stream-ordered, threshold "max"): exactly what each sequence needs;
- preallocated for the maximum length, per stream: no allocation at all, but the
  memory of the longest sequence held the whole time (the throughput bound);
- cuMemAlloc/cuMemFree per buffer: exact sizes, but every free waits for the device.

Correctness: the KV prefix is written with a pattern at prefill and checked after
the last decode step (it went through every grow-and-copy), in every variant.
"""

from __future__ import annotations

from pathlib import Path
import numpy as np

from ..cuda import driver as drv
from ..cuda.events import elapsed_ms, join, record, start_together
from ..cuda.memory import copy_d2d, memset_d8
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from . import _alloc_common as common
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, Missing, at_least, at_most, is_num, rule, times, with_claims
from .figures import BOUND, WIDE, allocator_color, label_bars, need, pyplot, save

NAME = "llm-scratch"
TITLE = "Variable-length sequences: per-sequence scratch from the pool vs preallocate-for-max vs cudaMalloc"
CLAIM = ("a stream-ordered pool gives variable-length sequences exact-size scratch at the speed of "
         "preallocated buffers, with far less memory held")
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "LLM serving needs per-sequence scratch (attention scores, activations, a KV cache that grows every "
    "decode step) sized by the sequence length. Preallocating for the longest sequence is fast but holds "
    "memory; a stream-ordered pool can hand out exact sizes instead."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): the two claims its CLAIM makes.
VERDICT_FROM = ("scratch-speed", "scratch-memory")

HEADS = 4
HIDDEN = 2048
KV_PER_TOKEN = 2 * HIDDEN * 2  # K and V, fp16


def scratch_bytes(L: int, step: int = 0) -> dict[str, int]:
    """Bytes of each scratch buffer for a sequence of length L at decode step ``step``."""
    return {
        "scores": L * L * HEADS * 2,
        "activations": L * HIDDEN * 2,
        "kv": (L + step) * KV_PER_TOKEN,
        "row": HEADS * (L + step) * 4,
    }


class _Tracked:
    """Wraps an allocator to count live bytes (for the variants without statistics)."""

    def __init__(self, inner):
        self.inner = inner
        self.live = 0
        self.peak = 0
        self.sizes: dict[int, int] = {}

    def alloc(self, n, stream):
        ptr, h = self.inner.alloc(n, stream)
        self.sizes[id(h) if not isinstance(h, int) else h] = n
        self.live += n
        self.peak = max(self.peak, self.live)
        return ptr, h

    def free(self, h, stream):
        self.live -= self.sizes.pop(id(h) if not isinstance(h, int) else h)
        self.inner.free(h, stream)


class _Preallocated:
    """Per stream: one buffer of each kind for the longest sequence, two for the KV
    cache (grow = copy into the other one)."""

    def __init__(self, pool: DevicePool, streams, max_len: int, steps: int):
        self.pool = pool
        big = scratch_bytes(max_len, steps)
        self.bytes = 0
        self.per_stream = {}
        for s in streams:
            bufs = {k: pool.allocate(big[k], s) for k in ("scores", "activations", "row")}
            bufs["kv"] = [pool.allocate(big["kv"], s), pool.allocate(big["kv"], s)]
            self.bytes += sum(big.values()) + big["kv"]
            self.per_stream[int(s.handle)] = (s, bufs)

    def close(self):
        for s, bufs in self.per_stream.values():
            for k, v in bufs.items():
                for b in (v if isinstance(v, list) else [v]):
                    self.pool.free(b, s)


def _sequence(dev, seq_id, L, steps, s, get, put, counter_ptr):
    """Enqueue one sequence on stream ``s``. ``get(kind, nbytes, s) -> (ptr, handle)``,
    ``put(kind, handle, s)``."""
    sz = scratch_bytes(L)
    scores, h_scores = get("scores", sz["scores"], s)
    act, h_act = get("activations", sz["activations"], s)
    kv, h_kv = get("kv", sz["kv"], s)
    common.fill_pattern(dev, s, kv, sz["kv"], seq_id)  # prefill writes the KV cache
    common.touch(dev, s, scores, sz["scores"], seq_id)  # attention scores
    common.touch(dev, s, act, sz["activations"], seq_id)
    put("scores", h_scores, s)  # scores die after prefill
    for t in range(1, steps + 1):
        grown = scratch_bytes(L, t)
        new_kv, h_new = get("kv", grown["kv"], s)
        copy_d2d(new_kv, kv, grown["kv"] - KV_PER_TOKEN, s)  # carry the cache over
        common.touch(dev, s, new_kv + grown["kv"] - KV_PER_TOKEN, KV_PER_TOKEN, t)  # the new token
        put("kv", h_kv, s)
        kv, h_kv = new_kv, h_new
        row, h_row = get("row", grown["row"], s)
        common.touch(dev, s, row, grown["row"], t)
        put("row", h_row, s)
    common.check_pattern(dev, s, kv, sz["kv"], seq_id, counter_ptr)  # the prefix survived every copy
    put("kv", h_kv, s)
    put("activations", h_act, s)


def _run_variant(dev, streams, lengths, steps, get, put, counter_ptr):
    done = [None] * len(streams)
    first = streams[0]
    start = start_together(streams)
    for i, L in enumerate(lengths):
        k = i % len(streams)
        if done[k] is not None:
            with drv.translated("cuEventSynchronize"):
                done[k].sync()  # the same host wait in every variant
        _sequence(dev, i + 1, L, steps, streams[k], get, put, counter_ptr)
        done[k] = record(streams[k])
    join(first, *streams)
    end = record(first, timing=True)
    end.sync()
    return elapsed_ms(start, end)


def run(ctx) -> Result:
    dev = ctx.device
    n_seq = 24 if ctx.quick else 96
    steps = 8 if ctx.quick else 16
    max_len = 8192
    lengths = common.sequence_lengths(np.random.default_rng(5), n_seq, 128, max_len)
    streams = [create_stream(dev), create_stream(dev)]
    common.kernels(dev)
    aux = DevicePool(dev)
    counter = aux.empty(1, np.uint64, streams[0])
    tokens = sum(L + steps for L in lengths)

    def counter_value() -> int:
        join(streams[0], *streams)
        return int(counter.to_numpy(streams[0])[0])

    rows, metrics = [], {}
    variants = ["preallocated for max (bound)", "fullpipe pool", "cuMemAlloc/cuMemFree"]
    for vi, label in enumerate(variants):
        ctx.progress(vi / len(variants), label)
        memset_d8(counter.ptr, 0, 8, streams[0])
        join(streams[1], streams[0])
        holder = None
        if label.startswith("preallocated"):
            pre = holder = _Preallocated(DevicePool(dev), streams, max_len, steps)
            flip = {}

            def get(kind, n, s, pre=pre, flip=flip):
                bufs = pre.per_stream[int(s.handle)][1]
                if kind == "kv":
                    k = int(s.handle)
                    flip[k] = flip.get(k, 0) ^ 1
                    b = bufs["kv"][flip[k]]
                else:
                    b = bufs[kind]
                return int(b.handle), None

            def put(kind, h, s):
                pass
        else:
            inner = common.PoolAllocator(DevicePool(dev, "max")) if "pool" in label else common.DriverMalloc()
            alloc = _Tracked(inner)

            def get(kind, n, s, alloc=alloc):
                return alloc.alloc(n, s)

            def put(kind, h, s, alloc=alloc):
                alloc.free(h, s)

        # Warm-up (pool fills, first-call costs), then the timed pass over all sequences.
        _run_variant(dev, streams, lengths[:4], steps, get, put, counter.ptr)
        if label == "fullpipe pool":
            inner.pool.reset_high_water_marks()
        ms = _run_variant(dev, streams, lengths, steps, get, put, counter.ptr)
        bad = counter_value()
        if bad:
            raise AssertionError(f"{label}: {bad} KV-cache words came back wrong")
        if holder is not None:
            peak = holder.bytes
            holder.close()
            holder.pool.trim(0)
        elif label == "fullpipe pool":
            peak = inner.pool.stats().reserved_high_bytes
            inner.pool.trim(0)
        else:
            peak = alloc.peak
        metrics[label] = {"ms": ms, "tokens_per_s": tokens / (ms * 1e-3), "sequences_per_s": n_seq / (ms * 1e-3),
                          "peak_bytes": peak}
        rows.append({"scratch": label, "total ms": ms, "sequences/s": n_seq / (ms * 1e-3),
                     "tokens/s": tokens / (ms * 1e-3), "peak scratch MiB": peak / common.MiB})

    bound = metrics[variants[0]]
    for r in rows:
        r["throughput / bound"] = r["sequences/s"] / bound["sequences_per_s"]
        r["memory / bound"] = r["peak scratch MiB"] * common.MiB / bound["peak_bytes"]
    pool, malloc = metrics["fullpipe pool"], metrics["cuMemAlloc/cuMemFree"]
    speed = pool["sequences_per_s"] / bound["sequences_per_s"]
    mem = pool["peak_bytes"] / bound["peak_bytes"]
    aux.free_array(counter, streams[0])
    streams[0].sync()
    notes = [
        f"pool: {speed:.2f}x the throughput of preallocating for L={max_len}, with {mem:.2f}x its memory; "
        f"cuMemAlloc/cuMemFree: {malloc['sequences_per_s'] / bound['sequences_per_s']:.2f}x the throughput.",
        f"lengths: median {int(np.median(lengths))}, max {max(lengths)}, {n_seq} sequences, {steps} decode steps "
        "each; peak for the pool is its reserved high-water mark, for cuMemAlloc the live bytes.",
    ]
    return with_claims(Result(
        experiment=NAME,
        claim=CLAIM,
        verdict=UNJUDGED,
        device=common.device_info(dev),
        params={"sequences": n_seq, "decode_steps": steps, "heads": HEADS, "hidden": HIDDEN, "max_len": max_len,
                "lengths": lengths, "streams": len(streams), "quick": ctx.quick},
        metrics=metrics,
        bound=Bound("preallocated-for-max throughput", bound["sequences_per_s"], "sequences/s"),
        ratio=speed,
        table=rows,
        notes=notes,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
def _scratch(d: Data):
    m = d.r.get("metrics") or {}
    bound = m.get("preallocated for max (bound)")
    pool = m.get("fullpipe pool")
    if not bound or not pool:
        raise Missing("metrics['preallocated for max (bound)'] and metrics['fullpipe pool']")
    return bound, pool, m.get("cuMemAlloc/cuMemFree")


@rule(NAME, "scratch-speed",
      "per-sequence scratch from the stream-ordered pool runs at the speed of preallocated buffers")
def _scratch_speed(d: Data) -> Judged:
    bound, pool, malloc = _scratch(d)
    r = pool["sequences_per_s"] / bound["sequences_per_s"]
    return Judged(measured=f"pool {pool['sequences_per_s']:.0f} sequences/s = {times(r)}"
                  + (f"; cuMemAlloc/cuMemFree {times(malloc['sequences_per_s'] / bound['sequences_per_s'])}" if malloc else ""),
                  bound=f"preallocated for the longest sequence = {bound['sequences_per_s']:.0f} sequences/s",
                  ratio=r, verdict=at_least(r, 0.9, 0.7), target="supported ≥ 0.9×, partly ≥ 0.7×")


@rule(NAME, "scratch-memory", "exact-size scratch from the pool holds far less memory than preallocating for the maximum")
def _scratch_memory(d: Data) -> Judged:
    bound, pool, _ = _scratch(d)
    r = pool["peak_bytes"] / bound["peak_bytes"]
    return Judged(measured=f"pool peak {pool['peak_bytes'] / 2**20:.0f} MiB = {times(r)}",
                  bound=f"preallocated for max = {bound['peak_bytes'] / 2**20:.0f} MiB", ratio=r,
                  verdict=at_most(r, 0.5, 0.75), target="supported ≤ 0.5×, partly ≤ 0.75×")


@rule(NAME, "scratch-vs-malloc", "the pool beats cudaMalloc/cudaFree for per-sequence scratch")
def _scratch_malloc(d: Data) -> Judged:
    bound, pool, malloc = _scratch(d)
    if not malloc:
        raise Missing("metrics['cuMemAlloc/cuMemFree']")
    r = pool["sequences_per_s"] / malloc["sequences_per_s"]
    return Judged(measured=f"pool {times(r)} the sequences/s of cuMemAlloc/cuMemFree",
                  bound=f"cuMemAlloc/cuMemFree = {malloc['sequences_per_s']:.0f} sequences/s", ratio=r,
                  verdict=at_least(r, 1.5, 1.05), target="supported ≥ 1.5×, partly ≥ 1.05×")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("sequences/s"))]
    need(rows, "table['sequences/s']")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    names = [x["scratch"] for x in rows]
    colors = [allocator_color(n) for n in names]
    label_bars(a1, a1.barh(names, [x["sequences/s"] for x in rows], color=colors), "{:.0f}")
    label_bars(a2, a2.barh(names, [x.get("peak scratch MiB") or 0 for x in rows], color=colors), "{:.0f} MiB")
    pre = next((x for x in rows if "preallocated" in x["scratch"]), None)
    if pre:
        a1.axvline(pre["sequences/s"], color=BOUND, ls="--", lw=1.2, label="bound: preallocated for max")
        a1.legend(loc="lower right", fontsize=8)
    a1.set_xlabel("sequences / s")
    a1.set_title("throughput")
    a2.set_xlabel("peak scratch memory (MiB)")
    a2.set_title("memory held")
    a2.set_yticks(range(len(names)), [""] * len(names))
    for ax in (a1, a2):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    return {"variable-length scratch: throughput and memory": save(fig, out / f"{NAME}.png")}
