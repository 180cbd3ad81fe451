"""Experiments: one module per claim to test; each returns a :class:`Result`.

An experiment module defines ``NAME``, ``TITLE``, ``CLAIM`` and
``run(ctx: Context) -> Result``. Register it in ``_MODULES`` below; ``fullpipe
bench NAME`` and ``fullpipe report`` find it there.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, Callable

from .result import Bound, Result, verdict_from_ratio

# experiment name -> module under fullpipe.experiments (filled in as issues land)
_MODULES: dict[str, str] = {}


@dataclasses.dataclass
class Context:
    """What an experiment gets: the device, the size mode, where to write figures,
    and a progress callback ``progress(done_fraction, message)``."""

    device: Any
    quick: bool = False
    out_dir: Path = Path(".")
    progress: Callable[[float, str], None] = lambda fraction, message: None


def names() -> list[str]:
    return list(_MODULES)


def load(name: str):
    if name not in _MODULES:
        known = ", ".join(names()) or "(none yet)"
        raise ValueError(f"unknown experiment {name!r}; known: {known}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}")


def run(name: str, ctx: Context) -> Result:
    return load(name).run(ctx)


__all__ = ["Bound", "Context", "Result", "load", "names", "run", "verdict_from_ratio"]
