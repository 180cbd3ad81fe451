"""fullpipe bench attention-hopper: does warp specialization with TMA keep the tensor
cores busy? fullpipe's Hopper flash attention kernel (kernels/flash_attention_hopper:
a TMA producer warpgroup, two wgmma consumer warpgroups, setmaxnreg) against the fastest
SDPA backend PyTorch offers and against fullpipe's own mma.sync kernel
(kernels/flash_attention, FlashAttention-2 structure), in the same run.

Workload: fp16, B=4, S=4096, head dim 128 (H=16) and 64 (H=32), causal and not.
Kernels: the Hopper kernel, the mma.sync kernel, and SDPA's FLASH_ATTENTION (FA2),
EFFICIENT_ATTENTION and CUDNN_ATTENTION backends (MATH is left out: it materializes the
S x S scores and is the attention experiment's). Every output is checked against SDPA
flash's before anything is timed (a wrong kernel is reported, not timed). Timing: one
stream, CUDA events; each sample is a batch of launches queued behind a short GPU sleep
(so the host's launch cost never shows as idle GPU time), after a warm-up; the kernels
take turns in rounds so that clock and thermal drift hits all alike; the median sample
counts. TFLOP/s: 4 S^2 D per head, halved when causal (FlashAttention's convention).
"The fastest SDPA backend" is the fastest of the three in this run, per configuration.

When Nsight Compute is installed (and FULLPIPE_NO_NCU is not 1) a child run profiles one
launch of each fullpipe kernel at d128 non-causal: tensor-pipe utilization, and the ratio
Hopper / mma.sync.

    python -m fullpipe.experiments.attention_hopper [--quick] [--no-ncu] [--json FILE]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import Bound, Context, Result
from ..cuda.device import device_info
from .claims import UNJUDGED, Data, Judged, Missing, at_least, is_num, rule, times, with_claims
from .figures import BOUND, GREY, PINNED, WIDE, label_bars, need, pyplot, save
from .attention import queued_ms
from .gemm_hopper import tensor_pipe_metric
from .ncu import find_ncu, ncu_turned_off, parse_ncu_csv

NAME = "attention-hopper"
TITLE = "Hopper flash attention (TMA, wgmma, warp specialization) vs SDPA and the mma.sync kernel"
CLAIM = (
    "Warp specialization with TMA keeps the tensor cores busy: on sm_90a the Hopper flash attention kernel reaches "
    ">= 0.9x the fastest SDPA backend at head dim 128 (non-causal), >= 0.85x causal and at head dim 64, >= 1.5x "
    "fullpipe's mma.sync kernel at head dim 128 (causal and not), and keeps the tensor pipe >= 1.3x as busy (ncu) "
    "(B=4, S=4096, fp16)"
)
PRELOAD = ("torch",)  # imported ahead while the previous experiment runs (report/worker.py)
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "FlashAttention-3's structure on Hopper: in each block a producer warpgroup loads the K and V tiles with "
    "the Tensor Memory Accelerator (one thread issues a bulk copy of a whole tile, its arrival counted on an "
    "mbarrier) into a ring in shared memory, while two consumer warpgroups multiply with asynchronous "
    "warpgroup MMAs (wgmma: Q Kᵀ from shared memory, P V from registers) and keep the online softmax in "
    "registers; setmaxnreg moves registers from the producer to the consumers. At head dim 128 the two "
    "consumers take turns (ping-pong), so that one warpgroup's softmax runs while the other's matrix products "
    "keep the tensor cores busy; at head dim 64 each runs its tiles in order (measured faster there). The "
    "FlashAttention-2-structure kernel it is compared with loads with cp.async and multiplies with mma.sync "
    "in every warp."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): those its
# CLAIM sentence makes (it tests no canonical claim).
VERDICT_FROM = ("attention-hopper-d128-full", "attention-hopper-d128-causal", "attention-hopper-d64-full",
                "attention-hopper-d64-causal", "attention-hopper-vs-mma-sync-d128-full",
                "attention-hopper-vs-mma-sync-d128-causal", "attention-hopper-tensor-pipe")

BATCH, SEQ = 4, 4096
CONFIGS = ((128, 16), (64, 32))  # (head dim, heads)
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
FULLPIPE = ("hopper", "mma_sync")  # attention(backend=...) of each fullpipe kernel
LABELS = {"hopper": "fullpipe Hopper", "mma_sync": "fullpipe mma.sync", "FLASH_ATTENTION": "SDPA flash (FA2)",
          "EFFICIENT_ATTENTION": "SDPA efficient", "CUDNN_ATTENTION": "SDPA cuDNN"}
REL_TOL = 1e-2  # relative error against SDPA flash's output above which a kernel is wrong
ROUNDS, LAUNCHES = 7, 10  # samples per kernel (one per round) and launches per sample
QUICK_ROUNDS, QUICK_LAUNCHES = 3, 5
WARMUP = 3

# Targets (issue 17): the Hopper kernel / the fastest SDPA backend per configuration,
# / the mma.sync kernel at head dim 128, and its tensor-pipe utilization / the mma.sync kernel's.
SDPA_TARGET = {(128, False): 0.9, (128, True): 0.85, (64, False): 0.85, (64, True): 0.85}
SDPA_PARTLY = 0.75
MMA_SYNC_TARGET = 1.5
TENSOR_PIPE_TARGET = 1.3

NCU_CONFIG = (128, 16, False)  # head dim, heads, causal: one launch of each fullpipe kernel
NCU_TIMEOUT_S = float(os.environ.get("FULLPIPE_NCU_TIMEOUT", "120"))
NCU_METRICS = ("gpu__time_duration.sum", "smsp__issue_active.avg.pct_of_peak_sustained_active")


def config_name(dim: int, heads: int, causal: bool) -> str:
    return f"d{dim} H{heads} {'causal' if causal else 'full'}"


def metric_key(dim: int, causal: bool, kernel: str) -> str:
    """metrics key of a kernel's TFLOP/s, e.g. d128_full_hopper_tflops, d64_causal_cudnn_attention_tflops."""
    return f"d{dim}_{'causal' if causal else 'full'}_{kernel.lower()}_tflops"


