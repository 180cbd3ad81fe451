"""Measured plans for ``gemm(variant="hopper")``: the fastest of a few plans per product shape.

``gemm(variant="hopper")`` picks its plan from the shape by rules (the persistent rung's
:func:`.hopper_gemm.default_build` and :func:`.hopper_gemm.stream_k`, the skinny kernel's
:func:`.skinny_gemm.preferred`), each measured on a few dozen shapes. Where the product's
tiles leave SMs idle, the rules can be far from the best plan, and no rule on the shape
alone found it. On an H200 (session 42, p281), on 45 held-out products whose plan left more
than a fifth of the SMs idle, the best of four plans ran 1.12x the rule's (geometric mean;
94 x 5528 x 11016: 1.74x, 128 x 256 tiles with every tile dealt out as K runs over all SMs,
which lost 0.3-0.5x on others with short K). The winner turns on how far the tiles pad M
and N, how long K is, and whether HBM or L2 bounds the product.

So, as cuDNN's benchmark mode does, this module measures::

    from fullpipe.kernels import tune_gemm
    tune_gemm([(4096, 11008, 4096), (96, 5528, 11016)], dtype="bfloat16", b_transposed=True)
    gemm(x, w.T, variant="hopper", stream=s)    # runs the measured plan for its shape

    FULLPIPE_GEMM_TUNE=1 python serve.py        # each new shape measured at its first call
    tune_gemm()                                 # the shapes met untuned in this process

At a first call under ``FULLPIPE_GEMM_TUNE=1`` the candidates run on the caller's operands
and stream (into a scratch output) and the host waits for that stream: not inside a CUDA
graph capture, where the rule's plan runs and the shape is left for later. A candidate
replaces the rule's plan only where it ran faster by more than :data:`KEEP_MARGIN`.

Choices live in memory and in a JSON file (:func:`tuning_file`), per GPU model and SM
count, dtype, layout of B and shape, under a digest of the GEMM kernels' sources and
planners: an edited kernel forgets them. ``fullpipe tune-gemm`` is the command line.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import statistics
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from . import hopper_gemm as hg
from . import skinny_gemm
from ._operands import Operand, arch_and_sm_count, empty_like_kind, matmul_shape, operand

# A candidate replaces the rule's plan only if it ran faster by more than this (two timings
# of the same plan differ by up to ~2 % between rounds: a noisy "win" must not stick).
KEEP_MARGIN = 0.03
# "all" stream-K only where its runs average this many K slices or more (a run pays its
# ring's fill; p281: 0.3-0.6x the rule's plan at 4-7 slices a cluster).
MIN_SLICES_PER_CLUSTER = 8
# Timing: each round runs every candidate once, back to back ROUND_MS or so (launches held
# at a gate until all are enqueued: StreamGate), ROUNDS rounds in alternating order, medians.
ROUND_MS = 2.0
MAX_LAUNCHES = 64
ROUNDS = 5
FILE_VERSION = 1
ENV_TUNE = "FULLPIPE_GEMM_TUNE"
ENV_FILE = "FULLPIPE_GEMM_TUNING_FILE"


@dataclasses.dataclass(frozen=True)
class GemmPlan:
    """One way to run a product: ``kernel`` "persistent" (with ``build``, its ``b_k_major``
    set from b's layout at run time, and ``stream_k`` "rule": :func:`.hopper_gemm.stream_k`'s
    choice, "all": every tile dealt out as K runs over all the GPU's clusters, or "none":
    whole tiles only) or "skinny" (:mod:`.skinny_gemm`, its own split)."""

    kernel: str
    build: hg.PersistentBuild | None = None
    stream_k: str = "rule"

    def __post_init__(self) -> None:
        if self.kernel not in ("persistent", "skinny"):
            raise ValueError(f"kernel must be 'persistent' or 'skinny', got {self.kernel!r}")
        if (self.kernel == "persistent") != (self.build is not None):
            raise ValueError("a persistent plan needs its build, a skinny one none")
        if self.stream_k not in ("rule", "all", "none"):
            raise ValueError(f"stream_k must be 'rule', 'all' or 'none', got {self.stream_k!r}")

    @property
    def label(self) -> str:
        if self.kernel == "skinny":
            return "skinny"
        return self.build.label + {"rule": "", "all": "+sk-all", "none": "+whole"}[self.stream_k]

    def to_json(self) -> dict[str, Any]:
        build = dataclasses.asdict(self.build) if self.build else None
        if build:
            build.pop("b_k_major")
        return {"kernel": self.kernel, "build": build, "stream_k": self.stream_k}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "GemmPlan":
        fields = dict(d["build"]) if d.get("build") else None
        # (builds that exist for one layout only: the transposed product's activations are its K-major B,
        # and 128 x 192 pairs share W's slice in boxes of its rows, b = w.T)
        if fields and (fields.get("swap_ab") or (fields.get("tile_n") == 192 and fields.get("cluster_m", 1) > 1)):
            fields["b_k_major"] = True
        build = hg.PersistentBuild(**fields) if fields else None
        return cls(d["kernel"], build, d.get("stream_k", "rule"))


def rule_plan(m: int, n: int, k: int, sms: int, b_transposed: bool = False) -> GemmPlan:
    """The plan ``gemm(variant="hopper")`` runs without a measured one (``b_transposed``: b
    is w.T of a row-major (N, K) w)."""
    if skinny_gemm.preferred(m, n, k, sms):
        return GemmPlan("skinny")
    return GemmPlan("persistent", hg.as_laid_out(hg.default_build(m, n, k, sms, b_transposed), b_transposed))


class _RuleSplit(NamedTuple):
    """How :func:`.hopper_gemm.stream_k` deals a product's cluster tiles out on a GPU of
    ``clusters`` clusters of the build: ``sk_tiles`` dealt out as K runs, ``launched`` clusters."""
    tiles: int
    clusters: int
    slices: int
    sk_tiles: int
    launched: int


def _rule_split(m: int, n: int, k: int, build: hg.PersistentBuild, sms: int) -> _RuleSplit:
    clusters = sms // build.cluster
    tiles = hg.cluster_tiles(m, n, build)
    slices = -(-k // hg.BK)
    return _RuleSplit(tiles, clusters, slices, *hg.stream_k(tiles, clusters, slices, build.cluster))


def _all_stream_k_pays(s: _RuleSplit) -> bool:
    """Whether dealing every tile out as K runs is worth measuring: the rule's plan leaves
    clusters idle (below one wave, its split launches fewer than all of them; above, its
    last wave of whole tiles is not full), and the runs would be long enough."""
    idle = s.launched < s.clusters if s.tiles < s.clusters else (s.sk_tiles == 0 and s.tiles % s.clusters != 0)
    return (idle and s.tiles * s.slices >= MIN_SLICES_PER_CLUSTER * s.clusters
            and s.tiles * s.slices * s.clusters < 2**31)


def candidates(m: int, n: int, k: int, sms: int, b_transposed: bool = False) -> list[GemmPlan]:
    """The plans measured for an (m, k) @ (k, n) product on a GPU of ``sms`` SMs, the rule's
    first: the skinny kernel (at most its MAX_ROWS rows); each persistent build the rule
    chooses among (128 x 256 tiles, in clusters of 2 above 128 rows; 128 x 192 above 128 rows,
    one block a cluster and, for b = w.T, in pairs; 128 x 128, also in
    clusters of 2 at 129-256 rows; 128 x 64; 64 x 128; 64 x 64), above 128 rows and for
    N over 256, 128 x 256 tiles in clusters of 2 along N, and above 64 rows the transposed
    product (128-row and 64-row blocks of W, one a cluster and in pairs, in as many tiles of
    the product's rows as the rule weighs; of a row-major b read MN-major), each build as b's
    layout runs it, with the rule's stream-K; where
    the whole tiles leave clusters idle, with every tile dealt out as K runs; where the
    rule deals tiles out, with whole tiles only (the rule's stream-K regimes were each
    fitted on a few dozen products)."""
    hg.check_shapes(m, n, k, b_transposed)
    plans = [rule_plan(m, n, k, sms, b_transposed)]
    if m <= skinny_gemm.MAX_ROWS:
        plans.append(GemmPlan("skinny"))
    if m <= hg.BM:
        wide = [hg.PERSISTENT_ONE_ROW]
    else:  # (clusters along N for N over 256: else the second block of each lies past N)
        wide = [hg.PERSISTENT, hg.PERSISTENT_ALONG_N] if n > hg.BN else [hg.PERSISTENT]
        if m <= hg.PERSISTENT.cluster_m * hg.BM:  # (one row of clusters: 128 x 128 tiles in pairs sharing B)
            wide.append(hg.PERSISTENT_NARROW_PAIR)
        # (128 x 192 tiles, one block a cluster, and for b = w.T in pairs sharing W's slice)
        wide += [hg.PERSISTENT_192, hg.PERSISTENT_192_PAIR] if b_transposed else [hg.PERSISTENT_192]
    swapped = []  # (the transposed product above 64 rows: in 128-row and 64-row blocks of W, one a cluster
    # and in pairs along W's rows sharing x's slice, and for b = w.T in 128-row blocks in pairs along the
    # product's rows sharing W's, in the fewest tiles of the product's rows; the 64-row blocks one a cluster
    # in one more, and the 128-row blocks one a cluster in one and two more (the rule's last step weighs
    # those), where each holds over 64 rows)
    if m > 64:
        t = hg.swap_row_tiles(m)
        swapped = [hg.swap_build(m, row_tiles=t), hg.swap_build(m, 64, 1, t), hg.swap_build(m, hg.BM, 1, t),
                   hg.swap_build(m, 64, 2, t)]
        if b_transposed:
            swapped.append(hg.swap_build(m, hg.BM, 1, t, cluster_n=2))
        if m > 64 * (t + 1):
            swapped += [hg.swap_build(m, 64, 1, t + 1), hg.swap_build(m, hg.BM, 1, t + 1)]
        if m > 64 * (t + 2):
            swapped.append(hg.swap_build(m, hg.BM, 1, t + 2))
    for build in (*wide, hg.PERSISTENT_NARROW, hg.PERSISTENT_SMALL, hg.PERSISTENT_M64_N128, hg.PERSISTENT_M64_N64,
                  *swapped):
        build = hg.as_laid_out(build, b_transposed)  # (as the launch runs it, and the rule's plan: one plan a kernel)
        plans.append(GemmPlan("persistent", build))
        split = _rule_split(m, n, k, build, sms)
        if _all_stream_k_pays(split):
            plans.append(GemmPlan("persistent", build, "all"))
        if split.sk_tiles:  # (the rule deals tiles out for this build)
            plans.append(GemmPlan("persistent", build, "none"))
    return list(dict.fromkeys(plans))  # (the rule's build comes again in the list: once)


def choose(times_us: dict[GemmPlan, float], rule: GemmPlan) -> GemmPlan:
    """The fastest plan, or the rule's unless another beat it by more than KEEP_MARGIN."""
    best = min(times_us, key=times_us.__getitem__)
    if rule in times_us and times_us[best] * (1 + KEEP_MARGIN) >= times_us[rule]:
        return rule
    return best


def run_plan(plan: GemmPlan, A: Operand, B: Operand, out: Any, stream: Any) -> Any:
    """``A @ B`` by ``plan`` (operands parsed and checked by the caller)."""
    if plan.kernel == "skinny":
        return skinny_gemm.run(A, B, out, stream)
    sk = None  # (the rule's)
    if plan.stream_k == "all":
        m, n, _ = matmul_shape(A, B)
        sk = hg.cluster_tiles(m, n, plan.build)
    elif plan.stream_k == "none":
        sk = 0
    return hg.run(A, B, "persistent", out, stream, build=plan.build, sk_tiles=sk)


# --------------------------------------------------------------------------- remembered plans
def tuning_file() -> Path:
    """``$FULLPIPE_GEMM_TUNING_FILE``, else ``gemm-tuning/plans.json`` under
    ``$FULLPIPE_CACHE_DIR`` (beside the cubins), else ``~/.cache/fullpipe/gemm-tuning.json``."""
    if os.environ.get(ENV_FILE):
        return Path(os.environ[ENV_FILE])
    root = os.environ.get("FULLPIPE_CACHE_DIR")
    return Path(root) / "gemm-tuning" / "plans.json" if root else Path.home() / ".cache" / "fullpipe" / "gemm-tuning.json"


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """What a remembered plan was measured on: the GEMM kernels' sources, their headers and
    their planners."""
    from ..cuda import compiler

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("hopper_gemm.py", "skinny_gemm.py", hg.SOURCES["persistent"], skinny_gemm.SOURCE):
        path = here / name if name.endswith(".py") else compiler.package_source_path(name)
        h.update(name.encode())
        h.update(path.read_bytes())
    h.update(compiler._own_headers_digest().encode())
    return h.hexdigest()[:24]


def plan_key(gpu: str, dtype: str, b_transposed: bool, m: int, n: int, k: int) -> str:
    return f"{gpu}|{dtype}|{'w.T' if b_transposed else 'b'}|{m}x{n}x{k}"


@functools.lru_cache(maxsize=None)
def gpu_id(device_index: int) -> str:
    """The GPU model and its SM count (two GPUs of one model with fewer SMs enabled differ)."""
    from cuda.core import Device as CoreDevice

    return f"{CoreDevice(device_index).name}/{arch_and_sm_count(device_index)[1]} SMs"


class TunedPlans:
    """Measured plans by key, read from and written to one JSON file (a file from other
    sources, unreadable or of another version is left out, with a warning when broken)."""

    def __init__(self, path: Path):
        self.path = path
        self.plans: dict[str, GemmPlan] = {}
        self.times: dict[str, dict[str, float]] = {}
        self._read()

    def _read(self) -> None:
        if not self.path.is_file():
            return
        try:
            plans, times = _read_plans(self.path)
        except _MALFORMED as exc:
            warnings.warn(f"fullpipe: ignoring the GEMM tuning file {self.path} ({type(exc).__name__}: {exc}); "
                          "the next tuning rewrites it", stacklevel=3)
            return
        self.plans.update(plans)
        self.times.update(times)

    def put(self, key: str, plan: GemmPlan, times_us: dict[GemmPlan, float]) -> None:
        with _LOCK:
            self.plans[key] = plan
            self.times[key] = {p.label: round(t, 3) for p, t in times_us.items()}

    def save(self) -> None:
        """Write the file: under a lock file, what another process saved meanwhile is read
        and kept beside this one's plans (this one's win for the same key), then the file
        is replaced whole (a reader sees the old file or the new one)."""
        import fcntl
        import tempfile

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _LOCK, open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                theirs, their_times = _read_plans(self.path) if self.path.is_file() else ({}, {})
            except _MALFORMED:
                theirs, their_times = {}, {}
            for key in theirs.keys() - self.plans.keys():
                self.plans[key], self.times[key] = theirs[key], their_times.get(key, {})
            data = {"version": FILE_VERSION, "sources": sources_digest(),
                    "plans": {key: {"plan": p.to_json(), "us": self.times.get(key, {})}
                              for key, p in self.plans.items()}}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(json.dumps(data, indent=1, sort_keys=True))
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise


# What reading a tuning file of the wrong shape raises (it is set aside, never an error)
_MALFORMED = (OSError, ValueError, KeyError, TypeError, AttributeError)


def _read_plans(path: Path) -> tuple[dict[str, GemmPlan], dict[str, dict[str, float]]]:
    """(plans, times) of a tuning file; empty where it was measured on other kernels or is
    of another version (the next save replaces them); raises on a malformed file. An entry
    that does not read as a plan is skipped."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("plans"), dict):
        raise ValueError("not a tuning file (no 'plans' table)")
    if data.get("version") != FILE_VERSION or data.get("sources") != sources_digest():
        return {}, {}
    plans, times = {}, {}
    for key, entry in data["plans"].items():
        try:
            plans[key] = GemmPlan.from_json(entry["plan"])
            times[key] = {str(label): float(t) for label, t in entry.get("us", {}).items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            plans.pop(key, None)
    return plans, times


_LOCK = threading.RLock()  # (the tables and the file: threads may tune and save at once)
_TABLES: dict[str, TunedPlans] = {}
# (device_index, dtype, b transposed, m, n, k) -> plan: the hot path's lookup, no string keys
_FAST: dict[tuple, GemmPlan | None] = {}
# shapes gemm(variant="hopper") met without a measured plan: tune_gemm()'s default
_UNTUNED: dict[tuple, None] = {}


def _table() -> TunedPlans:
    path = tuning_file()
    table = _TABLES.get(str(path))
    if table is None:
        with _LOCK:
            table = _TABLES.get(str(path))
            if table is None:
                table = _TABLES[str(path)] = TunedPlans(path)
    return table


def forget() -> None:
    """Drop what this process read or measured (the file stays; the next lookup rereads it)
    and read FULLPIPE_GEMM_TUNE again."""
    global _TUNE_ENV
    _TABLES.clear()
    _FAST.clear()
    _UNTUNED.clear()
    _TUNE_ENV = None


def lookup(A: Operand, B: Operand, m: int, n: int, k: int) -> GemmPlan | None:
    """The measured plan for this product, or None (then the shape is noted for
    :func:`tune_gemm`)."""
    fast = (A.device_index, A.dtype, B.transposed, m, n, k)
    try:
        plan = _FAST[fast]
    except KeyError:
        plan = _FAST[fast] = _table().plans.get(plan_key(gpu_id(A.device_index), A.dtype, B.transposed, m, n, k))
    if plan is None:
        _UNTUNED[fast] = None
    return plan


_TUNE_ENV: bool | None = None


def tune_on_first_call() -> bool:
    """FULLPIPE_GEMM_TUNE set (not "", "0", "false", "no", "off"), read once (an untuned
    call asks each time: reading the environment costs more than the lookup)."""
    global _TUNE_ENV
    if _TUNE_ENV is None:
        _TUNE_ENV = os.environ.get(ENV_TUNE, "").strip().lower() not in ("", "0", "false", "no", "off")
    return _TUNE_ENV


# --------------------------------------------------------------------------- measuring
def measure(A: Operand, B: Operand, stream: Any, plans: list[GemmPlan]) -> dict[GemmPlan, float]:
    """Microseconds a launch of each plan on these operands, on ``stream`` as the caller
    gave it (the host waits for it). Launches of a round run back to back (held at a gate
    until enqueued), rounds in alternating order; the median of ROUNDS rounds. The first
    plan's errors are the caller's (bad operands); another plan that cannot run is left out."""
    from ..cuda import driver as drv
    from ..cuda.streams import stream_from_handle

    m, n, _ = matmul_shape(A, B)
    handle = hg._stream_handle(stream, A)
    core = stream_from_handle(handle)  # (events and the gate; the launches take ``stream`` itself)
    scratch, _ = empty_like_kind(A, (m, n), A.dtype, handle)
    try:
        return _measure(A, B, stream, core, scratch, plans)
    finally:  # (also on an error: nothing may still write the scratch output when it is freed)
        with drv.translated("cuStreamSynchronize"):
            core.sync()


def _measure(A: Operand, B: Operand, stream: Any, core: Any, scratch: Any, plans: list[GemmPlan]
             ) -> dict[GemmPlan, float]:
    from ..cuda import driver as drv
    from ..cuda.events import elapsed_ms, record
    from ..cuda.timing import StreamGate

    run_plan(plans[0], A, B, scratch, stream)
    runnable = [plans[0]]
    for p in plans[1:]:  # (first launches: compiles, prepares; a plan that cannot run is dropped)
        try:
            run_plan(p, A, B, scratch, stream)
            runnable.append(p)
        except ValueError:
            continue
        except Exception as exc:  # noqa: BLE001 - a candidate's failure must not fail the caller's product
            warnings.warn(f"fullpipe: GEMM tuning left out {p.label} ({type(exc).__name__}: {exc})", stacklevel=4)
    gate = StreamGate.for_device(A.device_index)

    def timed(p: GemmPlan, launches: int) -> float:
        with gate.hold(core):
            start = record(core, timing=True)
            for _ in range(launches):
                run_plan(p, A, B, scratch, stream)
            end = record(core, timing=True)
        with drv.translated("cuEventSynchronize"):
            end.sync()
        return elapsed_ms(start, end) * 1e3 / launches

    launches = {p: max(2, min(MAX_LAUNCHES, int(ROUND_MS * 1e3 / max(timed(p, 1), 1.0)))) for p in runnable}
    samples: dict[GemmPlan, list[float]] = {p: [] for p in runnable}
    for r in range(ROUNDS):
        for p in runnable if r % 2 == 0 else runnable[::-1]:
            samples[p].append(timed(p, launches[p]))
    return {p: statistics.median(v) for p, v in samples.items()}


def tune_operands(A: Operand, B: Operand, stream: Any, *, save: bool = True) -> GemmPlan:
    """Measure the candidates on these operands and ``stream``, remember the choice and
    return it."""
    _, chosen, _ = _measure_and_remember(A, B, stream)
    if save:
        _save_or_warn(_table())
    return chosen


def _measure_and_remember(A: Operand, B: Operand, stream: Any
                          ) -> tuple[GemmPlan, GemmPlan, dict[GemmPlan, float]]:
    """(the rule's plan, the chosen one, every plan's time) of this product, the choice
    remembered in this process (not yet saved)."""
    m, n, k = matmul_shape(A, B)
    plans = candidates(m, n, k, arch_and_sm_count(A.device_index)[1], B.transposed)
    times = measure(A, B, stream, plans)
    chosen = choose(times, plans[0])
    _table().put(plan_key(gpu_id(A.device_index), A.dtype, B.transposed, m, n, k), chosen, times)
    _FAST[(A.device_index, A.dtype, B.transposed, m, n, k)] = chosen
    _UNTUNED.pop((A.device_index, A.dtype, B.transposed, m, n, k), None)
    return plans[0], chosen, times


def _save_or_warn(table: TunedPlans) -> None:
    try:
        table.save()
    except OSError as exc:  # (the plans stay in this process)
        warnings.warn(f"fullpipe: could not save the GEMM tuning file {table.path} ({exc}); set "
                      f"{ENV_FILE} to a writable path to keep measured plans", stacklevel=3)


def first_call(A: Operand, B: Operand, stream: Any) -> GemmPlan | None:
    """Measure this untuned product now (the caller runs under FULLPIPE_GEMM_TUNE), unless
    ``stream`` is capturing a CUDA graph (None: run the rule's plan)."""
    if hg.capturing(hg._stream_handle(stream, A)):
        return None
    return tune_operands(A, B, stream)


@dataclasses.dataclass
class TuneResult:
    """One tuned product: its shape, the rule's plan and time, the chosen plan and time."""

    m: int
    n: int
    k: int
    dtype: str
    b_transposed: bool
    rule: str
    rule_us: float
    chosen: str
    chosen_us: float

    @property
    def speedup(self) -> float:
        return self.rule_us / self.chosen_us


def _random_operands(m: int, n: int, k: int, dtype: str, b_transposed: bool, device_index: int
                     ) -> tuple[Operand, Operand]:
    """Normal random (m, k) and (k, n) operands (b as ``w.T`` of an (n, k) array) on the
    device: torch tensors where torch is installed, else fullpipe DeviceArrays (bfloat16
    then needs ml_dtypes, as fullpipe's own bfloat16 arrays do)."""
    b_shape = (n, k) if b_transposed else (k, n)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        g = torch.Generator(device=f"cuda:{device_index}").manual_seed(m * 1_000_003 + n * 1009 + k)
        kw = dict(device=torch.device("cuda", device_index), dtype=getattr(torch, dtype), generator=g)
        a, b = torch.randn(m, k, **kw), torch.randn(*b_shape, **kw)
        torch.cuda.synchronize(device_index)  # (the tuning stream does not wait for torch's)
        return operand(a, "a"), operand(b.T if b_transposed else b, "b", transposed_ok=True)
    import numpy as np
    from cuda.core import Device as CoreDevice

    from ..cuda.device import ensure_current
    from ..cuda.memory import device_empty
    from ..cuda.streams import create_stream

    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"tuning {dtype} products without operands needs torch or ml_dtypes (pip install ml_dtypes)"
                        ) from None
    ensure_current(device_index)
    rng = np.random.default_rng(m * 1_000_003 + n * 1009 + k)
    s = create_stream(CoreDevice(device_index))
    ops = []
    for rows, cols in ((m, k), b_shape):
        arr = device_empty((rows, cols), np_dtype, s, CoreDevice(device_index).memory_resource)
        arr.copy_from_host(rng.standard_normal((rows, cols), dtype=np.float32).astype(np_dtype), s)
        ops.append(arr)
    s.sync()
    A = operand(ops[0], "a")
    B = operand(ops[1], "b")
    if b_transposed:  # (a fullpipe array has no .T: the operand says how to read it)
        B = dataclasses.replace(B, shape=(k, n), transposed=True)
    return A, B


def tune_gemm(shapes: Iterable[tuple[int, int, int]] | None = None, *, dtype: str = "bfloat16",
              b_transposed: bool = False, device: int = 0, progress: Callable[[float, str], None] | None = None,
              ) -> list[TuneResult]:
    """Measure the candidate plans of ``gemm(variant="hopper")`` for each (M, N, K) of
    ``shapes`` (``dtype`` "bfloat16" or "float16"; ``b_transposed``: b given as ``w.T``, an
    nn.Linear weight) on random operands, remember the fastest (in this process and in
    :func:`tuning_file`) and return what each measured. ``shapes=None``: the products
    ``gemm(variant="hopper")`` ran in this process without a measured plan, each with its
    own dtype and layout. ``progress(fraction, message)`` is called after each shape."""
    from cuda.core import Device as CoreDevice

    from ..cuda.streams import create_stream

    if dtype not in hg.DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(hg.DTYPES)}, got {dtype!r}")
    if shapes is None:  # (shapes gemm refused after the lookup noted them are left out)
        todo = [(m, n, k, dt, bt) for (dev, dt, bt, m, n, k) in list(_UNTUNED)
                if dev == device and dt in hg.DTYPES and _valid(m, n, k, bt)]
    else:
        todo = []
        for shape in shapes:
            if len(shape) != 3 or not all(isinstance(x, int) for x in shape):
                raise ValueError(f"each shape must be (M, N, K) integers, got {shape!r}")
            hg.check_shapes(*shape, b_transposed=b_transposed)
            todo.append((*shape, dtype, b_transposed))
    results = []
    stream = create_stream(CoreDevice(device))
    try:
        _tune_each(todo, device, stream, results, progress)
    finally:  # (what was measured is kept, whatever stopped the loop)
        if results:
            _save_or_warn(_table())
    return results


def _valid(m: int, n: int, k: int, b_transposed: bool = False) -> bool:
    try:
        hg.check_shapes(m, n, k, b_transposed)
        return True
    except ValueError:
        return False


def _tune_each(todo: list, device: int, stream: Any, results: list[TuneResult],
               progress: Callable[[float, str], None] | None) -> None:
    for i, (m, n, k, dt, bt) in enumerate(todo):
        A, B = _random_operands(m, n, k, dt, bt, device)
        rule, chosen, times = _measure_and_remember(A, B, stream)
        results.append(TuneResult(m, n, k, dt, bt, rule.label, times.get(rule, float("nan")), chosen.label,
                                  times[chosen]))
        del A, B
        if progress:
            progress((i + 1) / len(todo), f"{m}x{n}x{k} {dt}{' w.T' if bt else ''}: {chosen.label} "
                                          f"{results[-1].speedup:.2f}x the rule's plan")
