"""PyTorch for the GPU kernel tests, which build inputs and references with it.

Without PyTorch those tests skip, except in a run that selected the GPU tests (-m gpu):
there a missing PyTorch fails loudly instead of turning the kernel tests into silent skips.
A module uses it as ``from ._torch import torch, needs_torch`` and
``_needs_torch = pytest.fixture(autouse=True)(needs_torch)``."""

from __future__ import annotations

import pytest

try:
    import torch
except ImportError:
    torch = None


def needs_torch(request):
    if torch is None:
        msg = "PyTorch is not installed: the GPU kernel tests need it for inputs and references"
        if "gpu" in (request.config.getoption("-m") or ""):
            pytest.fail(msg)
        pytest.skip(msg)
