"""Prefill through fullpipe's level-1 executor: requests in as host arrays, logits out in
pinned host memory, micro-batches in flight on several streams.

    with PipelinedPrefill(stack, streams=2) as pre:        # stack: DecoderStack(..., pool=pool)
        result = pre.prefill(requests, microbatch_tokens=8192)
    result.logits                                           # pinned CPU tensor [valid requests, vocab]

The valid requests are packed, in order, into micro-batches of at most
``microbatch_tokens`` tokens. Each micro-batch's packed token ids are one batch of a
:class:`~fullpipe.pipeline.executor.StreamPipeline` (stream form, no pipeline output):
the executor copies them H2D (its pinned ring, or directly when pinned) on the batch's
stream and calls the compute, which enqueues the whole stack on that stream with the
micro-batch's scratch exact-size from the stack's pool, then the D2H of the
micro-batch's logits into pinned host memory. Micro-batch j runs on stream j % N, so
one micro-batch's copies and kernels overlap another's; nothing in the loop waits for
the GPU. The executor's one wait at the end makes the logits ready.

Why the logits do not use the executor's own output: it has one output row per input
row (per token here), and a prefill returns one row per request.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Sequence

from .decoder import DecoderStack
from .requests import RequestError
from .stages import pack_microbatches


@dataclasses.dataclass
class PipelinedResult:
    logits: Any  # pinned CPU tensor [len(indices), vocab], the stack's dtype
    indices: tuple[int, ...]
    errors: list[RequestError]
    microbatches: int
    stats: Any  # the executor's PipelineStats of the run


class PipelinedPrefill:
    def __init__(self, stack: DecoderStack, *, streams: int = 2, **pipeline_options: Any):
        """``stack``: a whole :class:`~.decoder.DecoderStack` on a GPU (its ``pool`` gives
        the scratch; without one, PyTorch's allocator does). ``streams`` and any other
        :class:`~fullpipe.pipeline.executor.StreamPipeline` option (not ``output`` or
        ``form``) go to the executor."""
        from ..cuda.device import Device
        from ..pipeline.executor import StreamPipeline

        if stack.device.type != "cuda":
            raise ValueError("PipelinedPrefill needs the stack on a GPU")
        if not (stack.holds_embedding and stack.holds_head):
            raise ValueError("PipelinedPrefill needs the whole stack (not a slice of its layers)")
        for key in ("output", "form", "compute"):
            if key in pipeline_options:
                raise ValueError(f"{key}= is set by PipelinedPrefill")
        self.stack = stack
        self._pending: collections.deque = collections.deque()
        self.pipe = StreamPipeline(self._compute, form="stream", streams=streams, output=None,
                                   device=Device(stack.device.index or 0), pool=stack.pool, **pipeline_options)

    def prefill(self, requests: Sequence[Any], *, microbatch_tokens: int = 8192) -> PipelinedResult:
        """Check the requests (the refused ones come back in ``errors``), run every
        micro-batch through the executor and return when the logits are on the host."""
        import numpy as np
        import torch

        batches, errors = pack_microbatches(requests, self.stack.config, microbatch_tokens)
        if not batches:
            from .requests import NoValidRequests

            raise NoValidRequests(errors)
        dtype = getattr(torch, self.stack.config.dtype)
        logits = torch.empty((sum(b.requests for b in batches), self.stack.config.vocab), dtype=dtype, pin_memory=True)
        rows = np.cumsum([0] + [b.requests for b in batches])
        outs = [logits[rows[i]:rows[i + 1]] for i in range(len(batches))]  # each micro-batch's rows
        self._pending = collections.deque(zip(batches, outs))
        try:
            self.pipe.run_batches([np.ascontiguousarray(b.tokens, dtype=np.int32) for b in batches])
        finally:
            self._pending.clear()
        return PipelinedResult(logits, tuple(i for b in batches for i in b.indices), errors, len(batches),
                               self.pipe.stats)

    def _compute(self, stream: Any, x: Any, y: Any) -> None:
        """One micro-batch, called by the executor in batch order: the stack on ``stream``
        from the token ids it copied up (``x``), then its logits D2H into pinned memory."""
        import torch

        from ..cuda.interop import as_torch

        batch, host_logits = self._pending.popleft()
        tokens = as_torch(x)
        run = self.stack.run_slice(batch, stream=stream, tokens=tokens)
        try:
            torch_s, _ = self.stack._streams(stream)
            with torch.cuda.stream(torch_s):  # the logits were made on this stream: no record_stream needed
                host_logits.copy_(run.logits, non_blocking=True)
        finally:
            self.stack.release(run)

    def close(self) -> None:
        self.pipe.close()

    def __enter__(self) -> "PipelinedPrefill":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
