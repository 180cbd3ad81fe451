"""``chunk="auto"``: pick a chunk size from copy, compute and host rates measured on
the first chunks of the user's own data, once per kind of work, then reuse it.

Each stage's time per chunk is modelled as ``fixed + bytes * per_byte`` (a fit
through the two largest probe chunks): the GPU stages (H2D, compute, D2H, from
events), the host's staging copies for pageable arrays (stage-in, drain-out), and
the host's own time per batch (enqueue plus the user's compute call: for a
framework model, its Python kernel launches; the executor fits it as a constant). A run of ``total`` bytes cut into
chunks of ``C`` bytes then takes about::

    T(C) = ceil(total / C) * P(C) + F(C)
    P(C) = max(every stage's time, HOST_MARGIN * host time,   # the steady state
               sum of the GPU stages' times / streams)         # (a stream's batches in order)
    F(C) = sum of the stages' times - the slowest one          # fill and drain

P falls as C grows while fixed costs (copy latency, launch overhead, the Python of
a model's forward) are amortised; F grows with C (the first H2D and the last D2H
are not overlapped). The choice minimises T within the limits: device memory for
the chunks in flight, the pinned slot cap, one chunk per stream at least. A
compute whose per-batch cost is mostly launch overhead thus gets big chunks (the
host must stay ahead of the GPU, with HOST_MARGIN to spare); a copy-bound run gets
the size where the copy latency is amortised and the fill is still small.

The probes grow (x2) until the slowest stage is in its linear regime (time
roughly doubling with the size) or a quarter of the input is spent, so the fit
sees the per-row cost even when small chunks are launch-bound. A tensor function
(a framework model, for which every new batch size is a new shape it may pay a
setup for) is probed at a likely chunk and a quarter of it (``probe_rows``), and
its first run may keep the larger as its chunk.

The models are cached by the pipeline per (row shape, dtype, staging, compute,
streams): later runs choose from them without probing (``stats.chunk["source"]
== "reused"``); ``StreamPipeline.retune()`` forgets them. Each run at a chosen chunk
also corrects them: a probe runs one chunk alone and waits for it, and can read the
host and the compute several times slower than a steady run does, so a stage the
run took less time for than its model predicts is lowered to what the run took; once
runs at two sizes have been seen, each stage is refitted through them (a fixed cost
per chunk the probes missed shows there); the next run chooses again
(``stats.chunk["refined_runs"]``). A side that went through
the ring when tuned and is copied directly now (a pageable array pinned in place at
its second run) reuses those models without the ring's host copies (``"reused from
the ring"``): the GPU copies were timed from pinned slots already.

The choice and its reason are kept in :class:`ChunkChoice` and shown in the stats.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np

STAGES = ("h2d", "compute", "d2h")
HOST_STAGES = ("stage_in", "drain_out")  # the staging threads' memmoves (pageable arrays)
MiB = 1 << 20
_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_chunk(chunk: Any) -> int | str:
    """``"auto"``, a row count (an int, or a string ``"256 rows"``), or a size string
    such as ``"8MiB"`` (bytes).

    Returns ``"auto"``, an int of rows, or a string ``"<n>B"`` normalised to bytes.
    A bare int is rows, never bytes: the executor warns when a run then has fewer
    batches than streams (the usual sign of bytes given as rows).
    """
    if isinstance(chunk, str):
        text = chunk.strip().lower()
        if text == "auto":
            return "auto"
        m = re.fullmatch(r"(\d+)\s*rows?", text)
        if m:
            if int(m.group(1)) <= 0:
                raise ValueError(f"chunk must be >= 1 row, got {chunk!r}")
            return int(m.group(1))
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]i?b|b)?", text)
        if not m:
            raise ValueError(f"chunk must be 'auto', a row count (256 or '256 rows') or a size like '8MiB', "
                             f"got {chunk!r}")
        nbytes = int(float(m.group(1)) * _UNITS[m.group(2) or ""])
        if nbytes <= 0:
            raise ValueError(f"chunk must be > 0, got {chunk!r}")
        return f"{nbytes}B"
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)):
        raise TypeError(f"chunk must be 'auto', an int (rows) or a size string, got {type(chunk).__name__}")
    if chunk <= 0:
        raise ValueError(f"chunk must be >= 1 row, got {chunk}")
    return int(chunk)


def chunk_rows(chunk: int | str, row_bytes: int, rows: int) -> int:
    """Rows per chunk for a parsed (non-auto) chunk: at least one row, at most all."""
    if isinstance(chunk, str):
        nbytes = int(chunk[:-1])
        return max(1, min(rows, nbytes // max(row_bytes, 1)))
    return max(1, min(rows, int(chunk)))


@dataclasses.dataclass(frozen=True)
class StageModel:
    """time(bytes) = fixed_s + bytes * per_byte_s, for one stage."""

    fixed_s: float
    per_byte_s: float

    def time(self, nbytes: float) -> float:
        return self.fixed_s + nbytes * self.per_byte_s

    @classmethod
    def fit(cls, n1: float, t1: float, n2: float, t2: float) -> "StageModel":
        """Through two (bytes, seconds) points; noise that makes a term negative is
        clamped (a stage cannot take negative time)."""
        if n2 == n1:
            return cls(0.0, max(t2, 0.0) / max(n2, 1.0))
        per_byte = max((t2 - t1) / (n2 - n1), 0.0)
        fixed = max(t1 - per_byte * n1, 0.0)
        if per_byte == 0.0:  # flat: treat it all as per-byte at the bigger size
            per_byte = max(t2, t1, 1e-12) / max(n2, n1)
        return cls(fixed, per_byte)


COPY_STAGES = ("h2d", "d2h")
# A GPU copy's own cost per chunk is the DMA's setup: microseconds. The sweeps of a 1 GiB
# bf16 MLP on an H100 fit 0.4 us of fixed cost per chunk (session 17).
COPY_FIXED_MAX_S = 20e-6


def copy_model(model: StageModel, at_bytes: float) -> StageModel:
    """A copy stage's model with at most COPY_FIXED_MAX_S of fixed cost per chunk and the
    same time at ``at_bytes`` (the larger size it was fitted at). A fit through two sizes
    can put far more there, time the copy did not take: through the ring, the slot's
    signal (a host function) sits between the H2D and its end event; sampled batches'
    intervals include their wait behind the other lanes' copies on the one engine. On an
    H100 such a fit gave the H2D 302 us per chunk, predicted 16 MiB chunks of a 1 GiB MLP
    at 41.6 ms where they ran 29.4 ms, and chose 103 MiB chunks, 0.94x the best fixed chunk
    (session 17). Fewer, larger chunks then look better than they are."""
    if model.fixed_s <= COPY_FIXED_MAX_S:
        return model
    t = model.time(at_bytes)
    return StageModel(COPY_FIXED_MAX_S, max(t - COPY_FIXED_MAX_S, 0.0) / max(at_bytes, 1.0))


def fit_stage(stage: str, n1: float, t1: float, n2: float, t2: float) -> StageModel:
    """A stage's model through (n1 bytes, t1 s) and (n2, t2): the line through them, a copy
    stage's fixed cost capped (:func:`copy_model`, at the larger size)."""
    fitted = StageModel.fit(n1, t1, n2, t2)
    return copy_model(fitted, max(n1, n2)) if stage in COPY_STAGES else fitted


