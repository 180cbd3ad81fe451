"""NVTX ranges around fullpipe's host-side phases, so that Nsight Systems users see
them on the CPU rows. Uses the ``nvtx`` package when it is installed and does
nothing otherwise (fullpipe does not depend on it).

    from fullpipe.trace import nvtx
    with nvtx.range("pipeline: issue batch 3"):
        ...
"""

from __future__ import annotations

import contextlib
from typing import Iterator

DOMAIN = "fullpipe"

try:  # pragma: no cover - depends on the environment
    import nvtx as _nvtx
except Exception:  # not installed, or a broken install: ranges become no-ops
    _nvtx = None


def available() -> bool:
    return _nvtx is not None


@contextlib.contextmanager
def range(name: str, color: str | None = None) -> Iterator[None]:  # noqa: A001 - mirrors nvtx's own name
    """An NVTX push/pop range in the ``fullpipe`` domain (a no-op without ``nvtx``)."""
    if _nvtx is None:
        yield
        return
    with _nvtx.annotate(message=name, color=color, domain=DOMAIN):
        yield
