"""Exceptions raised by fullpipe.

`CudaError` is raised for every failed driver, runtime or NVRTC call; it names
the call and carries the driver's own error name and string, so a user can
search for it. User mistakes (wrong dtype, shape, option) raise the built-in
`ValueError` / `TypeError` instead.
"""

from __future__ import annotations


class CudaError(RuntimeError):
    """A CUDA driver/runtime call failed.

    Attributes: ``call`` (the API called, e.g. ``"cuStreamCreate"``), ``code``
    (the numeric error code, or None), ``name`` (e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``)
    and ``description`` (the driver's error string).
    """

    def __init__(self, call: str, code: int | None, name: str, description: str):
        self.call = call
        self.code = code
        self.name = name
        self.description = description
        super().__init__(f"{call} failed: {name} ({code}): {description}")


class NoDeviceError(CudaError):
    """No usable CUDA device or driver on this machine."""


class CompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message holds the compiler log."""

    def __init__(self, source_name: str, log: str):
        self.source_name = source_name
        self.log = log
        super().__init__(f"NVRTC failed to compile {source_name}:\n{log}")