TIE = 0.01  # predicted times this close are equal: take the middle of the sizes within it
# Refined models: the chunk in use is kept when predicted this close to the best. Small: the
# margin adds to the model's own error (a 1 GiB MLP, H200: 86 MiB kept, predicted within 5 %,
# ran 6.6 % slower than 32 MiB; session 35). A costly new shape is the rent rule's to weigh.
KEEP_WITHIN = 0.02
HOST_MARGIN = 1.5  # the host's time per batch must stay this far under the GPU's, to stay ahead


@dataclasses.dataclass(frozen=True)
class ChunkChoice:
    nbytes: int
    rows: int
    bound_stage: str
    predicted_efficiency: float
    reason: str
    predicted_ms: float = float("nan")  # T(C) for a run of this size (a probed run's probes ran part of it)
    keep_loss_ms: float = 0.0  # kept for a compute's new-shape cost: predicted ms lost against the best

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _efficiency(models: dict[str, StageModel], host_s: float, nbytes: float, host_per_byte_s: float = 0.0) -> float:
    """Throughput at this chunk size over the asymptotic (infinitely large chunk) one."""
    slowest_per_byte = max(max(m.per_byte_s for m in models.values()), host_per_byte_s)
    per_chunk = max(max(m.time(nbytes) for m in models.values()), host_s + host_per_byte_s * nbytes)
    return nbytes * slowest_per_byte / per_chunk if per_chunk > 0 else 1.0