# --------------------------------------------------------------------------- measurement
def _fa():
    import importlib

    return importlib.import_module("..kernels.flash_attention", __package__)


def _rel(out: Any, ref: Any) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm())


def measure_config(dim: int, heads: int, causal: bool, *, rounds: int, launches: int, seed: int = 0
                   ) -> tuple[list[dict[str, Any]], dict[str, float], list[str], bool]:
    """One configuration: (table rows, {kernel: TFLOP/s} of the kernels timed, problems,
    whether a fullpipe kernel was wrong or went unchecked). Runs on torch's current stream."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fa = _fa()
    g = torch.Generator(device="cuda").manual_seed(seed + 2 * dim + int(causal))
    q, k, v = (torch.randn(BATCH, SEQ, heads, dim, device="cuda", generator=g, dtype=torch.float16)
               for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA's [B, H, S, D]: the same memory
    out = torch.empty_like(q)
    flop = fa.flops(fa.plan(q.shape, k.shape, v.shape, "float16", causal=causal))
    cfg = config_name(dim, heads, causal)

    def sdpa(backend: str):
        def call():
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        return call

    def ours(backend: str):
        return lambda: fa.attention(q, k, v, causal=causal, out=out, backend=backend)

    runners = {"hopper": ours("hopper"), "mma_sync": ours("mma_sync"), **{b: sdpa(b) for b in SDPA_BACKENDS}}
    rows: dict[str, dict[str, Any]] = {n: {"config": cfg, "kernel": LABELS[n], "TFLOP/s": None, "ms": None,
                                           "spread": None, "vs_fastest_sdpa": None, "vs_mma_sync": None,
                                           "rel_err": None, "note": ""} for n in runners}
    problems: list[str] = []
    untrusted = False
    # 1. every output against SDPA flash's, before anything is timed
    try:
        ref = runners["FLASH_ATTENTION"]().transpose(1, 2).contiguous()
    except (RuntimeError, torch.OutOfMemoryError) as exc:
        problems.append(f"{cfg}: SDPA flash did not run, nothing to check the kernels against: {str(exc)[:160]}")
        for r in rows.values():
            r["note"] = "not run: no reference output"
        return list(rows.values()), {}, problems, True
    checked = []
    for n, fn in runners.items():
        try:
            if n in FULLPIPE:
                out.fill_(float("nan"))  # poisoned: a row the kernel never writes is wrong
                fn()
                got = out
            else:
                got = fn().transpose(1, 2)
            err = _rel(got, ref)
        except (RuntimeError, ValueError, torch.OutOfMemoryError) as exc:
            rows[n]["note"] = f"not run: {type(exc).__name__}: {str(exc)[:120]}"
            if n in FULLPIPE:
                problems.append(f"{cfg}: {LABELS[n]} did not run: {type(exc).__name__}: {str(exc)[:160]}")
                untrusted = True
            continue
        rows[n]["rel_err"] = err
        if not err <= REL_TOL:  # NaN is wrong too
            rows[n]["note"] = "wrong result: not timed"
            problems.append(f"{cfg}: {LABELS[n]} differs from SDPA flash by {err:.3e} (tolerance {REL_TOL:g})")
            untrusted = untrusted or n in FULLPIPE
            continue
        checked.append(n)
    del ref
    # 2. warm-up, then rounds in which every checked kernel takes its turn
    for n in checked:
        for _ in range(WARMUP):
            runners[n]()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {n: [] for n in checked}
    for _ in range(rounds):
        for n in checked:
            samples[n].append(queued_ms(runners[n], launches))
    tf: dict[str, float] = {}
    for n in checked:
        ms = statistics.median(samples[n])
        tf[n] = flop / (ms * 1e-3) / 1e12
        rows[n].update({"TFLOP/s": tf[n], "ms": ms, "spread": (max(samples[n]) - min(samples[n])) / ms})
    fastest = max((tf[b] for b in SDPA_BACKENDS if b in tf), default=None)
    for n in checked:
        rows[n]["vs_fastest_sdpa"] = tf[n] / fastest if fastest else None
        rows[n]["vs_mma_sync"] = tf[n] / tf["mma_sync"] if "mma_sync" in tf else None
    return list(rows.values()), tf, problems, untrusted


# --------------------------------------------------------------------------- ncu
def ncu_measure(timeout_s: float = NCU_TIMEOUT_S) -> dict[str, Any]:
    """Tensor-pipe utilization of one launch of each fullpipe kernel (NCU_CONFIG) under
    ncu: {"kernels": {kernel name: {metric: value}}, "tensor_pipe_metric": ...} or
    {"skipped": why}."""
    ncu = find_ncu()
    if ncu is None:
        return {"skipped": "ncu not found"}
    pipe = tensor_pipe_metric(ncu)
    if pipe is None:
        return {"skipped": "this ncu names no tensor-pipe cycles-active metric"}
    cmd = [ncu, "--csv", "--clock-control", "none", "--metrics", ",".join((pipe, *NCU_METRICS)),
           "-k", "regex:flash_attention", sys.executable, "-m", "fullpipe.experiments.attention_hopper",
           "--ncu-child"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"skipped": f"ncu took longer than {timeout_s:.0f} s"}
    per = parse_ncu_csv(p.stdout)
    if not per:
        return {"skipped": f"ncu gave no metrics (rc {p.returncode}): {(p.stderr or p.stdout)[-400:]}"}
    return {"kernels": per, "tensor_pipe_metric": pipe}


def _ncu_child() -> int:
    """One launch of each fullpipe kernel at NCU_CONFIG (what ncu_measure profiles)."""
    import torch

    fa = _fa()
    dim, heads, causal = NCU_CONFIG
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(BATCH, SEQ, heads, dim, device="cuda", generator=g, dtype=torch.float16)
               for _ in range(3))
    for backend in FULLPIPE:
        fa.attention(q, k, v, causal=causal, backend=backend)
    torch.cuda.synchronize()
    return 0


def ncu_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per fullpipe kernel profiled: {kernel, kernel_name, tensor_pipe_pct, issue_active_pct, time_us}."""
    pipe = res.get("tensor_pipe_metric")
    rows = []
    for name, m in sorted(res.get("kernels", {}).items()):
        kind = "hopper" if "flash_attention_hopper" in name else "mma_sync"
        t = m.get("gpu__time_duration.sum")
        rows.append({"kernel": LABELS[kind], "kernel_name": name, "tensor_pipe_pct": m.get(pipe) if pipe else None,
                     "issue_active_pct": m.get("smsp__issue_active.avg.pct_of_peak_sustained_active"),
                     "time_us": t / 1e3 if is_num(t) else None})
    return rows


