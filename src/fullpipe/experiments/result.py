"""The result of one experiment: JSON in the shape the design fixes.

Every performance figure sits beside the bound it was measured against, taken
in the same run, as a ratio; a claim the measurement does not support is
reported as "not supported", which is a valid result.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from .._version import __version__

VERDICTS = ("supported", "partly supported", "not supported", "skipped", "failed")


@dataclasses.dataclass
class Bound:
    """What a number is compared to: e.g. the pinned H2D peak measured in this run."""

    name: str
    value: float
    unit: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Claim:
    """One claim and what this run measured for it, for the report's claims table."""

    claim: str
    measured: str  # e.g. "2.9x serial throughput (3 streams)"
    bound: str  # e.g. "max(H2D, compute, D2H) = 31.2 ms"
    ratio: float | None  # measured / bound
    verdict: str
    # Optional: the id of the claim in fullpipe.experiments.claims.CANONICAL (or an
    # experiment-local id), and the rule that turned the number into the verdict.
    key: str | None = None
    target: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def as_dict(self) -> dict[str, Any]:
        return _json_safe(dataclasses.asdict(self))


@dataclasses.dataclass
class Result:
    experiment: str
    claim: str
    verdict: str
    device: dict[str, Any]
    params: dict[str, Any]
    metrics: dict[str, Any]
    bound: Bound | None = None
    ratio: float | None = None
    table: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    figures: dict[str, str] = dataclasses.field(default_factory=dict)
    traces: dict[str, str] = dataclasses.field(default_factory=dict)
    # An experiment that tests several claims lists each one here, as
    # Claim(...).as_dict(); `claim`/`verdict` above then summarise the main one.
    claims: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # Seconds the experiment took (set by `fullpipe report` / the worker; None if unknown).
    wall_s: float | None = None
    fullpipe_version: str = __version__

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["bound"] = self.bound.as_dict() if self.bound else None
        return _json_safe(d)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.as_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Result":
        d = dict(d)
        b = d.get("bound")
        d["bound"] = Bound(**b) if b else None
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


def _json_safe(x: Any) -> Any:
    """NumPy scalars to Python, NaN/inf to None, tuples to lists."""
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if hasattr(x, "item") and callable(x.item):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x

