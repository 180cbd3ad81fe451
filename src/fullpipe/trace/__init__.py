"""fullpipe.trace: what the GPU really did, as a Perfetto trace, a figure and overlap numbers.

    import fullpipe
    with fullpipe.trace.capture() as tl:      # any Python code: fullpipe, PyTorch, CuPy
        run_my_pipeline()
    tl.save("run.json")                       # open at https://ui.perfetto.dev
    tl.plot("run.png")                        # Gantt: H2D engine, SMs per stream, D2H engine
    print(tl.summary())                       # busy %, 2-/3-engine overlap, SM gaps, GB/s

Modules, one concept each:

- capture.py   the context manager, and the hook (:func:`stamp`, :func:`tag`,
               :func:`current`) that fullpipe's own code uses to mark its operations
- activity.py  CUPTI activity records through cupti-python (a dependency)
- fallback.py  CUDA events around stamped operations when CUPTI is not there
- timeline.py  the data model (:class:`Record`, :class:`Timeline`) and its JSON file
- metrics.py   exact interval arithmetic: busy, overlap, gaps, bandwidth
- export.py    Chrome/Perfetto trace-event JSON
- plot.py      the PNG Gantt chart
- nvtx.py      NVTX ranges for Nsight users (no-op without the ``nvtx`` package)

What the tests and the recorded example traces trace: fullpipe.pipeline.workload.TracedPipeline.

Importing this package needs neither a GPU nor CUPTI.
"""

from __future__ import annotations

from . import metrics, nvtx
from .capture import Capture, capture, current, name_stream, stamp, tag
from .metrics import Summary, summarize
from .timeline import Record, Timeline, load

__all__ = [
    "Capture",
    "Record",
    "Summary",
    "Timeline",
    "capture",
    "current",
    "load",
    "metrics",
    "name_stream",
    "nvtx",
    "stamp",
    "summarize",
    "tag",
]
