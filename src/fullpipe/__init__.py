"""fullpipe: keep every engine of an NVIDIA GPU busy, and measure what it buys.

Level 1 (between kernels): :mod:`fullpipe.pipeline`. Level 2 (inside kernels):
:mod:`fullpipe.kernels`. Evidence: :mod:`fullpipe.trace`, :mod:`fullpipe.experiments`,
``fullpipe report``. The CUDA runtime layer underneath is :mod:`fullpipe.cuda`.

Importing fullpipe needs no GPU; creating a :class:`Device` does.
"""

from __future__ import annotations

from ._version import __version__
from .cuda.device import Device, DeviceFacts
from .cuda.pool import DevicePool
from .errors import CompileError, CudaError, NoDeviceError
from .pipeline import PipelineWarning, StreamPipeline
from . import trace  # noqa: E402 - cheap: needs neither a GPU nor CUPTI until capture()

__all__ = ["__version__", "Device", "DeviceFacts", "DevicePool", "StreamPipeline", "PipelineWarning", "CudaError", "NoDeviceError", "CompileError", "trace"]