# --------------------------------------------------------------------------- the run
def unavailable(device: Any) -> str | None:
    """Why this experiment cannot run on ``device`` (None: it can)."""
    import importlib

    from ..cuda.compiler import default_arch

    fah = importlib.import_module("..kernels.flash_attention_hopper", __package__)
    arch = default_arch(device)
    if not fah.supported(arch):
        return f"the Hopper attention kernel needs sm_90a (TMA, wgmma, setmaxnreg); this GPU is {arch}"
    return None


def run(ctx: Context) -> Result:
    dev = ctx.device
    why = unavailable(dev)
    if why:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {}, notes=[f"skipped: {why}"])
    try:
        import torch
    except ImportError as exc:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=[f"skipped: PyTorch is not installed ({exc}); SDPA is the bound"])
    if not torch.cuda.is_available():
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=["skipped: this PyTorch has no CUDA (a CPU-only build?)"])

    rounds, launches = (QUICK_ROUNDS, QUICK_LAUNCHES) if ctx.quick else (ROUNDS, LAUNCHES)
    tdev = torch.device("cuda", dev.index)
    torch.cuda.set_device(tdev)
    table: list[dict[str, Any]] = []
    metrics: dict[str, Any] = {}
    problems: list[str] = []
    failed = False
    steps = len(CONFIGS) * 2 + 1
    done = 0
    with torch.cuda.stream(torch.cuda.Stream(tdev)):  # one stream for every kernel, not the legacy default
        for dim, heads in CONFIGS:
            for causal in (False, True):
                rows, tf, bad, untrusted = measure_config(dim, heads, causal, rounds=rounds, launches=launches)
                table.extend(rows)
                problems.extend(bad)
                failed = failed or untrusted
                metrics.update({metric_key(dim, causal, n): x for n, x in tf.items()})
                done += 1
                ctx.progress(done / steps, config_name(dim, heads, causal))
        torch.cuda.synchronize(tdev)
    torch.cuda.empty_cache()
    ctx.progress(done / steps, "ncu")
    ncu = {"skipped": "FULLPIPE_NO_NCU=1"} if ncu_turned_off() else ncu_measure()
    nrows = ncu_rows(ncu) if "kernels" in ncu else []
    metrics.update({"ncu": nrows, "ncu_config": config_name(NCU_CONFIG[0], NCU_CONFIG[1], NCU_CONFIG[2]),
                    "ncu_tensor_pipe_metric": ncu.get("tensor_pipe_metric"), "ncu_skipped": ncu.get("skipped")})

    notes = [f"TFLOP/s count 4 S^2 D per head (2 matrix products), halved when causal, for every kernel alike; "
             f"one stream, CUDA events; each sample is {launches} launches queued behind a GPU sleep; "
             f"{WARMUP} warm-up launches, then {rounds} rounds in which the kernels take turns; median sample",
             "every output was checked against SDPA flash's (relative error <= 1e-2, fullpipe outputs poisoned "
             "with NaN first) before it was timed",
             "layout: fullpipe takes [B, S, H, D]; SDPA gets the [B, H, S, D] transposed view of the same memory"]
    if "skipped" in ncu:
        notes.append(f"ncu: {ncu['skipped']}")
    notes.extend(problems)
    main = {n: metrics.get(metric_key(128, False, n)) for n in (*FULLPIPE, *SDPA_BACKENDS)}
    sdpa = {b: main[b] for b in SDPA_BACKENDS if is_num(main[b])}
    best = max(sdpa, key=sdpa.get) if sdpa else None
    return with_claims(Result(
        NAME, CLAIM, "failed" if failed else UNJUDGED, device_info(dev),
        {"batch": BATCH, "seq": SEQ, "configs": [list(c) for c in CONFIGS], "dtype": "float16",
         "sdpa_backends": list(SDPA_BACKENDS), "rounds": rounds, "launches": launches, "quick": ctx.quick,
         "hopper_build": _hopper_build_label(), "torch": torch.__version__},
        metrics,
        bound=Bound(f"fastest SDPA backend ({LABELS[best]}) d128 non-causal", sdpa[best], "TFLOP/s") if best else None,
        ratio=main["hopper"] / sdpa[best] if best and is_num(main["hopper"]) else None,
        table=table + [dict(r, config=metrics["ncu_config"] + " (ncu)") for r in nrows], notes=notes),
        verdict_from=VERDICT_FROM)


