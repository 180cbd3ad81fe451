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
and for the consumer's scratch allocation, copies GPU to GPU, and the consumer's stream
waits for the copy. The producer's scratch goes back to its pool once the copy is done.
One host thread enqueues everything and never waits for a GPU; each stage uploads its
micro-batch's small index arrays (positions, offsets) itself, from pinned memory.

With one device it is the plain stack over the same micro-batches: the baseline the
pipeline is measured against.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ..pipeline.schedule import bubble_fraction, enqueue_order, split_layers, stage_costs
from .config import StackConfig
from .decoder import DecoderStack, SliceRun, slice_weight_names
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
                 release_threshold: int | str = "max"):
        """``weights``: the whole stack's tensors, on any device (each stage copies its own
        to its GPU). ``split``: the layers of each stage (default :func:`stage_split`).
        ``mode``: how activations cross a boundary, ``"copy"`` (copy engines) or
        ``"pull"`` (the next GPU's SMs read them over the link)."""
        import torch

        from ..cuda.device import Device, device_index
        from ..cuda.peer import device_count
        from ..cuda.pool import DevicePool
        from ..pipeline.boundary import PeerBoundary

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
        self.config, self.split, self.mode = config, split, mode
        self.stages: list[Stage] = []
        for dev, layers in zip(self.devices, split):
            pool = DevicePool(Device(dev), release_threshold)
            mine = {k: weights[k].to(f"cuda:{dev}").contiguous() for k in slice_weight_names(config, layers)}
            stack = DecoderStack(config, mine, kernels=kernels, pool=pool, layers=layers)
            self.stages.append(Stage(dev, layers, stack, pool, torch.cuda.Stream(device=dev)))
        self.boundaries = [PeerBoundary(a.device, b.device, src_pool=a.pool, dst_pool=b.pool, mode=mode)
                           for a, b in zip(self.stages, self.stages[1:])]

    def __repr__(self) -> str:
        parts = ", ".join(f"GPU {s.device}: layers {s.layers.start}..{s.layers.stop - 1}" for s in self.stages)
        return f"StagedStack({parts}; boundaries by {self.mode})"

    @property
    def stage_costs(self) -> list[float]:
        """Each stage's share of the stack's work by the split's cost model (the slowest sets the pace)."""
        layer = layer_flops(self.config, 8192, 1024)
        head = 2.0 * 8 * self.config.width * self.config.vocab
        costs = stage_costs([1.0] * self.config.layers, self.split, last_extra=head / layer)
        return [c / sum(costs) for c in costs]

    def bubble_fraction(self, microbatches: int) -> float:
        return bubble_fraction(len(self.stages), microbatches)

    # ------------------------------------------------------------------ prefill
    def prefill(self, requests: Sequence[Any], *, microbatch_tokens: int = 8192) -> StagedResult:
        """Check the requests (refused ones come back in ``errors``), cut the valid ones
        into micro-batches and run them through the stages. Returns at once; the logits
        are ready after :meth:`synchronize` (or when the last stage's stream gets there)."""
        import torch

        valid, errors = check_requests(requests, self.config)
        groups = plan_microbatches([len(r.tokens) for r in valid], microbatch_tokens)
        batches = [pack([valid[i] for i in g]) for g in groups]
        logits = self.prefill_microbatches(batches)
        last = self.stages[-1]
        with torch.cuda.device(last.device), torch.cuda.stream(last.stream):
            joined = torch.cat(logits) if len(logits) > 1 else logits[0]
        return StagedResult(joined, tuple(i for b in batches for i in b.indices), errors, len(batches),
                            sum(b.total_tokens for b in batches))

    def prefill_microbatches(self, batches: Sequence[PackedBatch]) -> list[Any]:
        """Each packed micro-batch through every stage, enqueued in fill-drain order; the
        logits of each, on the last stage's GPU, ordered on its stream."""
        from ..cuda import events

        S, M = len(self.stages), len(batches)
        if M == 0:
            raise ValueError("no micro-batches")
        in_flight: dict[tuple[int, int], tuple[SliceRun, Any]] = {}  # (stage, micro-batch) -> (run, ready)
        outputs: list[Any] = [None] * M
        try:
            for step in enqueue_order(S, M):
                stage, batch = self.stages[step.stage], batches[step.microbatch]
                receive = None
                if step.stage > 0:
                    receive = self._receiver(step.stage, in_flight.pop((step.stage - 1, step.microbatch)))
                run = stage.stack.run_slice(batch, stream=stage.stream, receive=receive)
                if step.stage == S - 1:
                    outputs[step.microbatch] = run.logits
                    stage.stack.release(run)
                else:
                    in_flight[(step.stage, step.microbatch)] = (run, events.record(run.stream))
        except BaseException:
            for (s, _), (run, _) in in_flight.items():
                self.stages[s].stack.release(run)
            raise
        return outputs

    def _receiver(self, stage_index: int, produced: tuple[SliceRun, Any]) -> Any:
        """The ``receive`` of stage ``stage_index`` for one micro-batch: the boundary moves
        the previous stage's residual stream into this stage's scratch."""
        from ..cuda import events

        run, ready = produced
        boundary = self.boundaries[stage_index - 1]
        producer = self.stages[stage_index - 1]

        def receive(x: Any, stream: Any) -> None:
            allocated = events.record(stream)  # this stage's scratch exists from here on
            src = run.arena.data_ptr() + run.plan.region("x").offset
            done = boundary.send(src, x.data_ptr(), x.numel() * x.element_size(), after=[ready, allocated],
                                 stream=stream)
            events.wait(stream, done)
            producer.stack.release(run, boundary.stream)

        return receive

    def synchronize(self) -> None:
        for s in self.stages:
            s.stream.synchronize()
        for b in self.boundaries:
            b.stream.sync()
