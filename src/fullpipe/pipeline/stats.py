"""What a pipeline run did, from events recorded on the streams that did the work.

Each batch records four timing events on its stream: before H2D, after H2D,
after compute, after D2H. All are read relative to one start event that every
stream waited on, so the batches' stage intervals share one time axis.

- **busy** of a stage = the length of the *union* of its intervals over all
  batches: the time that stage (copy engine each way, the SMs) had work. A
  batch's interval may include time spent queued behind another stream's copy on
  the same engine; that time is covered by the other batch's interval, so the
  union still measures the engine's busy time.
- **bound** = the busiest stage's busy time, measured for these same batches in
  this same run; ``ratio_to_bound`` = bound / wall: 1.0 means the slowest stage
  never waited.
- **overlap** = (sum of the stages' busy times) / wall: 1.0 is serial, 3.0 is
  all three stages busy all the time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

from .tensors import MAX_TORCH_GRAPHS

STAGES = ("h2d", "compute", "d2h")
HOST_BOUND_SHARE = 0.8  # host time per batch over the GPU's compute per batch that counts as host-bound


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end) intervals."""
    total = 0.0
    cur_start = cur_end = None
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if cur_end is None or a > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


def max_concurrency(intervals: Sequence[tuple[float, float]]) -> int:
    """The largest number of intervals open at one instant (an end at t closes before
    a start at t opens)."""
    points = []
    for a, b in intervals:
        if b > a:
            points.append((a, 1))
            points.append((b, -1))
    points.sort(key=lambda p: (p[0], p[1]))
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


@dataclasses.dataclass
class BatchTiming:
    """Milliseconds from the run's start event: before H2D, after H2D, after compute,
    after D2H."""

    index: int
    t: tuple[float, float, float, float]

    def stage(self, name: str) -> tuple[float, float]:
        k = STAGES.index(name)
        return self.t[k], self.t[k + 1]