def _hopper_build_label() -> str:
    import importlib

    return importlib.import_module("..kernels.flash_attention_hopper", __package__).DEFAULT_BUILD.label


# --------------------------------------------------------------------------- verdicts
def _speeds(d: Data, dim: int, causal: bool) -> tuple[float, dict[str, float]]:
    """(the Hopper kernel's TFLOP/s, {SDPA backend: TFLOP/s} of those timed) at one configuration."""
    hopper = float(d.m(metric_key(dim, causal, "hopper")))
    sdpa = {b: float(d.m(metric_key(dim, causal, b))) for b in SDPA_BACKENDS
            if is_num(d.m_or(None, metric_key(dim, causal, b)))}
    if not sdpa:
        raise Missing(f"metrics {metric_key(dim, causal, 'flash_attention')} (or another SDPA backend's)")
    return hopper, sdpa


def _vs_sdpa(d: Data, dim: int, causal: bool) -> tuple[float, str, str, str]:
    """(the Hopper kernel / the fastest SDPA backend, measured, bound, target) at one configuration."""
    hopper, sdpa = _speeds(d, dim, causal)
    best = max(sdpa, key=sdpa.get)
    r = hopper / sdpa[best]
    others = ", ".join(f"{LABELS[b].replace('SDPA ', '')} {x:.0f}" for b, x in sdpa.items() if b != best)
    return (r, f"{hopper:.0f} TFLOP/s = {times(r)} the fastest SDPA backend",
            f"{LABELS[best]} {sdpa[best]:.0f} TFLOP/s (the fastest SDPA backend, same run"
            + (f"; {others}" if others else "") + ")",
            f"supported ≥ {SDPA_TARGET[(dim, causal)]}×, partly ≥ {SDPA_PARTLY}×")


