"""``chunk="auto"``: pick a chunk size from copy and compute rates measured on the
first chunks of the user's own data.

Each stage's time per chunk is modelled as ``fixed + bytes * per_byte`` (a fit
through two probe chunks). The pipeline's throughput is set by the slowest stage
(or by the host, if enqueueing a batch takes longer than the slowest stage), so:

- *below*: a chunk must be big enough that every stage's fixed cost (launch and
  copy latency) and the host's per-batch enqueue time are small next to the
  slowest stage's per-byte time: at least ``efficiency`` (95 %) of the asymptotic
  rate;
- *above*: every stream should get a few chunks (filling and draining the
  pipeline costs about two chunk-times), and the chunks in flight on all streams
  must fit in device memory and in the pinned ring.

The choice and its reason are kept in :class:`ChunkChoice` and shown in the stats.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

STAGES = ("h2d", "compute", "d2h")
MiB = 1 << 20
_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_chunk(chunk: Any) -> int | str:
    """``"auto"``, a row count (int), or a size string such as ``"8MiB"`` (bytes).

    Returns ``"auto"``, an int of rows, or a string ``"<n>B"`` normalised to bytes.
    """
    if isinstance(chunk, str):
        text = chunk.strip().lower()
        if text == "auto":
            return "auto"
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]i?b|b)?", text)
        if not m:
            raise ValueError(f"chunk must be 'auto', a row count or a size like '8MiB', got {chunk!r}")
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


@dataclasses.dataclass(frozen=True)
class ChunkChoice:
    nbytes: int
    rows: int
    bound_stage: str
    predicted_efficiency: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _efficiency(models: dict[str, StageModel], host_s: float, nbytes: float) -> float:
    """Throughput at this chunk size over the asymptotic (infinitely large chunk) one."""
    slowest_per_byte = max(m.per_byte_s for m in models.values())
    per_chunk = max(max(m.time(nbytes) for m in models.values()), host_s)
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
    chunks_per_stream: int = 4,
    buffers_in_flight: int | None = None,
) -> ChunkChoice:
    """Chunk size (bytes, whole rows) for the rest of a run. See the module docstring."""
    if not models or any(k not in STAGES for k in models):
        raise ValueError(f"models must be keyed by {STAGES}")
    row_bytes = max(int(row_bytes), 1)
    bound_stage = max(models, key=lambda k: models[k].per_byte_s)
    rates = ", ".join(f"{k} {1e-9 / models[k].per_byte_s:.3g} GB/s" for k in models if models[k].per_byte_s > 0)
    lower = smallest_efficient_chunk(models, host_s, efficiency) * 1.25  # margin over the model's noise
    lower = max(lower, row_bytes)
    # In flight at once: about two chunks per stream (copy_streams holds more: the
    # caller says how many), input and output on the device.
    per_chunk_device = 1.0 + out_over_in
    in_flight = buffers_in_flight if buffers_in_flight is not None else streams * 2
    upper_memory = device_budget_bytes / (in_flight * per_chunk_device)
    upper_share = total_bytes / (streams * chunks_per_stream)
    upper = min(upper_memory, upper_share, max_slot_bytes)
    if lower <= upper:
        target = lower
        why = (
            f"smallest chunk with >= {efficiency:.0%} of the asymptotic rate "
            f"(stage fixed costs and {host_s * 1e6:.0f} us host enqueue per batch amortised)"
        )
    else:
        target = upper
        limiter = (
            "device memory" if upper == upper_memory else "the pinned slot cap" if upper == max_slot_bytes
            else f"{chunks_per_stream} chunks per stream"
        )
        why = f"capped by {limiter}; the efficient size would be {lower / MiB:.1f} MiB"
    # Whole rows; MiB-aligned when rows are small, so copies stay large and aligned.
    if target >= MiB and row_bytes <= MiB:
        up = -(-target // MiB) * MiB
        target = up if up <= upper else max(MiB, target // MiB * MiB)
    rows = max(1, int(target // row_bytes))
    nbytes = rows * row_bytes
    eff = _efficiency(models, host_s, nbytes)
    copy_pb = max(models.get("h2d", StageModel(0, 0)).per_byte_s, models.get("d2h", StageModel(0, 0)).per_byte_s)
    comp_pb = models.get("compute", StageModel(0, 0)).per_byte_s
    balance = (
        f"compute/copy time per byte {comp_pb / copy_pb:.2f}" if copy_pb > 0 else "no copies"
    )
    reason = (
        f"{nbytes / MiB:.2f} MiB ({rows} rows): {why}. Rates: {rates}; {balance}; "
        f"bound by {bound_stage}; predicted {eff:.0%} of its asymptotic rate."
    )
    return ChunkChoice(nbytes=nbytes, rows=rows, bound_stage=bound_stage, predicted_efficiency=eff, reason=reason)


def probe_rows(total_rows: int, row_bytes: int) -> list[int]:
    """Row counts of the probe chunks run first for chunk="auto": a small one twice (the
    first warms up the compute), then a larger one. Empty when the input is too small
    to be worth probing (under ~16 MiB): it is then split evenly."""
    total = total_rows * row_bytes
    if total < 16 * MiB:
        return []
    small = max(1, MiB // row_bytes)
    large = max(small + 1, (8 * MiB) // row_bytes)
    if 2 * small + large > total_rows // 4:
        return []
    return [small, small, large]
