"""Random weights for a :class:`StackConfig`, from a seed, as PyTorch tensors.

The same call gives the same weights on the same device type (one torch.Generator
seeded with ``seed`` draws every tensor in :meth:`StackConfig.weight_shapes` order), so
the fullpipe stack and the PyTorch reference run on identical weights.

Scales keep activations of order 1 through the stack (so that a bf16 comparison means
something): projections ~ N(0, 1/in), the embedding ~ N(0, 1), norm weights 1 + N(0, 0.1^2)
(not all ones, so that a norm applied with the wrong weight shows).
"""

from __future__ import annotations

import math
from typing import Any

from .config import StackConfig


def init_weights(config: StackConfig, seed: int = 0, device: Any = "cpu") -> dict[str, Any]:
    import torch

    dtype = getattr(torch, config.dtype)
    g = torch.Generator(device=device).manual_seed(seed)
    weights = {}
    for name, shape in config.weight_shapes().items():
        w = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
        if len(shape) == 1:
            w = 1 + 0.1 * w
        elif name != "embedding":
            w = w / math.sqrt(shape[0])
        weights[name] = w.to(dtype)
    return weights