@rule(NAME, "attention-hopper-d128-full",
      f"Hopper kernel ≥ {SDPA_TARGET[(128, False)]}× the fastest SDPA backend at head dim 128, non-causal "
      "(B=4, S=4096, fp16)")
def _d128_full(d: Data) -> Judged:
    r, measured, bound, target = _vs_sdpa(d, 128, False)
    return Judged(measured, bound, r, at_least(r, SDPA_TARGET[(128, False)], SDPA_PARTLY), target)


@rule(NAME, "attention-hopper-d128-causal",
      f"Hopper kernel ≥ {SDPA_TARGET[(128, True)]}× the fastest SDPA backend at head dim 128, causal "
      "(B=4, S=4096, fp16)")
def _d128_causal(d: Data) -> Judged:
    r, measured, bound, target = _vs_sdpa(d, 128, True)
    return Judged(measured, bound, r, at_least(r, SDPA_TARGET[(128, True)], SDPA_PARTLY), target)


@rule(NAME, "attention-hopper-d64-full",
      f"Hopper kernel ≥ {SDPA_TARGET[(64, False)]}× the fastest SDPA backend at head dim 64, non-causal "
      "(B=4, S=4096, fp16)")
def _d64_full(d: Data) -> Judged:
    r, measured, bound, target = _vs_sdpa(d, 64, False)
    return Judged(measured, bound, r, at_least(r, SDPA_TARGET[(64, False)], SDPA_PARTLY), target)


@rule(NAME, "attention-hopper-d64-causal",
      f"Hopper kernel ≥ {SDPA_TARGET[(64, True)]}× the fastest SDPA backend at head dim 64, causal "
      "(B=4, S=4096, fp16)")
def _d64_causal(d: Data) -> Judged:
    r, measured, bound, target = _vs_sdpa(d, 64, True)
    return Judged(measured, bound, r, at_least(r, SDPA_TARGET[(64, True)], SDPA_PARTLY), target)


def _vs_mma_sync(d: Data, causal: bool) -> tuple[float, str, str]:
    """(the Hopper kernel / the mma.sync kernel, measured, bound) at head dim 128."""
    hopper = float(d.m(metric_key(128, causal, "hopper")))
    mma = float(d.m(metric_key(128, causal, "mma_sync")))
    r = hopper / mma
    return (r, f"{hopper:.0f} TFLOP/s = {times(r)} the mma.sync kernel",
            f"fullpipe mma.sync (FlashAttention-2 structure) {mma:.0f} TFLOP/s (same run)")


