"""Level 1: the stream pipeline executor (between kernels).

- executor.py  :class:`StreamPipeline`: H2D -> compute -> D2H on N non-blocking streams
- staging.py   the pinned staging ring, recycled by host functions or events
- pageable.py  CPU threads that stage pageable arrays through the ring
- tuning.py    ``chunk="auto"``: chunk size from measured copy and compute rates
- stats.py     what a run did: per-stage busy time, overlap, the bound
- plan.py      input checks and batch planning (before any GPU work)
- workload.py  fullpipe's own per-batch kernel with a tunable arithmetic intensity
- timing.py    timing work spread over several streams
- workload.cu, stamps.cu  the kernels
"""

from .executor import StreamPipeline
from .stats import PipelineStats
from .tuning import ChunkChoice

__all__ = ["StreamPipeline", "PipelineStats", "ChunkChoice"]
