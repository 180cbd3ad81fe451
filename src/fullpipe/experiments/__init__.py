"""Experiments: one module per claim to test; each returns a :class:`Result`.

An experiment module defines ``NAME``, ``TITLE``, ``CLAIM`` and
``run(ctx: Context) -> Result``. Register it in ``_MODULES`` below; ``fullpipe
bench NAME`` and ``fullpipe report`` find it there. Optional: ``PRELOAD``, the
libraries (e.g. ``("torch",)``) the report's worker may import before the experiment's
turn, while the previous experiment runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable

from .result import Bound, Claim, Result

# experiment name -> module under fullpipe.experiments. Names whose module does not
# exist yet are left out of names(); each issue's modules fill them in.
_MODULES: dict[str, str] = {
    # level 1: streams, pinned memory, events, host functions (issue 3)
    "overlap": "overlap",
    "pinned": "pinned",
    "default-stream": "default_stream",
    "sync": "sync",
    "host-ring": "host_ring",
    "concurrency": "concurrency",
    "copy-engines": "copy_engines",
    # level 1: stream-ordered memory (issue 4)
    "alloc-stall": "alloc_stall",
    "alloc-overhead": "alloc_overhead",
    "release-threshold": "release_threshold",
    "fragmentation": "fragmentation",
    "llm-scratch": "llm_scratch",
    # level 2: pipelined kernels (issue 6)
    "gemm": "gemm",
    "cluster": "cluster",
    "persistent": "persistent",
    # level 2 on Hopper: TMA, wgmma, warp specialization, multicast (issue 15)
    "gemm-hopper": "gemm_hopper",
    # ... and at a prefill's few hundred rows: the transposed product (issue 15)
    "gemm-prefill": "gemm_prefill",
    # level 2: attention (issue 16)
    "attention": "attention",
    # level 2 on Hopper: warp-specialized flash attention with TMA and wgmma (issue 17)
    "attention-hopper": "attention_hopper",
    # level 1 on real PyTorch workloads, against the peers a user would write (issue 14)
    "workloads": "workloads",
    # level 1 across GPUs: peer copies vs the link, beside H2D, D2H and compute (issue 19)
    "multi-gpu": "multi_gpu",
    # both levels together: an LLM-style layer stack prefilling variable-length requests (issue 18)
    "two-level": "two_level",
    # ... and decoding a small batch: paged KV cache, CUDA-graph steps, layerwise pipelining (issue 18)
    "two-level-decode": "two_level_decode",
}


@dataclasses.dataclass
class Context:
    """What an experiment gets: the device, the size mode, where to write figures,
    and a progress callback ``progress(done_fraction, message)``."""

    device: Any
    quick: bool = False
    out_dir: Path = Path(".")
    progress: Callable[[float, str], None] = lambda fraction, message: None


def names() -> list[str]:
    """Experiments whose module exists, in the order above."""
    return [n for n, m in _MODULES.items() if importlib.util.find_spec(f"{__name__}.{m}") is not None]


def load(name: str):
    if name not in names():
        known = ", ".join(names()) or "(none yet)"
        raise ValueError(f"unknown experiment {name!r}; known: {known}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}")


def run(name: str, ctx: Context) -> Result:
    return load(name).run(ctx)


__all__ = ["Bound", "Claim", "Context", "Result", "load", "names", "run"]