_MMA_SYNC_TARGET = f"supported ≥ {MMA_SYNC_TARGET}×, partly > 1.0×"


@rule(NAME, "attention-hopper-vs-mma-sync-d128-full",
      f"Hopper kernel ≥ {MMA_SYNC_TARGET}× fullpipe's mma.sync kernel at head dim 128, non-causal")
def _mma_full(d: Data) -> Judged:
    r, measured, bound = _vs_mma_sync(d, False)
    return Judged(measured, bound, r, "supported" if r >= MMA_SYNC_TARGET else "partly supported" if r > 1.0
                  else "not supported", _MMA_SYNC_TARGET)


@rule(NAME, "attention-hopper-vs-mma-sync-d128-causal",
      f"Hopper kernel ≥ {MMA_SYNC_TARGET}× fullpipe's mma.sync kernel at head dim 128, causal")
def _mma_causal(d: Data) -> Judged:
    r, measured, bound = _vs_mma_sync(d, True)
    return Judged(measured, bound, r, "supported" if r >= MMA_SYNC_TARGET else "partly supported" if r > 1.0
                  else "not supported", _MMA_SYNC_TARGET)


@rule(NAME, "attention-hopper-tensor-pipe",
      "warp specialization with TMA keeps the tensor cores busy: tensor-pipe utilization (ncu) of the Hopper kernel "
      f"≥ {TENSOR_PIPE_TARGET}× the mma.sync kernel's (head dim 128, non-causal)")
def _tensor_pipe(d: Data) -> Judged:
    target = f"supported ≥ {TENSOR_PIPE_TARGET}×, partly > 1.0×"
    ncu = {r.get("kernel"): r for r in d.m_or([], "ncu") if isinstance(r, dict)}
    hop, mma = ncu.get(LABELS["hopper"]), ncu.get(LABELS["mma_sync"])
    if not (hop and mma and is_num(hop.get("tensor_pipe_pct")) and is_num(mma.get("tensor_pipe_pct"))):
        skipped = d.m_or(None, "ncu_skipped")
        if skipped:
            return Judged(measured=f"not measured (ncu: {skipped})", bound="", ratio=None, verdict="skipped",
                          target=target)
        raise Missing(f"metrics.ncu rows {LABELS['hopper']!r} and {LABELS['mma_sync']!r} with tensor_pipe_pct")
    h, m = float(hop["tensor_pipe_pct"]), float(mma["tensor_pipe_pct"])
    r = h / m
    metric = d.m_or("tensor pipe", "ncu_tensor_pipe_metric").split(".")[0]
    return Judged(measured=f"tensor pipe active {h:.1f} % of peak = {times(r)} the mma.sync kernel's "
                           f"(ncu {metric}, one launch each, {d.m_or('d128 H16 full', 'ncu_config')})",
                  bound=f"fullpipe mma.sync {m:.1f} % (same run)",
                  ratio=r,
                  verdict="supported" if r >= TENSOR_PIPE_TARGET else "partly supported" if r > 1.0
                  else "not supported",
                  target=target)


# --------------------------------------------------------------------------- figure
KERNEL_COLORS = {"fullpipe Hopper": "#08306b", "fullpipe mma.sync": PINNED, "SDPA cuDNN": "#6b6b6b",
                 "SDPA flash (FA2)": BOUND, "SDPA efficient": GREY}


