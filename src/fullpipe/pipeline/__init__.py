"""Level 1: the stream pipeline executor (between kernels).

- executor.py  :class:`StreamPipeline`: H2D -> compute -> D2H on N non-blocking streams
- protocol.py  one batch's enqueue sequence (two halves, for prefetch), shared by every mode
- tensors.py   tensor-function computes y = f(x) (PyTorch, CuPy) and PyTorch CUDA-graph capture
- graphs.py    ``graph=True``: the per-batch sequence captured once, one graph launch per batch
- run_graphs.py  ``graph=True``, pinned runs that repeat: the whole run as one graph launch
- staging.py   the pinned staging ring, recycled by host functions or events
- pageable.py  CPU threads that stage pageable arrays through the ring
- tuning.py    ``chunk="auto"``: chunk size from measured copy and compute rates
- stats.py     what a run did: per-stage busy time, overlap, the bound
- plan.py      input checks and batch planning (before any GPU work)
- workload.py  the calibrated test workload: a kernel with a tunable arithmetic intensity,
               its NumPy reference, and a hand-built pipeline of it for the tracer
- workload.cu, stamps.cu  the kernels
"""

from .executor import PipelineWarning, StreamPipeline
from .graphs import GraphCaptureError
from .stats import PipelineStats
from .tuning import ChunkChoice

__all__ = ["StreamPipeline", "PipelineStats", "ChunkChoice", "PipelineWarning", "GraphCaptureError"]