@dataclasses.dataclass
class PipelineStats:
    batches: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    streams: int = 0
    copy_streams: bool = False  # True: + one H2D and one D2H stream (StreamPipeline(copy_streams=True))
    slots: int = 0
    staging: dict[str, str] = dataclasses.field(default_factory=dict)  # {"input": "ring"|"direct", ...}
    # who does the ring's memmoves, per side through the ring: "caller" (the enqueueing
    # thread, small batches) or "threads" (staging threads)
    host_copies: dict[str, str] = dataclasses.field(default_factory=dict)
    # staging "bulk" (bulk.py): ms spent after the last batch copying the outputs to the caller's arrays,
    # and how many outputs had been copied during the run (their batches done)
    bulk_drain_ms: float = 0.0
    bulk_drained_early: int = 0
    # staging "bulk": the inputs' H2Ds, one per group of batches (bulk.DeviceInputs); 0: one per batch.
    # busy_ms["h2d"] then counts no input copy: the groups' H2Ds are not timed
    bulk_uploads: int = 0
    input_shapes: int = 0  # distinct batch input shapes in the run (each is a graph per lane with graph=True)
    recycle: str = ""
    pinned_ring_bytes: int = 0
    wall_ms: float = 0.0  # host wall clock of the run (end to end)
    gpu_span_ms: float | None = None  # start event -> end event
    # per stage: the union of its intervals; with timing="sampled" and fewer timed batches
    # than batches, scaled from the timed ones (an estimate: timed_batches < batches)
    busy_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    timed_batches: int = 0
    enqueue_us_per_batch: float = 0.0  # host time in the per-batch GPU calls
    loop_us_per_batch: float = 0.0  # all host time per batch except waiting for slots
    host_wait_ms: float = 0.0  # main thread blocked on the staging ring
    chunk: dict[str, Any] | None = None  # the chunk choice, its reason and its source (tuned/reused/given)
    # per batch, microseconds of host time: front half (allocate, H2D), the compute call, the
    # rest of the back half (D2H, signals, free), and waiting for the staging ring
    host_us: dict[str, float] = dataclasses.field(default_factory=dict)
    prefetch: int = 0  # batches whose H2D was enqueued before the compute call of the current one (grouped
    # calls: before the group's first call)
    call_group: int = 1  # a tensor function's calls of this many batches went back to back (executor._call_group)
    # StreamPipeline(compute_threads=N > 1): {"threads", "wait_ms" (the enqueueing thread waiting for
    # calls to come back)}; None: every call on the enqueueing thread
    compute_threads: dict[str, Any] | None = None
    # why a tensor function's calls ran one after another on the GPU (it writes the same memory in every
    # call: a reused output buffer, torch.compile's CUDA graphs; pipeline/tensors.py), or None
    compute_serial: str | None = None
    # batches run at a batch shape the compute had seen, padded with copies of their rows
    # (StreamPipeline's pad_shapes): {"batches", "rows" added}, or None
    padded: dict[str, int] | None = None
    # run_batches of a long list: {"path": "plain"|"pipelined"|"threads", "source": a trial run or the
    # choice, "plain_us_per_batch", "pipelined_us_per_batch", "threads_us_per_batch": the trial's median}
    # (list_paths.py), else None
    list_path: dict[str, Any] | None = None
    # pinned memory this run took from the pinned pool: allocations, allocated_bytes (new pinning),
    # reuses, pool_held_bytes, ring_bytes[, fallback]
    pinned: dict[str, Any] = dataclasses.field(default_factory=dict)
    # graph=True: {"graphs", "launches", "captures", "capture_ms", "fallback_batches", "max_graphs", "reason",
    #              "run_graph" (none / seen / captured / replayed: run_graphs.py), "run_graphs", "run_capture_ms"}
    graph: dict[str, Any] | None = None
    timings: list[BatchTiming] = dataclasses.field(default_factory=list, repr=False)
    enqueue_us: list[float] = dataclasses.field(default_factory=list, repr=False)  # per batch
    host_copy_s: dict[str, list[float]] = dataclasses.field(default_factory=dict, repr=False)  # staging memmoves

    @property
    def throughput_gbps(self) -> float:
        """Input bytes per second over the run's wall time, in GB/s."""
        return self.bytes_in / (self.wall_ms * 1e6) if self.wall_ms > 0 else 0.0

    @property
    def bound_stage(self) -> str | None:
        return max(self.busy_ms, key=self.busy_ms.get) if self.busy_ms else None  # type: ignore[arg-type]

    @property
    def bound_ms(self) -> float | None:
        return max(self.busy_ms.values()) if self.busy_ms else None

    @property
    def ratio_to_bound(self) -> float | None:
        b = self.bound_ms
        return b / self.wall_ms if b is not None and self.wall_ms > 0 else None

    @property
    def overlap(self) -> float | None:
        if not self.busy_ms or not self.gpu_span_ms:
            return None
        return sum(self.busy_ms.values()) / self.gpu_span_ms

    @property
    def host_bound_hint(self) -> str | None:
        """A sentence when the host's time per batch (the compute's own call, or fullpipe's
        enqueue around it) is about as long as the busiest GPU stage's time per batch (at
        least HOST_BOUND_SHARE of it: when the host is the limit, the compute's busy time
        is stretched by the launches it waits for, so the two meet). The GPU then waits for
        the host, and overlap cannot help; replaying captured calls can. None otherwise,
        and for graph runs."""
        call_us = self.host_us.get("compute_call") if self.host_us else None
        bound = self.bound_ms
        if self.graph or not call_us or not bound or not self.batches:
            return None
        gpu_us = bound * 1e3 / self.batches
        threads = self.compute_threads["threads"] if self.compute_threads else 1
        if max(call_us / threads, self.enqueue_us_per_batch) < HOST_BOUND_SHARE * gpu_us:
            return None
        on = f" (on {threads} threads at once)" if threads > 1 else ""
        what = (f"host-bound: the compute's call took {call_us:.0f} us per batch{on} and fullpipe's enqueue "
                f"{self.enqueue_us_per_batch:.0f} us, about as long as the busiest GPU stage ({self.bound_stage}, "
                f"{gpu_us:.0f} us per batch), so the GPU waits for Python; ")
        if threads == 1 and self.streams > 1 and call_us >= self.enqueue_us_per_batch / 2:
            what += (f"if the call's time is mostly inside a few large PyTorch operators (a fused layer), "
                     f"compute_threads={min(self.streams, 3)} calls it from as many threads at once; ")
        if self.input_shapes * max(self.streams, 1) > MAX_TORCH_GRAPHS:  # graphs would not hold them all
            return what + (f"the batches came in {self.input_shapes} shapes, and graph=True keeps one graph per "
                           f"stream and shape ({MAX_TORCH_GRAPHS} in all): bucket them to a few sizes (pad rows or "
                           "sequence lengths up to the next of a few) to replay captured calls with graph=True "
                           "(docs/notes/pipeline-pytorch.md), or make the batches larger to amortise the call")
        return what + ("graph=True replays captured calls (docs/notes/pipeline-pytorch.md), and larger batches "
                       "amortise the call")

    def stage_gbps(self, stage: str) -> float | None:
        """Bytes moved by a copy stage over that stage's busy time (GB/s)."""
        ms = self.busy_ms.get(stage)
        n = self.bytes_in if stage == "h2d" else self.bytes_out if stage == "d2h" else None
        return n / (ms * 1e6) if ms and n else None

    def as_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("timings", "enqueue_us", "host_copy_s")}
        d.update(
            throughput_gbps=self.throughput_gbps,
            bound_stage=self.bound_stage,
            bound_ms=self.bound_ms,
            ratio_to_bound=self.ratio_to_bound,
            overlap=self.overlap,
            h2d_gbps=self.stage_gbps("h2d"),
            d2h_gbps=self.stage_gbps("d2h"),
            host_bound_hint=self.host_bound_hint,
        )
        return d

    def __str__(self) -> str:
        lines = [
            f"{self.batches} batches, {self.bytes_in / 1e6:.1f} MB in, {self.bytes_out / 1e6:.1f} MB out "
            f"on {self.streams} streams ({self.staging}, {self.slots} slots, recycle={self.recycle})",
            f"wall {self.wall_ms:.2f} ms, throughput {self.throughput_gbps:.2f} GB/s",
        ]
        if self.busy_ms:
            busy = ", ".join(f"{k} {v:.2f} ms" for k, v in self.busy_ms.items())
            how = (f" (estimated from {self.timed_batches} of {self.batches} batches timed)"
                   if 0 < self.timed_batches < self.batches else "")
            lines.append(
                f"busy{how}: {busy}; bound {self.bound_stage} {self.bound_ms:.2f} ms -> "
                f"{self.ratio_to_bound:.1%} of bound; overlap {self.overlap:.2f}"
            )
        lines.append(
            f"host: enqueue {self.enqueue_us_per_batch:.1f} us/batch, loop {self.loop_us_per_batch:.1f} us/batch, "
            f"waited {self.host_wait_ms:.2f} ms for staging"
        )
        if self.host_us:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in self.host_us.items())
            lines.append(f"host per batch (us): {parts}; prefetch {self.prefetch}"
                         + (f"; calls {self.call_group} at a time" if self.call_group > 1 else ""))
        if self.compute_threads:
            lines.append(f"compute calls: on {self.compute_threads['threads']} host threads (the enqueueing thread "
                         f"waited {self.compute_threads['wait_ms']:.2f} ms for them)")
        if self.padded:
            lines.append(f"padded: {self.padded['batches']} batches run at a batch shape the compute had seen "
                         f"({self.padded['rows']} rows of copies added; pad_shapes)")
        if self.bulk_uploads:
            lines.append(f"bulk inputs: on the GPU in {self.bulk_uploads} copies (one per group of batches), "
                         "not one per batch")
        if self.staging.get("output") == "bulk":
            lines.append(f"bulk outputs: {self.bulk_drained_early} of {self.batches} copied out during the run, "
                         f"the rest in {self.bulk_drain_ms:.2f} ms after it")
        if self.list_path:
            lp = self.list_path
            best = ", ".join(f"{p} {lp[f'{p}_us_per_batch']:.1f}" for p in ("plain", "pipelined", "threads")
                             if f"{p}_us_per_batch" in lp)
            lines.append(f"long list: run {lp['path']} ({lp['source']})"
                         + (f"; trial's median us per batch: {best}" if best else ""))
        if self.pinned:
            lines.append(f"pinned: {self.pinned.get('allocated_bytes', 0) / 2**20:.1f} MiB newly pinned this run "
                         f"({self.pinned.get('allocations', 0)} allocations, {self.pinned.get('reuses', 0)} reuses)"
                         + (f"; {self.pinned['fallback']}" if self.pinned.get("fallback") else ""))
        if self.chunk:
            refined = self.chunk.get("refined_runs")
            lines.append(f"chunk: {self.chunk.get('reason', self.chunk)}"
                         + (f" (models refined from {refined} run{'s' if refined > 1 else ''})" if refined else ""))
        if self.graph:
            lines.append(f"graph: {self.graph.get('reason', self.graph)}")
        hint = self.host_bound_hint
        if hint:
            lines.append(f"hint: {hint}")
        return "\n".join(lines)


def busy_from_timings(timings: Sequence[BatchTiming], with_compute: bool, with_d2h: bool) -> dict[str, float]:
    busy = {"h2d": union_length(t.stage("h2d") for t in timings)}
    if with_compute:
        busy["compute"] = union_length(t.stage("compute") for t in timings)
    if with_d2h:
        busy["d2h"] = union_length(t.stage("d2h") for t in timings)
    return busy
