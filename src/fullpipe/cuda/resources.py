"""What a compiled kernel uses: registers, shared memory, stack and spills.

Read from ptxas's verbose report in the NVRTC log (``-Xptxas -v``), or from the cubin
itself with ``cuobjdump -res-usage`` when the log carries no report.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tempfile
from pathlib import Path

from .sass import find_disassembler


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one kernel (``-Xptxas -v``)."""

    name: str
    registers: int
    shared_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


_FUNC_RE = re.compile(r"Compiling entry function '([^']+)'")
_FRAME_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED_RE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Parse the ptxas verbose report into one :class:`KernelResources` per entry."""
    out: dict[str, KernelResources] = {}
    current = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        m = _FUNC_RE.search(line)
        if m:
            current, frame = m.group(1), (0, 0, 0)
            continue
        m = _FRAME_RE.search(line)
        if m and current:
            frame = tuple(int(x) for x in m.groups())  # type: ignore[assignment]
            continue
        m = _USED_RE.search(line)
        if m and current:
            out[current] = KernelResources(
                name=current,
                registers=int(m.group(1)),
                shared_bytes=int(m.group(2) or 0),
                stack_frame_bytes=frame[0],
                spill_store_bytes=frame[1],
                spill_load_bytes=frame[2],
            )
            current = None
    return out


_RES_FUNC_RE = re.compile(r"^\s*Function ([^:\s]+):")
_RES_LINE_RE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def resource_usage(cubin: bytes) -> dict[str, KernelResources]:
    """Per-kernel resources read from the cubin itself (``cuobjdump -res-usage``).

    Used when the NVRTC log carries no ptxas report. cuobjdump does not split
    spills from other local memory: LOCAL (per-thread local memory, which holds
    spills) is reported as both spill figures, which makes a no-spill check stricter.
    """
    _, path = find_disassembler(("cuobjdump",))
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        proc = subprocess.run([path, "-res-usage", str(f)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump -res-usage failed ({proc.returncode}): {proc.stderr.strip()}")
    out, current = {}, None
    for line in proc.stdout.splitlines():
        m = _RES_FUNC_RE.match(line)
        if m:
            current = m.group(1)
            continue
        m = _RES_LINE_RE.search(line)
        if m and current:
            reg, stack, shared, local = (int(x) for x in m.groups())
            out[current] = KernelResources(current, reg, shared, stack, local, local)
            current = None
    return out
