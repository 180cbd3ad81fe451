"""The kernel compiler: CUDA C++ sources -> cubin through NVRTC, cached on disk.

Why cubin and never PTX: a newer NVRTC writes PTX that an older driver cannot
JIT-compile, while a cubin for the device's exact architecture loads anywhere
the driver supports that architecture.

Headers come from the NVIDIA wheels (nvidia-cuda-cccl for ``cuda/pipeline`` and
``cuda/barrier``, nvidia-cuda-runtime / nvidia-cuda-crt for
``cooperative_groups.h``, ``mma.h``, ``cuda_fp16.h``) found with cuda.pathfinder,
or from a toolkit under ``CUDA_HOME``/``CUDA_PATH``; fullpipe's own headers live
in ``fullpipe/cuda/include``.

Cache: ``$FULLPIPE_CACHE_DIR`` or ``~/.cache/fullpipe/cubin``. The key hashes the
source, fullpipe's own headers, the options, the architecture and the NVRTC
version, so any change recompiles and nothing stale is ever loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import CompileError
from . import driver as drv
from . import nvrtc_worker
from .resources import KernelResources, parse_ptxas_log, resource_usage

CACHE_FORMAT = 1
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
FULLPIPE_INCLUDE = Path(__file__).resolve().parent / "include"
_ARCH_RE = re.compile(r"^sm_([1-9]\d{1,2})(a|f)?$")


# --------------------------------------------------------------------------- paths
def cache_dir() -> Path:
    root = os.environ.get("FULLPIPE_CACHE_DIR")
    path = Path(root) if root else Path.home() / ".cache" / "fullpipe" / "cubin"
    return path


def clear_cache() -> int:
    """Delete every cached cubin; return how many files were removed."""
    n = 0
    d = cache_dir()
    if d.is_dir():
        for f in d.iterdir():
            if f.suffix in (".cubin", ".json"):
                f.unlink(missing_ok=True)
                n += 1
    return n


def _toolkit_include_dirs() -> list[str]:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    inc = Path(home) / "include"
    dirs = []
    if (inc / "cccl").is_dir():
        dirs.append(str(inc / "cccl"))
    if inc.is_dir():
        dirs.append(str(inc))
    return dirs


def include_dirs() -> list[str]:
    """Header directories handed to NVRTC, most specific first."""
    dirs: list[str] = [str(FULLPIPE_INCLUDE)]
    try:
        import cuda.pathfinder as pf

        for lib in ("cccl", "cudart"):
            d = pf.find_nvidia_header_directory(lib)
            if d and d not in dirs:
                dirs.append(d)
    except Exception:  # old cuda.pathfinder or nothing found: fall back to the toolkit
        pass
    for d in _toolkit_include_dirs():
        if d not in dirs:
            dirs.append(d)
    return dirs


def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if int(err) != 0:
        raise CompileError("nvrtcVersion", f"NVRTC is not usable: {err}")
    return int(major), int(minor)


# --------------------------------------------------------------------------- sources
def package_source_path(relpath: str) -> Path:
    """Path of a ``.cu`` source shipped in the package, e.g. ``"kernels/gemm/tiled.cu"``."""
    path = (PACKAGE_ROOT / relpath).resolve()
    if not path.is_file() or PACKAGE_ROOT not in path.parents:
        raise FileNotFoundError(f"no kernel source {relpath!r} in the fullpipe package")
    return path


def package_sources() -> list[Path]:
    """Every ``.cu`` source shipped in the package (the CPU tests compile them all)."""
    return sorted(p for p in PACKAGE_ROOT.rglob("*.cu") if "__pycache__" not in p.parts)


# A source that uses features newer than sm_80 says so in a marker line near its top:
#
#     // fullpipe-requires: sm_90    (thread-block clusters, mbarrier parity waits, TMA)
#     // fullpipe-requires: sm_90a   (wgmma, setmaxnreg: only that exact target has them)
#
# `fullpipe compile --arch` leaves a source out when the target lacks what it needs,
# instead of letting ptxas fail on it. The declaration lives with the code that needs it.
_REQUIRES_RE = re.compile(r"^\s*//\s*fullpipe-requires:\s*(sm_\d+a?)\b", re.MULTILINE)


def needed_arch(path: str | os.PathLike) -> str | None:
    """The oldest target a source compiles for, from its ``fullpipe-requires`` marker
    (None: any target fullpipe supports)."""
    head = "\n".join(Path(path).read_text().splitlines()[:60])
    m = _REQUIRES_RE.search(head)
    return check_arch(m.group(1)) if m else None


def arch_provides(arch: str, needed: str) -> bool:
    """Whether code built for ``arch`` may use what ``needed`` has: a newer or equal
    target for the portable features, exactly the same target for arch-specific (``a``)
    ones, which later architectures do not carry."""
    have, want = _ARCH_RE.match(check_arch(arch)), _ARCH_RE.match(check_arch(needed))
    if want.group(2) == "a":
        return arch == needed
    return int(have.group(1)) >= int(want.group(1))


def _own_headers_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(PACKAGE_ROOT.rglob("*.cuh")):
        h.update(p.relative_to(PACKAGE_ROOT).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- arch
def check_arch(arch: str) -> str:
    if not isinstance(arch, str) or not _ARCH_RE.match(arch):
        raise ValueError(
            f"arch must look like 'sm_90' or 'sm_90a' (got {arch!r}); use the device's "
            "compute capability, with the 'a' suffix for Hopper-only instructions "
            "(wgmma, setmaxnreg)"
        )
    return arch


def default_arch(device: Any = None) -> str:
    """The architecture to compile for: the current device's, with the arch-specific
    ``a`` suffix from compute capability 9.0 on (a cubin is built for this one GPU
    anyway, so nothing is lost and wgmma/setmaxnreg become available)."""
    if device is None:
        from .device import Device

        device = Device()
    cc = device.facts.compute_capability if hasattr(device, "facts") else device.compute_capability
    major, minor = int(cc[0]), int(cc[1])
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


# --------------------------------------------------------------------------- compile
@dataclasses.dataclass
class CompiledModule:
    """A cubin and what is known about it. ``kernel(name)`` loads it on first use."""

    name: str
    arch: str
    cubin: bytes
    log: str
    from_cache: bool
    seconds: float
    key: str
    _object_code: Any = dataclasses.field(default=None, repr=False)
    _kernels: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def resources(self) -> dict[str, KernelResources]:
        """Registers, shared memory, stack and spills per kernel: from the ptxas report
        in the NVRTC log, or read from the cubin when the log has none (NVRTC 13.0 was
        seen to leave the report out in some processes)."""
        parsed = parse_ptxas_log(self.log)
        return parsed or resource_usage(self.cubin)

    def kernel(self, symbol: str):
        """The :class:`cuda.core.Kernel` named ``symbol`` (use ``extern "C"`` names)."""
        if symbol not in self._kernels:
            from cuda.core import ObjectCode

            with drv.translated("cuLibraryLoadData"):
                if self._object_code is None:
                    self._object_code = ObjectCode.from_cubin(self.cubin, name=self.name)
                self._kernels[symbol] = self._object_code.get_kernel(symbol)
        return self._kernels[symbol]


def _normalise_defines(defines: Mapping[str, Any] | None) -> list[str]:
    out = []
    for k, v in sorted((defines or {}).items()):
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(k)):
            raise ValueError(f"invalid macro name {k!r}")
        out.append(f"-D{k}" if v is None else f"-D{k}={v}")
    return out


def compile_source(
    text: str,
    *,
    name: str = "inline.cu",
    arch: str | None = None,
    defines: Mapping[str, Any] | None = None,
    options: Iterable[str] = (),
    use_cache: bool = True,
    device: Any = None,
    spill_retries: int = 0,
) -> CompiledModule:
    """Compile CUDA C++ source text to a cubin.

    ``arch`` is e.g. ``"sm_90a"``; without it, the current device's architecture
    is used (so pass it explicitly when there is no GPU, as CI does). ``defines``
    become ``-D`` macros; ``options`` are extra NVRTC options. ``spill_retries``: when
    ptxas spills registers, compile again up to this many times and keep the build with
    the fewest spilled bytes (the package's own kernels: see :func:`compile_file`).
    """
    if not isinstance(text, str):
        raise TypeError(f"source must be CUDA C++ text (str), got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"kernel source {name} is empty")
    arch = check_arch(arch) if arch is not None else default_arch(device)
    extra = list(options)
    for o in extra:
        if not isinstance(o, str) or not o.startswith("-"):
            raise ValueError(f"NVRTC options must be strings starting with '-', got {o!r}")
    # No -std flag: NVRTC's default dialect is C++17, and NVRTC 13.0 drops the ptxas
    # report (-Xptxas=-v) from the log when -std is given explicitly (seen on an H200).
    flags = ["-default-device", *_normalise_defines(defines), *extra]
    nvrtc_v = nvrtc_version()
    key_material = json.dumps(
        {
            "format": CACHE_FORMAT,
            "source": text,
            "headers": _own_headers_digest(),
            "flags": flags,
            "arch": arch,
            "nvrtc": nvrtc_v,
        },
        sort_keys=True,
    )
    key = hashlib.sha256(key_material.encode()).hexdigest()[:32]
    cubin_path = cache_dir() / f"{key}.cubin"
    meta_path = cache_dir() / f"{key}.json"

    t0 = time.perf_counter()
    if use_cache and cubin_path.is_file() and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            cubin = cubin_path.read_bytes()
            return CompiledModule(
                name, arch, cubin, meta.get("log", ""), True, time.perf_counter() - t0, key
            )
        except (OSError, ValueError):
            pass  # a damaged entry: compile again and overwrite it

    cubin, log = _nvrtc_compile(text, name, arch, flags)
    spilled = _spilled_bytes(cubin, log)
    for _ in range(spill_retries if spilled else 0):
        # NVRTC 13's ptxas does not allocate registers the same way every time: the same
        # source and options gave gemm_double_buffer_s3 126 registers in 40 compiles and
        # 128 registers with an 8-byte spill in one (CI, 2026-11-26). Kernels that sit at
        # their register cap then spill now and then; another compile rarely does.
        again = _nvrtc_compile(text, name, arch, flags)
        n = _spilled_bytes(*again)
        if n < spilled:
            (cubin, log), spilled = again, n
        if not spilled:
            break
    seconds = time.perf_counter() - t0
    if use_cache:
        _write_atomic(cubin_path, cubin)
        _write_atomic(meta_path, json.dumps({"name": name, "arch": arch, "log": log}).encode())
    return CompiledModule(name, arch, cubin, log, False, seconds, key)


def _spilled_bytes(cubin: bytes, log: str) -> int:
    """Spill stores and loads over every kernel of a build (the ptxas report, else the cubin)."""
    res = parse_ptxas_log(log) or resource_usage(cubin)
    return sum(r.spill_store_bytes + r.spill_load_bytes for r in res.values())


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _nvrtc_compile(text: str, name: str, arch: str, flags: list[str]) -> tuple[bytes, str]:
    """Compile with the NVRTC C API (it gives the log on success too), in a worker process:
    NVRTC 13.0 has segfaulted now and then on kernels that compile in every other run, which
    there costs a retry, not the caller's process (:mod:`.nvrtc_worker`)."""
    drv._forbid_inside_host_function("nvrtcCompileProgram")
    opts = [*flags, f"-arch={arch}", "-Xptxas=-v", *(f"-I{d}" for d in include_dirs())]
    cubin, log, error = nvrtc_worker.compile_isolated(text, name, opts)
    if error is not None:
        raise CompileError(name, error)
    return cubin, log


def compile_file(path: str | os.PathLike, **kwargs: Any) -> CompiledModule:
    """Compile a ``.cu`` file; see :func:`compile_source` for the options. The package's
    own sources are compiled again when ptxas spills (up to twice): none of them spills
    with the allocation ptxas usually makes."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {path} does not exist")
    kwargs.setdefault("name", path.name)
    if path.resolve().is_relative_to(PACKAGE_ROOT.resolve()):
        kwargs.setdefault("spill_retries", 2)
    return compile_source(path.read_text(), **kwargs)


def compile_package_kernel(relpath: str, **kwargs: Any) -> CompiledModule:
    """Compile a ``.cu`` file shipped in the package (path relative to ``fullpipe/``)."""
    return compile_file(package_source_path(relpath), **kwargs)