def smallest_efficient_chunk(models: dict[str, StageModel], host_s: float, efficiency: float) -> float:
    """The smallest chunk (bytes) whose throughput is >= efficiency x the asymptotic one."""
    slowest = max(m.per_byte_s for m in models.values())
    need = 0.0
    for m in models.values():  # fixed + n*b <= n*slowest/eff  ->  n >= fixed / (slowest/eff - b)
        denom = slowest / efficiency - m.per_byte_s
        need = max(need, m.fixed_s / denom if denom > 0 else 0.0)
    need = max(need, host_s * efficiency / slowest)  # host enqueue must keep up
    return need


def predicted_time(models: dict[str, StageModel], host: StageModel, total_bytes: float, nbytes: float,
                   host_margin: float = HOST_MARGIN, lanes: int = 0) -> float:
    """T(C) of the module docstring, in seconds, for chunks of ``nbytes``. ``lanes``: when
    each batch runs all its GPU stages on one of that many streams (the default layout),
    a stream's next H2D waits for its last D2H, so a chunk takes at least the sum of the
    GPU stages over the lanes."""
    times = [m.time(nbytes) for m in models.values()]
    h = host.time(nbytes)
    steady = max(max(times), host_margin * h)
    if lanes:
        steady = max(steady, sum(m.time(nbytes) for k, m in models.items() if k in STAGES) / lanes)
    fill = sum(times) + h - max(max(times), h)
    return math.ceil(total_bytes / nbytes) * steady + fill


