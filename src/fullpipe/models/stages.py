"""The decoder stack split over the GPUs of one host: pipeline stages joined by peer copies.

    pipe = StagedStack(config, weights, devices=[0, 1])        # layers split to balance the stages
    result = pipe.prefill(requests, microbatch_tokens=8192)   # logits of each valid request
    pipe.synchronize()

Each stage is a :class:`~fullpipe.models.decoder.DecoderStack` over a contiguous slice of
the layers (:func:`stage_split`), on its own GPU with its own copy of its weights, its own
stream-ordered pool and its own stream. The valid requests are packed, in order, into
micro-batches of at most ``microbatch_tokens`` tokens (:func:`plan_microbatches`) and
enqueued in the GPipe fill-drain order (:mod:`fullpipe.pipeline.schedule`): stage s works
on micro-batch m while stage s+1 works on m-1.

Between two stages, a :class:`~fullpipe.pipeline.boundary.PeerBoundary` moves the
micro-batch's residual stream (``[tokens, width]``, the only activation that crosses):
the producer records an event when its last layer is enqueued; the boundary waits for it
and for the consumer's scratch allocation, then moves it GPU to GPU (``mode="copy"``: a
peer copy by the copy engines; ``"pull"``: the next GPU's SMs read it over the link), and
the consumer's stream waits for the move. The producer's scratch goes back to its pool
once the move is done.
One host thread enqueues everything and never waits for a GPU (or, ``threads=True``, one
host thread per stage); each stage uploads its micro-batch's small index arrays
(positions, offsets) itself, from pinned memory.

With one device it is the plain stack over the same micro-batches: the baseline the
pipeline is measured against.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ..pipeline.schedule import enqueue_order, split_layers
from .config import StackConfig
from .decoder import DecoderStack, SliceRun, slice_weight_names
from .memory import scratch_plan
from .requests import PackedBatch, RequestError, check_requests, pack


def plan_microbatches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Consecutive requests grouped into micro-batches of at most ``max_tokens`` tokens
    (a request longer than that gets one of its own); indices into ``lengths``."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    groups: list[list[int]] = []
    tokens = 0
    for i, n in enumerate(lengths):
        if n < 1:
            raise ValueError(f"request {i} has {n} tokens")
        if groups and tokens + n <= max_tokens:
            groups[-1].append(i)
            tokens += n
        else:
            groups.append([i])
            tokens = n
    return groups


def pack_microbatches(requests: Sequence[Any], config: StackConfig,
                      max_tokens: int) -> tuple[list[PackedBatch], list[RequestError]]:
    """Check the requests, then pack the valid ones, in order, into micro-batches of at
    most ``max_tokens`` tokens (the refused ones come back as errors)."""
    valid, errors = check_requests(requests, config)
    groups = plan_microbatches([len(r.tokens) for r in valid], max_tokens)
    return [pack([valid[i] for i in g]) for g in groups], errors


def layer_flops(config: StackConfig, tokens: int, mean_length: float) -> float:
    """FLOPs of one layer's prefill over ``tokens`` packed tokens (projections, and causal
    attention over requests of ``mean_length`` tokens on average)."""
    c = config
    proj = c.width * c.qkv_width + c.heads * c.head_dim * c.width + c.width * 2 * c.ffn_width + c.ffn_width * c.width
    attention = 2 * c.heads * c.head_dim * mean_length  # QK^T and PV, causal: half of 2 x 2
    return 2.0 * tokens * proj + 2.0 * tokens * attention


def stage_split(config: StackConfig, stages: int, *, tokens: int = 8192, requests: int = 8) -> list[range]:
    """Layers per stage for ``stages`` GPUs: equal layers cost the same, and the last stage
    also runs the LM head on each request's last token (its FLOPs against a layer's, at a
    micro-batch of ``tokens`` tokens from ``requests`` requests)."""
    layer = layer_flops(config, tokens, tokens / requests)
    head = 2.0 * requests * config.width * config.vocab
    return split_layers([1.0] * config.layers, stages, last_extra=head / layer)


@dataclasses.dataclass
class Stage:
    device: int
    layers: range
    stack: DecoderStack
    pool: Any  # fullpipe DevicePool on ``device``
    stream: Any  # torch.cuda.Stream on ``device``


@dataclasses.dataclass
class StagedResult:
    logits: Any  # [len(indices), vocab] on the last stage's GPU; ready after synchronize()
    indices: tuple[int, ...]  # each row's request index in the batch as given
    errors: list[RequestError]
    microbatches: int
    tokens: int


class StagedStack:
    def __init__(self, config: StackConfig, weights: dict[str, Any], *, devices: Sequence[Any] = (0, 1),
                 kernels: str = "fullpipe", split: Sequence[range] | None = None, mode: str = "copy",
                 threads: bool = False, handoff_depth: int = 2, release_threshold: int | str = "max"):
        """``weights``: the whole stack's tensors, on any device (each stage copies its own
        to its GPU). ``split``: the layers of each stage (default :func:`stage_split`).
        ``mode``: how activations cross a boundary, ``"copy"`` (copy engines) or
        ``"pull"`` (the next GPU's SMs read them over the link). ``threads``: one host
        thread per stage enqueues it (when one thread cannot keep every GPU fed);
        ``handoff_depth``: micro-batches that may wait between two stages' threads."""
        import torch

        from ..cuda.device import Device, device_index
        from ..cuda.peer import device_count
        from ..cuda.pool import DevicePool
        from ..pipeline.boundary import MODES, PeerBoundary

        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.devices = [device_index(d) for d in devices]
        if not self.devices or len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices must be distinct GPUs, got {list(devices)}")
        available = device_count()
        if max(self.devices) >= available:
            raise ValueError(f"devices {self.devices} asked for, this machine has {available} GPU(s)")
        split = list(split) if split is not None else stage_split(config, len(self.devices))
        if len(split) != len(self.devices) or [i for r in split for i in r] != list(range(config.layers)):
            raise ValueError(f"split must cut layers 0..{config.layers - 1} into {len(self.devices)} consecutive "
                             f"ranges in order, got {split}")
        if isinstance(handoff_depth, bool) or not isinstance(handoff_depth, int) or handoff_depth < 1:
            raise ValueError(f"handoff_depth must be an int >= 1, got {handoff_depth!r}")
        self.config, self.split, self.mode = config, split, mode
        self.threads, self.handoff_depth = threads, handoff_depth
        self._scratch_bytes = 0  # each micro-batch's scratch in the current prefill (the largest's size)
        self.stages: list[Stage] = []
        for dev, layers in zip(self.devices, split):
            pool = DevicePool(Device(dev), release_threshold)
            if len(self.devices) > 1:
                # A stage's scratch is freed on the boundary's stream once the next stage has
                # its copy. Left to itself, the driver would hand that block to the stage's
                # next allocation with a wait on the boundary's stream, tying the stage to the
                # next one's progress; without internal dependencies it reuses a block only
                # once its free has run, and takes fresh memory otherwise.
                pool.set_reuse_policies(internal_dependencies=False)
            mine = {k: weights[k].to(f"cuda:{dev}").contiguous() for k in slice_weight_names(config, layers)}
            stack = DecoderStack(config, mine, kernels=kernels, pool=pool, layers=layers)
            self.stages.append(Stage(dev, layers, stack, pool, torch.cuda.Stream(device=dev)))
        self.boundaries = [PeerBoundary(a.device, b.device, src_pool=a.pool, dst_pool=b.pool, mode=mode)
                           for a, b in zip(self.stages, self.stages[1:])]

    def __repr__(self) -> str:
        parts = ", ".join(f"GPU {s.device}: layers {s.layers.start}..{s.layers.stop - 1}" for s in self.stages)
        return f"StagedStack({parts}; boundaries by {self.mode}; {'a thread per stage' if self.threads else 'one thread'})"

    # ------------------------------------------------------------------ prefill
    def prefill(self, requests: Sequence[Any], *, microbatch_tokens: int = 8192) -> StagedResult:
        """Check the requests (refused ones come back in ``errors``), cut the valid ones
        into micro-batches and run them through the stages. Returns at once; the logits
        are ready after :meth:`synchronize` (or when the last stage's stream gets there)."""
        import torch

        batches, errors = pack_microbatches(requests, self.config, microbatch_tokens)
        logits = self.prefill_microbatches(batches)
        last = self.stages[-1]
        with torch.cuda.device(last.device), torch.cuda.stream(last.stream):
            joined = torch.cat(logits) if len(logits) > 1 else logits[0]
        return StagedResult(joined, tuple(i for b in batches for i in b.indices), errors, len(batches),
                            sum(b.total_tokens for b in batches))

    def prefill_microbatches(self, batches: Sequence[PackedBatch]) -> list[Any]:
        """Each packed micro-batch through every stage; the logits of each, on the last
        stage's GPU, ordered on its stream. One host thread enqueues in fill-drain order,
        or (``threads=True``) one host thread per stage, each enqueueing its own stage's
        micro-batches in order."""
        if not batches:
            raise ValueError("no micro-batches")
        # Every micro-batch takes scratch of the largest one's size. A pool reuses a block
        # whose stream-ordered free is still pending only for a request that fits in it:
        # a micro-batch larger than the one before would make the pool reserve another
        # block (and keep it, release threshold "max") although one is live at a time.
        self._scratch_bytes = max(scratch_plan(self.config, b.total_tokens, b.requests).nbytes for b in batches)
        if self.threads and len(self.stages) > 1:
            return self._enqueue_threaded(list(batches))
        return self._enqueue_one_thread(list(batches))

    def _step(self, s: int, batch: PackedBatch, produced: Any) -> tuple[SliceRun, Any]:
        """Enqueue stage ``s`` on ``batch``, fed by ``produced`` (the previous stage's run and
        its ready event; None for stage 0). Returns (run, ready event) — the ready event is
        None for the last stage, whose scratch is already released. Raises with the
        producer's scratch released."""
        from ..cuda import events
        from ..cuda.device import ensure_current

        stage = self.stages[s]
        try:
            receive = self._receiver(s, produced) if s > 0 else None
            run = stage.stack.run_slice(batch, stream=stage.stream, receive=receive,
                                        scratch_bytes=self._scratch_bytes)
        except BaseException:
            if produced is not None:
                self.stages[s - 1].stack.release(produced[0])  # no-op if receive already did
            raise
        if s == len(self.stages) - 1:
            stage.stack.release(run)
            return run, None
        ensure_current(stage.device, force=True)  # the event belongs to the stream's device
        return run, events.record(run.stream)

    def _enqueue_one_thread(self, batches: list[PackedBatch]) -> list[Any]:
        S, M = len(self.stages), len(batches)
        in_flight: dict[tuple[int, int], tuple[SliceRun, Any]] = {}  # (stage, micro-batch) -> (run, ready)
        outputs: list[Any] = [None] * M
        try:
            for step in enqueue_order(S, M):
                produced = in_flight.pop((step.stage - 1, step.microbatch)) if step.stage else None
                run, ready = self._step(step.stage, batches[step.microbatch], produced)
                if ready is None:
                    outputs[step.microbatch] = run.logits
                else:
                    in_flight[(step.stage, step.microbatch)] = (run, ready)
        except BaseException:
            for (s, _), (run, _) in in_flight.items():
                self.stages[s].stack.release(run)
            raise
        return outputs

    def _enqueue_threaded(self, batches: list[PackedBatch]) -> list[Any]:
        """One host thread per stage. A stage hands each micro-batch's (run, ready event)
        to the next stage's thread as soon as it is enqueued (the GPU work may not have
        started); at most ``handoff_depth`` wait between two stages, so a fast stage does
        not hold the scratch of many micro-batches. PyTorch and cuda.bindings release the
        GIL inside their calls, so the stages' host work overlaps in part."""
        import queue
        import threading

        S, M = len(self.stages), len(batches)
        handoff = [queue.Queue(maxsize=self.handoff_depth) for _ in range(S - 1)]
        stop = threading.Event()
        outputs: list[Any] = [None] * M
        failures: list[BaseException] = []

        def put(q: Any, item: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def get(q: Any) -> Any:
            while not stop.is_set():
                try:
                    return q.get(timeout=0.05)
                except queue.Empty:
                    continue
            return None

        def worker(s: int) -> None:
            try:
                for m in range(M):
                    produced = get(handoff[s - 1]) if s else None
                    if s and produced is None:
                        return  # another stage failed
                    run, ready = self._step(s, batches[m], produced)
                    if ready is None:
                        outputs[m] = run.logits
                    elif not put(handoff[s], (run, ready)):
                        self.stages[s].stack.release(run)
                        return
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                failures.append(exc)
                stop.set()

        threads = [threading.Thread(target=worker, args=(s,), name=f"fullpipe-stage-{s}") for s in range(S)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s, q in enumerate(handoff):  # what a stopped consumer never took
            while not q.empty():
                run, _ = q.get_nowait()
                self.stages[s].stack.release(run)
        if failures:
            raise failures[0]
        return outputs

    def _receiver(self, stage_index: int, produced: tuple[SliceRun, Any]) -> Any:
        """The ``receive`` of stage ``stage_index`` for one micro-batch: the boundary moves
        the previous stage's residual stream into this stage's scratch."""
        from ..cuda import events
        from ..cuda.device import ensure_current

        run, ready = produced
        boundary = self.boundaries[stage_index - 1]
        producer, consumer = self.stages[stage_index - 1], self.stages[stage_index]

        def receive(x: Any, stream: Any) -> None:
            ensure_current(consumer.device, force=True)
            allocated = events.record(stream)  # this stage's scratch exists from here on
            src = run.arena.data_ptr() + run.plan.region("x").offset
            done = boundary.send(src, x.data_ptr(), x.numel() * x.element_size(), after=[ready, allocated],
                                 stream=stream)
            events.wait(stream, done)
            producer.stack.release(run, boundary.stream)
            ensure_current(consumer.device, force=True)  # the rest of this stage runs on its GPU

        return receive

    def synchronize(self) -> None:
        for s in self.stages:
            s.stream.synchronize()
        for b in self.boundaries:
            b.stream.sync()

    def close(self) -> None:
        """Wait for everything enqueued, then give every stage's pool memory back."""
        self.synchronize()
        for s in self.stages:
            s.pool.close()

    def __enter__(self) -> "StagedStack":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StackStageFactory:
    """The stack's stages for one process per GPU (:mod:`fullpipe.pipeline.distributed`):
    ``factory(rank, world_size, device)`` builds rank's slice of the stack (its weights from
    the same seed as every other rank's, its own pool on a GPU) and returns its
    ``stage_fn(m, x)`` for micro-batch ``batches[m]``: rank 0 ignores ``x`` (send the token
    ids, e.g. :meth:`inputs`) and starts from the embedding; the others take the residual
    stream ``[tokens, width]`` the previous rank sent; the last returns the logits.

        factory = StackStageFactory(config, seed=0, batches=batches, split=stage_split(config, 2))
        result = spawn_stages(2, factory, factory.inputs(), backend="nccl")

    Picklable (spawned processes rebuild everything from the config, the seed and the
    packed batches, which are host arrays)."""

    def __init__(self, config: StackConfig, *, seed: int, batches: Sequence[PackedBatch], split: Sequence[range],
                 kernels: str = "fullpipe"):
        if [i for r in split for i in r] != list(range(config.layers)):
            raise ValueError(f"split must cut layers 0..{config.layers - 1} into consecutive ranges, got {split}")
        self.config, self.seed, self.kernels = config, seed, kernels
        self.batches, self.split = list(batches), list(split)

    def inputs(self) -> list[Any]:
        """Rank 0's micro-batches: each one's token ids (host arrays; the shape travels)."""
        return [b.tokens for b in self.batches]

    def __call__(self, rank: int, world_size: int, device: Any) -> Any:
        import torch

        from .decoder import DecoderStack, slice_weight_names
        from .weights import init_weights

        if world_size != len(self.split):
            raise ValueError(f"{world_size} ranks for a split into {len(self.split)} stages")
        layers = self.split[rank]
        everything = init_weights(self.config, seed=self.seed, device=device)  # the same on every rank
        mine = {k: everything[k] for k in slice_weight_names(self.config, layers)}
        del everything
        pool = None
        if torch.device(device).type == "cuda":
            from ..cuda.device import Device
            from ..cuda.pool import DevicePool

            pool = DevicePool(Device(torch.device(device).index or 0))
        stack = DecoderStack(self.config, mine, kernels=self.kernels, pool=pool, layers=layers)
        batches, dtype = self.batches, getattr(torch, self.config.dtype)

        def stage_fn(m: int, x: Any) -> Any:
            receive = None if stack.holds_embedding else (lambda xv, _stream: xv.copy_(x))
            run = stack.run_slice(batches[m], receive=receive)  # on the runner's stage stream
            y = run.logits if stack.holds_head else run.view("x", dtype).clone()
            stack.release(run)
            return y

        return stage_fn