def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``: TFLOP/s
    per configuration of both fullpipe kernels and the SDPA backends (and, when ncu ran,
    the tensor-pipe utilization of the two fullpipe kernels)."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if x.get("kernel") in KERNEL_COLORS and is_num(x.get("TFLOP/s"))]
    need(rows, "table rows with TFLOP/s")
    configs = list(dict.fromkeys(x["config"] for x in rows))
    kernels = [k for k in KERNEL_COLORS if any(x["kernel"] == k for x in rows)]
    pipe = [x for x in (r.get("metrics") or {}).get("ncu") or []
            if isinstance(x, dict) and is_num(x.get("tensor_pipe_pct")) and x.get("kernel") in KERNEL_COLORS]
    fig, axes = plt.subplots(1, 2 if pipe else 1, figsize=WIDE, squeeze=False,
                             gridspec_kw={"width_ratios": [4, 1] if pipe else [1]})
    ax = axes[0][0]
    width = 0.8 / len(kernels)
    for j, k in enumerate(kernels):
        by = {x["config"]: x["TFLOP/s"] for x in rows if x["kernel"] == k}
        xs = [i + (j - (len(kernels) - 1) / 2) * width for i in range(len(configs))]
        bars = ax.bar(xs, [by.get(c, 0) for c in configs], width=width, color=KERNEL_COLORS[k], label=k)
        if k in ("fullpipe Hopper", "fullpipe mma.sync", "SDPA cuDNN"):
            label_bars(ax, bars, "{:.0f}", horizontal=False)
    ax.set_xticks(range(len(configs)), configs)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"forward, B={BATCH} S={SEQ} fp16: both fullpipe kernels beside the SDPA backends (same run)")
    ax.legend(ncol=3, fontsize=8, loc="upper right")
    ax.set_ylim(0, 1.25 * max(x["TFLOP/s"] for x in rows))
    ax.grid(axis="y", alpha=0.3)
    if pipe:
        a2 = axes[0][1]
        bars = a2.bar(range(len(pipe)), [x["tensor_pipe_pct"] for x in pipe], 0.6,
                      color=[KERNEL_COLORS[x["kernel"]] for x in pipe])
        label_bars(a2, bars, "{:.0f} %", horizontal=False)
        a2.set_xticks(range(len(pipe)), [x["kernel"].replace("fullpipe ", "") for x in pipe])
        a2.set_ylim(0, 100)
        a2.set_ylabel("tensor pipe active (% of peak)")
        by = {x["kernel"]: x["tensor_pipe_pct"] for x in pipe}
        ratio = (f": {by['fullpipe Hopper'] / by['fullpipe mma.sync']:.2f}×"
                 if by.get("fullpipe mma.sync") and "fullpipe Hopper" in by else "")
        a2.set_title(f"ncu, {(r.get('metrics') or {}).get('ncu_config') or 'd128 full'}{ratio}")
        a2.grid(axis="y", alpha=0.3)
    return {"TFLOP/s of the Hopper and mma.sync kernels beside every SDPA backend; tensor-pipe utilization (ncu)":
            save(fig, out / f"{NAME}.png")}


# --------------------------------------------------------------------------- without the report
def format_table(rows: list[dict[str, Any]]) -> str:
    def f(x, fmt):
        return format(x, fmt) if is_num(x) else "-"

    lines = [f"{'config':16} {'kernel':18} {'TFLOP/s':>8} {'ms':>8} {'/ SDPA best':>11} {'/ mma.sync':>10} "
             f"{'rel err':>9}  note"]
    for r in rows:
        lines.append(f"{r['config']:16} {r['kernel']:18} {f(r['TFLOP/s'], '8.1f')} {f(r['ms'], '8.3f')} "
                     f"{f(r['vs_fastest_sdpa'], '11.3f')} {f(r['vs_mma_sync'], '10.3f')} {f(r['rel_err'], '9.2e')}"
                     f"  {r['note']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The experiment without the report: prints the table, the ncu rows and the claims,
    and writes the Result's JSON."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.experiments.attention_hopper")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds of {QUICK_LAUNCHES} launches")
    ap.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-ncu", action="store_true", help="do not profile with Nsight Compute")
    ap.add_argument("--json", default=None, help="write the Result (the report's JSON) here")
    args = ap.parse_args(argv)
    if args.ncu_child:
        return _ncu_child()
    from ..cuda.device import Device

    if args.no_ncu:
        os.environ["FULLPIPE_NO_NCU"] = "1"
    res = run(Context(device=Device(0), quick=args.quick))
    timed = [r for r in res.table if "ms" in r]
    if timed:
        print(format_table(timed), flush=True)
    for r in res.metrics.get("ncu") or []:
        print(f"ncu {r['kernel']:18} {r['kernel_name']:36} tensor pipe {r['tensor_pipe_pct']} %  "
              f"issue active {r['issue_active_pct']} %  {r['time_us']} us")
    for n in res.notes:
        print("note:", n)
    for c in res.claims:
        print(f"[{c['verdict']}] {c['claim']}: {c['measured']}")
    print(f"verdict: {res.verdict}")
    if args.json:
        res.to_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