def choose_chunk(
    models: dict[str, StageModel],
    *,
    total_bytes: int,
    row_bytes: int,
    streams: int,
    host_s: float,
    device_budget_bytes: int,
    out_over_in: float = 1.0,
    max_slot_bytes: int = 256 * MiB,
    efficiency: float = 0.95,
    buffers_in_flight: int | None = None,
    host_per_byte_s: float = 0.0,
    device_bytes_per_byte: float = 0.0,
    host_margin: float = HOST_MARGIN,
    min_bytes: int = 0,
    keep_bytes: int = 0,
    lanes: int = 0,
    new_shape_s: float = 0.0,
    kept_loss_s: float = 0.0,
    keep_within: float = KEEP_WITHIN,
    kept_what: str = "the chunk of the runs before",
) -> ChunkChoice:
    """Chunk size (bytes, whole rows) for a run of ``total_bytes``: the C that
    minimises the predicted time T(C) (module docstring) within the limits.

    ``models``: per stage, keyed by STAGES (GPU) and HOST_STAGES (staging copies).
    ``host_s`` + ``host_per_byte_s`` x C: the host's time per batch.
    ``device_bytes_per_byte``: device memory the compute itself uses per input byte
    (a framework's activations), on top of the input and output buffers.
    ``min_bytes``: no smaller chunk (the smallest size the models were fitted at: below
    it they extrapolate, e.g. a memmove split over fewer threads is slower per byte).
    ``keep_bytes``: the chunk earlier runs used, kept when its predicted time is within
    KEEP_WITHIN of the best (each new chunk size is a new batch shape: a framework
    model's first calls at it can take a second). ``new_shape_s``: what a new batch shape
    costs the compute once (its first call's extra host time), and ``kept_loss_s`` what
    keeping the chunk has lost so far (predicted): the kept chunk also stays while the
    two with this run's loss add up to no more than that cost (rent until the rent paid
    would buy: at most twice the best in hindsight, whatever the number of runs to come).
    (A change of chunk usually costs two new shapes, the chunk's and its last chunk's,
    and a run of another size a new last chunk whatever is kept: the rule counts one.)
    ``keep_within`` and ``kept_what``: that margin, and what the kept chunk is (the reason's
    words; chunk="auto"'s first choice may keep the largest size its probes ran at).
    ``lanes``: see predicted_time."""
    if not models or any(k not in STAGES + HOST_STAGES for k in models):
        raise ValueError(f"models must be keyed by {STAGES + HOST_STAGES}")
    row_bytes = max(int(row_bytes), 1)
    total_bytes = max(int(total_bytes), row_bytes)
    host = StageModel(host_s, host_per_byte_s)

    def T(nbytes: float) -> float:
        return predicted_time(models, host, total_bytes, nbytes, host_margin, lanes)

    bound_stage = max(models, key=lambda k: models[k].per_byte_s)
    if host_per_byte_s > models[bound_stage].per_byte_s:
        bound_stage = "host"
    rates = ", ".join(f"{k} {1e-9 / models[k].per_byte_s:.3g} GB/s" for k in models if models[k].per_byte_s > 0)
    # In flight at once: about two chunks per stream (copy_streams holds more: the
    # caller says how many), input, output and the compute's own memory on the device.
    per_chunk_device = 1.0 + out_over_in + device_bytes_per_byte
    in_flight = buffers_in_flight if buffers_in_flight is not None else streams * 2
    limits = {
        "device memory": device_budget_bytes / (in_flight * per_chunk_device),
        "the pinned slot cap": float(max_slot_bytes),
        "one chunk per stream": total_bytes / streams,
    }
    upper = max(min(limits.values()), row_bytes)
    limiter = min(limits, key=limits.get)
    # T(C) on whole-row sizes: a 5 % geometric grid, and every size that cuts the run
    # into k equal chunks (T jumps with ceil(total / C))
    total_rows = max(1, total_bytes // row_bytes)
    sizes = set()
    c = float(row_bytes)
    while c < upper:
        sizes.add(max(1, int(c // row_bytes)))
        c *= 1.05
    sizes.add(max(1, int(upper // row_bytes)))
    k_min = max(1, -(-total_rows // max(1, int(upper // row_bytes))))
    for k in range(k_min, min(total_rows, k_min + 512) + 1):
        sizes.add(-(-total_rows // k))
    floor_bytes = min(max(min_bytes, row_bytes), upper)
    grid = [(float(r * row_bytes), T(r * row_bytes))
            for r in sorted(sizes) if floor_bytes <= r * row_bytes <= upper]
    if not grid:
        grid = [(float(upper), T(upper))]
    best_t = min(t for _, t in grid)
    # The middle (geometric) of the sizes predicted within TIE of the best, not an edge: the
    # model's errors cost more on the small side, where the host's time per batch (which
    # varied 130-380 us between runs of one MLP on one H100) can overtake the GPU's and the
    # time climbs steeply (a 1 GiB MLP, H100: 8 MiB chunks 22 % slower than 16 MiB; on the
    # large side, 128 MiB 11 % slower; session 16).
    band = [c for c, t in grid if t <= best_t * (1 + TIE)]
    middle = math.sqrt(band[0] * band[-1])
    target = min(band, key=lambda c: abs(math.log(c / middle)))
    lower = smallest_efficient_chunk(models, host_s * host_margin, efficiency)
    beyond = T(max(2 * upper, row_bytes))
    if beyond < best_t * (1 - TIE):  # a bigger chunk than the limits allow would be faster
        why = f"capped by {limiter}; the model's best size is larger"
    elif target < lower:
        why = (f"capped by the pipeline's fill and drain: {efficiency:.0%} of the asymptotic rate needs "
               f"{lower / MiB:.1f} MiB chunks, but the first H2D and last D2H would then cost more than "
               "the per-batch overhead saved (shortest predicted total time)")
    else:
        why = (f"shortest predicted total time: stage fixed costs and {host_s * 1e6:.0f} us of host time "
               f"per batch (x{host_margin:g} margin) amortised, fill and drain still small")
    # Whole rows; MiB-aligned when rows are small, so copies stay large and aligned.
    if target >= MiB and row_bytes * 64 <= MiB:  # (a MiB is many rows: the rounding barely moves T)
        down, up = max(MiB, target // MiB * MiB), -(-target // MiB) * MiB
        if up <= upper and T(up) < T(down) * (1 - TIE):
            target = up
        else:
            target = down
    else:  # as many chunks, of even rows: the last at most count - 1 rows short, not a short remainder
        # (a new batch shape, padded to a whole chunk where new shapes are costly; T counts the last
        # chunk whole, so never predicted slower)
        count = -(-total_rows // max(1, int(target // row_bytes)))
        even = float(-(-total_rows // count) * row_bytes)
        target = even if even >= floor_bytes else target
    keep_loss_s = 0.0  # this run's predicted loss, when the chunk is kept for the new-shape cost
    if keep_bytes and target != keep_bytes and floor_bytes <= keep_bytes <= upper:
        loss_s = T(keep_bytes) - best_t
        if loss_s <= best_t * keep_within:
            target = keep_bytes
            why = f"{kept_what}, within {keep_within:.0%} of the shortest predicted total time"
        elif kept_loss_s + loss_s <= new_shape_s:
            target, keep_loss_s = keep_bytes, loss_s
            why = (f"{kept_what}: a new chunk size is a new batch shape, whose first call cost "
                   f"the compute {new_shape_s * 1e3:.0f} ms more than the next (its per-shape setup), more than "
                   f"keeping it has lost so far ({(kept_loss_s + loss_s) * 1e3:.2f} ms with this run's)")
    rows = max(1, int(target // row_bytes))
    nbytes = rows * row_bytes
    eff = _efficiency(models, host_s, nbytes, host_per_byte_s)
    copy_pb = max(models.get("h2d", StageModel(0, 0)).per_byte_s, models.get("d2h", StageModel(0, 0)).per_byte_s)
    comp_pb = models.get("compute", StageModel(0, 0)).per_byte_s
    balance = (
        f"compute/copy time per byte {comp_pb / copy_pb:.2f}" if copy_pb > 0 else "no copies"
    )
    t_ms = T(nbytes) * 1e3
    reason = (
        f"{nbytes / MiB:.2f} MiB ({rows} rows): {why}. Rates: {rates}; {balance}; host "
        f"{host_s * 1e6:.0f} us + {host_per_byte_s * MiB * 1e6:.1f} us/MiB per batch; "
        f"bound by {bound_stage}; predicted {eff:.0%} of its asymptotic rate, {t_ms:.1f} ms for a run of this size."
    )
    return ChunkChoice(nbytes=nbytes, rows=rows, bound_stage=bound_stage, predicted_efficiency=eff, reason=reason,
                       predicted_ms=t_ms, keep_loss_ms=keep_loss_s * 1e3)


# chunk="auto" on an input too small to probe splits it evenly, into no chunk smaller than
# this. A batch costs the host 40-150 us on H100 hosts (enqueue, events, the compute's call),
# about what 2-4 MiB take to copy. Session 20, one H100 (docs/notes/data/2026-11-27-s20-p121-*):
# inputs of 2-16 MiB (pinned and pageable, x * 2 and four 1024x1024 matmuls) ran fastest in
# 1-2 chunks of at least 4 MiB, and 6 chunks were the slowest at every size (up to 1.9x the
# best); a 256 KiB request split into 6 chunks ran 0.05x the naive .cuda()/.cpu() call
# against 0.14x as one chunk.
MIN_SPLIT_CHUNK_BYTES = 4 * MiB


def even_split_rows(total_rows: int, row_bytes: int, streams: int) -> int:
    """chunk="auto" for an input too small to probe: rows per chunk for two chunks per
    stream, but no chunk under MIN_SPLIT_CHUNK_BYTES (one chunk for an input under twice that)."""
    chunks = max(1, min(2 * streams, (total_rows * row_bytes) // MIN_SPLIT_CHUNK_BYTES))
    return -(-total_rows // chunks)


def even_split_choice(total_rows: int, row_bytes: int, streams: int) -> ChunkChoice:
    """chunk="auto"'s choice for an input too small to probe (:func:`even_split_rows`), with its reason."""
    per = even_split_rows(total_rows, row_bytes, streams)
    n = -(-total_rows // per)
    reason = (f"input is {total_rows * row_bytes / 2**20:.1f} MiB, too small to probe: "
              + (f"split into {n} chunks (two per stream)" if n == 2 * streams else
                 f"{'one chunk' if n == 1 else f'{n} chunks'} (an even split stops at "
                 f"{MIN_SPLIT_CHUNK_BYTES >> 20} MiB a chunk: smaller chunks cost the host more per "
                 "batch than their copies take)"))
    return ChunkChoice(per * row_bytes, per, "unknown", float("nan"), reason)


# The probes of a compute whose new batch shapes may cost (a framework model: each size is probed
# twice, and each new size's first call pays the framework's per-shape setup): the larger is an
# even split of the run near this size, so that it is itself a likely chunk and the first run can
# keep it (_tune; its last chunk padded to it where new shapes are costly) instead of paying for a
# third shape. Fixed chunks of 64 MiB ran within 2 % of the best of 16, 32 and 64 MiB for eight of
# nine torchvision models over pageable images (ViT-B/16: 7 % slower than 32 MiB; an H200, session
# 45, p295); the chunks chosen were 37-144 MiB. The smaller is a quarter of it, not 1 MiB: a model's forward over a
# few rows is paced by its Python launches, and a fit through such a point and a large one gave
# resnet50 a 5.4 ms fixed compute cost per chunk (6 rows took 5.6 ms, its host's time) and chunks
# of 1024 rows (session 46, call 1; probed at 102 and 410 rows: 1.0 ms, and 410 rows, call 3).
LIKELY_CHUNK_BYTES = 64 * MiB


def probe_rows(total_rows: int, row_bytes: int, likely_chunk: bool = False) -> list[int]:
    """Row counts of the probe chunks run first for chunk="auto": a small one twice (the
    first warms up the compute), then a larger one: 1 MiB and 8 MiB; with ``likely_chunk``,
    an even split of the run near LIKELY_CHUNK_BYTES (in k >= 10 chunks, so that both
    sizes probed twice stay within a quarter of the input) and a quarter of it, where that
    split is over 8 MiB (inputs over ~80 MiB). Empty when the input is too small to be worth
    probing (under ~16 MiB): it is then split evenly."""
    total = total_rows * row_bytes
    if total < 16 * MiB:
        return []
    small = max(1, MiB // row_bytes)
    large = max(small + 1, (8 * MiB) // row_bytes)
    if 2 * small + large > total_rows // 4:
        return []
    if likely_chunk:
        k0 = max(10, round(total / LIKELY_CHUNK_BYTES))
        for k in range(k0, k0 + 3):  # (rounding up to whole rows can overrun the quarter by a few)
            even = -(-total_rows // k)
            quarter = max(small, even // 4)
            if even > large and 2 * (quarter + even) <= total_rows // 4:
                return [quarter, quarter, even]
    return [small, small, large]
