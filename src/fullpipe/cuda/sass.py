"""Disassembly of cubins, to check that a kernel really uses the instructions its
technique is about (``LDGSTS`` for cp.async, ``HMMA`` for mma.sync / wmma,
``HGMMA`` for wgmma, ``UBLKCP``/``UTMALDG`` for TMA ...).

Uses ``nvdisasm`` or ``cuobjdump`` from the nvidia-cuda-nvdisasm /
nvidia-cuda-cuobjdump wheels (the ``dev`` extra) or from a CUDA toolkit.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path


class DisassemblerNotFound(RuntimeError):
    pass


def find_disassembler(tools: tuple[str, ...] = ("nvdisasm", "cuobjdump")) -> tuple[str, str]:
    """(kind, path) of a usable disassembler: ``nvdisasm`` preferred, then ``cuobjdump``."""
    for tool in tools:
        path = None
        try:
            import cuda.pathfinder as pf

            path = pf.find_nvidia_binary_utility(tool)
        except Exception:
            path = None
        if not path:
            home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
            cand = Path(home) / "bin" / tool
            path = str(cand) if cand.is_file() else shutil.which(tool)
        if path:
            return tool, path
    raise DisassemblerNotFound(
        "no nvdisasm or cuobjdump found: pip install 'fullpipe[dev]' (nvidia-cuda-nvdisasm) "
        "or set CUDA_HOME to a CUDA toolkit"
    )


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin, as text."""
    kind, path = find_disassembler()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        args = [path, str(f)] if kind == "nvdisasm" else [path, "-sass", str(f)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


# An instruction line: optional address comment, optional predicate, then the opcode
# (letters, digits, dots). Works for nvdisasm and cuobjdump output.
_INSN_RE = re.compile(r"^\s*(?:/\*[0-9a-f]+\*/)?\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\b")


def opcode_counts(sass: str) -> collections.Counter:
    """How often each base opcode (``LDGSTS``, ``HMMA``...; modifiers dropped) occurs."""
    counts: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", ".", "#")) or stripped.endswith(":"):
            continue
        m = _INSN_RE.match(line)
        if m:
            counts[m.group(1).split(".")[0]] += 1
    return counts


def has_instructions(cubin: bytes, *opcodes: str) -> dict[str, int]:
    """Count each of ``opcodes`` in the cubin's SASS (0 when absent)."""
    counts = opcode_counts(disassemble(cubin))
    return {op: counts.get(op, 0) for op in opcodes}

