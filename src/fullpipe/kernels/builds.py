"""Every build of the kernel sources: each ``.cu`` with each set of ``-D`` macros that
the package's fronts compile (the wmma tilings, the cluster tunings) or that a
developer may pass (the fp32 K-slice depth). The SASS tests and
``scripts/sass-fingerprint`` walk this list, so a new source or tuning added to a
front is checked without anyone remembering to.
"""

from __future__ import annotations

import dataclasses

from .cluster import CLUSTER_TUNINGS
from .cluster import SOURCE as CLUSTER_SOURCE
from .gemm import CEILING_SOURCE, VARIANTS, WMMA_CANDIDATES
from .persistent import GEMM_SOURCE, RECURRENT_SOURCE, SYNC_SOURCE

Defines = tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class Build:
    source: str  # package-relative .cu path
    defines: Defines = ()

    @property
    def label(self) -> str:
        """``kernels/x.cu`` or ``kernels/x.cu[A=1,B=2]``: unique per build."""
        if not self.defines:
            return self.source
        return f"{self.source}[{','.join(f'{k}={v}' for k, v in self.defines)}]"


FP32_SOURCES = (VARIANTS["tiled"].source, VARIANTS["double_buffer"].source, VARIANTS["warp_specialized"].source,
                CEILING_SOURCE)
FP32_SLICE_DEPTHS = (8, 16, 32)  # -DFP32_BK; 16 is the default build


def shipped_builds() -> list[Build]:
    """Every (source, defines) build, defaults first."""
    builds = [Build(s) for s in (*FP32_SOURCES, VARIANTS["wmma"].source, CLUSTER_SOURCE, GEMM_SOURCE, SYNC_SOURCE,
                                 RECURRENT_SOURCE)]
    builds += [Build(s, (("FP32_BK", bk),)) for s in FP32_SOURCES for bk in FP32_SLICE_DEPTHS if bk != 16]
    builds += [Build(VARIANTS["wmma"].source, c.defines) for c in WMMA_CANDIDATES]
    builds += [Build(CLUSTER_SOURCE, (("STAGES", st), ("T_K", tk))) for tk, st in CLUSTER_TUNINGS]
    builds += [Build(CLUSTER_SOURCE, (("CLUSTER_FULL_BARRIERS", 1), ("STAGES", 4), ("T_K", tk))) for tk in (16, 32)]
    seen: set[str] = set()
    return [b for b in builds if not (b.label in seen or seen.add(b.label))]
