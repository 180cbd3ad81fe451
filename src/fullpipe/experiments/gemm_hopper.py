"""fullpipe bench gemm-hopper: does warp specialization pay on Hopper, and does a
from-scratch TMA + wgmma kernel reach cuBLAS?

Four bf16/fp16 kernels (fullpipe.kernels.hopper_gemm), each adding one idea: wgmma fed
by cp.async; TMA into an mbarrier ring; warp specialization (TMA producer, two wgmma
consumer warpgroups, setmaxnreg); persistent clusters of 2 with TMA multicast and a
TMA-store epilogue. Each is timed at 4096^3 and 8192^3 (4096^3 only with --quick) in
both dtypes next to cuBLAS (torch.matmul, same dtype, same stream, same run), in
interleaved rounds: each round times every kernel once, so that all of them meet the
same stretches of the card's clock and power state; each kernel's median over the
rounds is its time, cuBLAS's the bound. Every timed output is checked against a float64
product first; a wrong rung makes the run "failed".

Why rounds: at 8192^3 an H100 runs at its power limit and its clock follows the power
drawn (1330-1380 MHz sustained). Timed one after the other, with cuBLAS before and after
the ladder and the faster of its two as the bound (sessions 5-27), the persistent rung
read 0.93-0.94x cuBLAS bf16 on H100s; sustained for 3 s each, at the same clock and
power, it read 0.99-1.00x (session 28, p185 on two H100s: 693-701 against 690-703
TFLOP/s, 3856-3955 against 3890-3902 flop per SM clock).

When Nsight Compute is installed (and FULLPIPE_NO_NCU is not 1) a child run profiles
each rung once at 4096^3 bf16: tensor-pipe utilization, and the L2 -> SM read traffic
of the persistent kernel with and without B multicast, beside what the construction
predicts (B read once per 2-block cluster instead of once per block).

    python -m fullpipe.experiments.gemm_hopper [--quick] [--no-ncu] [--json FILE]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import Bound, Context, Result
from ..cuda.device import device_info
from .claims import UNJUDGED, Data, Judged, Missing, both, is_num, rule, times, with_claims
from .figures import BOUND, GREY, PINNED, RING, WIDE, label_bars, need, pyplot, save
from .ncu import find_ncu, ncu_turned_off, parse_ncu_csv

NAME = "gemm-hopper"
TITLE = "Hopper GEMM ladder (wgmma, TMA, warp specialization, persistent clusters) vs cuBLAS"
CLAIM = (
    "A from-scratch TMA + wgmma kernel reaches cuBLAS (best rung >= 0.95x cuBLAS at 8192^3, >= 0.9x at 4096^3), "
    "and on Hopper warp specialization beats double buffering (rung 3 >= 1.2x rung 2)"
)
PRELOAD = ("torch",)  # imported ahead while the previous experiment runs (report/worker.py)
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "Hopper moves tiles with the Tensor Memory Accelerator (TMA: one thread issues a bulk copy of a whole "
    "tile, its arrival counted on an mbarrier) and multiplies from shared memory with asynchronous "
    "warpgroup MMAs (wgmma). The ladder adds one idea per rung: wgmma fed by cp.async; a TMA ring where "
    "every warp still loads and computes (double buffering with the SM's copy engine); warp specialization "
    "(a producer warp issues TMA, two consumer warpgroups run wgmma, setmaxnreg gives them the producer's "
    "registers); persistent clusters of 2 whose blocks receive their shared B tile from one TMA multicast."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): its canonical ones.
VERDICT_FROM = ("warp-specialization-beats-double-buffer-hopper", "tma-wgmma-reaches-cublas",
                "clusters-remove-duplicate-loads-hopper")

DTYPES = ("bfloat16", "float16")
LADDER = ("wgmma", "tma", "ws", "persistent")  # rungs 1-4; persistent_no_multicast is a comparison build
LABELS = {"wgmma": "1 wgmma\n+ cp.async", "tma": "2 TMA ring", "ws": "3 warp-\nspecialized",
          "persistent": "4 persistent\n+ multicast", "persistent_no_multicast": "4 without\nmulticast"}
REL_TOL = 1e-2  # relative error against the float64 product above which a rung is wrong
REPEAT = 7  # timed samples per kernel (median)
# Targets (issue 15): the best rung vs cuBLAS (reach_target), warp-specialized vs the TMA
# ring, multicast L2 reads within this fraction of the once-per-cluster count.
WS_TARGET = 1.2
ONCE_PER_CLUSTER_TOL = 0.05

NCU_SIZE = 4096
NCU_TIMEOUT_S = float(os.environ.get("FULLPIPE_NCU_TIMEOUT", "120"))
NCU_METRICS = (
    "gpu__time_duration.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",   # 32-byte sectors the SMs (TMA included) read from L2
    "dram__bytes_read.sum",
)
# ncu rows of the persistent kernel with and without multicast (the child profiles the
# second build in fp16 so that the two carry different kernel names)
MULTICAST, NO_MULTICAST = "persistent (multicast)", "persistent (no multicast, fp16)"
# Tensor-pipe utilization: the metric's name differs between ncu versions (a name ncu
# does not know makes it refuse the whole list), so it is looked up with --query-metrics.
TENSOR_PIPE_RE = re.compile(r"^\s*(sm__pipe_tensor_op_gmma_cycles_active|sm__pipe_tensor_op_hmma_cycles_active|"
                            r"sm__pipe_tensor_cycles_active)\b", re.M)
TENSOR_PIPE_SUFFIX = ".avg.pct_of_peak_sustained_active"


def tensor_pipe_metric(ncu: str, timeout_s: float = 30.0) -> str | None:
    """The first tensor-pipe cycles-active metric this ncu knows (gmma preferred), with
    the percent-of-peak suffix; None if it cannot say."""
    try:
        p = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = TENSOR_PIPE_RE.findall(p.stdout)
    for pref in ("sm__pipe_tensor_op_gmma_cycles_active", "sm__pipe_tensor_op_hmma_cycles_active",
                 "sm__pipe_tensor_cycles_active"):
        if pref in found:
            return pref + TENSOR_PIPE_SUFFIX
    return None


# --------------------------------------------------------------------------- measurement
def _time(fn, *, warmup: int = 3, repeat: int = 7, batch: int = 5) -> list[float]:
    """Per-launch milliseconds with CUDA events on torch's current stream: each sample
    is a batch of launches queued behind a short GPU sleep, so host-side launch cost
    (tensor maps, parameter packing) never shows as idle GPU time between events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)  # ~1 ms: the batch is enqueued before the GPU reaches e0
        e0.record()
        for _ in range(batch):
            fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / batch)
    return times


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def tflops(size: int, ms: float) -> float:
    return 2.0 * size**3 / (ms * 1e-3) / 1e12


def measure(sizes=(4096, 8192), dtypes=("bfloat16", "float16"), variants=None, *, repeat: int = 7,
            progress=lambda f, m: None) -> list[dict[str, Any]]:
    """Rows {size, dtype, kernel, ms, TFLOP/s, vs_cublas, rel_err, spread}, cuBLAS first.
    ``repeat`` rounds, each timing cuBLAS and every rung once (a batch of launches), in
    turn, each round starting one kernel further on; ms is a kernel's median over the
    rounds, spread its (max - min) / median."""
    import torch

    from ..kernels.hopper_gemm import VARIANTS, gemm_hopper

    variants = list(variants or VARIANTS) + ["persistent_no_multicast"]
    rows: list[dict[str, Any]] = []
    steps, done = len(sizes) * len(dtypes), 0
    for size in sizes:
        for dname in dtypes:
            dt = getattr(torch, dname)
            g = torch.Generator(device="cuda").manual_seed(size + len(dname))
            a = torch.randn(size, size, device="cuda", generator=g).to(dt)
            b = torch.randn(size, size, device="cuda", generator=g).to(dt)
            ref = (a.double() @ b.double())
            ref_norm = float(torch.linalg.norm(ref))
            out = torch.empty(size, size, device="cuda", dtype=dt)

            def rel(x):
                return float(torch.linalg.norm(x.double() - ref)) / ref_norm

            out.fill_(float("nan"))
            torch.matmul(a, b, out=out)
            torch.cuda.synchronize()
            errs = {"cuBLAS": rel(out)}
            launch = {"cuBLAS": lambda: torch.matmul(a, b, out=out)}
            for v in variants:
                name, kw = (v, {}) if v != "persistent_no_multicast" else ("persistent", {"_multicast": False})
                out.fill_(float("nan"))
                gemm_hopper(a, b, variant=name, out=out, **kw)
                torch.cuda.synchronize()
                errs[v] = rel(out) if not torch.isnan(out).any() else float("nan")
                launch[v] = lambda name=name, kw=kw: gemm_hopper(a, b, variant=name, out=out, **kw)
            for fn in launch.values():  # warm-up (module loads, prepared launches, clocks up)
                _time(fn, repeat=0)
            samples: dict[str, list[float]] = {k: [] for k in launch}
            order = list(launch)
            for r in range(repeat):  # interleaved rounds: every kernel in the same stretch of clock and power,
                for k in order[r % len(order):] + order[:r % len(order)]:  # each round starting one further on
                    samples[k] += _time(launch[k], warmup=0, repeat=1)
            bound = _median(samples["cuBLAS"])
            for k, ts in samples.items():
                ms = _median(ts)
                rows.append({"size": size, "dtype": dname, "kernel": k, "ms": ms, "TFLOP/s": tflops(size, ms),
                             "vs_cublas": bound / ms, "rel_err": errs[k], "spread": (max(ts) - min(ts)) / ms})
            del a, b, ref, out
            torch.cuda.empty_cache()
            done += 1
            progress(done / steps, f"{size}^3 {dname}")
    return rows


# --------------------------------------------------------------------------- ncu
def expected_l2_read_bytes(size: int, multicast: bool) -> float:
    """L2 -> SM bytes of the persistent kernel at size^3 by construction: every block
    reads its A rows (128 x K) and, without multicast, all of B's 256 columns (K x 256);
    with multicast each block of a 2-block cluster reads half of B."""
    from ..kernels.hopper_gemm import BM, BN, CLUSTER, ELEM, tiles

    b_cols = BN // CLUSTER if multicast else BN
    return tiles(size, size) * (BM + b_cols) * size * ELEM


def ncu_measure(size: int = NCU_SIZE, timeout_s: float = NCU_TIMEOUT_S) -> dict[str, Any]:
    """Profile one launch of each rung (and persistent without multicast) under ncu."""
    ncu = find_ncu()
    if ncu is None:
        return {"skipped": "ncu not found"}
    per, p = {}, None
    pipe = tensor_pipe_metric(ncu)
    for metrics in ((*NCU_METRICS, pipe) if pipe else NCU_METRICS, NCU_METRICS):
        cmd = [ncu, "--csv", "--clock-control", "none", "--metrics", ",".join(metrics),
               "-k", "regex:gemm_hopper_", sys.executable, "-m", "fullpipe.experiments.gemm_hopper", "--ncu-child",
               str(size)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"skipped": f"ncu took longer than {timeout_s:.0f} s"}
        per = parse_ncu_csv(p.stdout)
        if per:
            break
    if not per:
        return {"skipped": f"ncu gave no metrics (rc {p.returncode}): {(p.stderr or p.stdout)[-400:]}"}
    # The child launches: wgmma, tma, ws, persistent, persistent (no multicast), in order;
    # parse_ncu_csv keys by kernel name, so the child tags the two persistent builds by dtype:
    # bf16 = multicast, f16 = no multicast.
    return {"size": size, "kernels": per, "tensor_pipe_metric": pipe}


def _ncu_child(size: int) -> int:
    import torch

    from ..kernels.hopper_gemm import VARIANTS, gemm_hopper

    g = torch.Generator(device="cuda").manual_seed(1)
    for dt, variants in ((torch.bfloat16, VARIANTS), (torch.float16, ("persistent",))):
        a = torch.randn(size, size, device="cuda", generator=g).to(dt)
        b = torch.randn(size, size, device="cuda", generator=g).to(dt)
        for v in variants:
            if v == "persistent":
                gemm_hopper(a, b, variant=v, _multicast=dt == torch.bfloat16)
            else:
                gemm_hopper(a, b, variant=v)
    torch.cuda.synchronize()
    return 0


def ncu_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    pipe = res.get("tensor_pipe_metric")
    kernels = res.get("kernels", {})
    size = res.get("size", NCU_SIZE)
    for name, m in sorted(kernels.items()):
        label = name
        expected = None
        if name.startswith("gemm_hopper_persistent"):
            mc = name.endswith("bf16")
            label = MULTICAST if mc else NO_MULTICAST
            expected = expected_l2_read_bytes(size, mc)
        sectors = m.get("lts__t_sectors_srcunit_tex_op_read.sum")
        rows.append({"kernel": label, "time_us": (m.get("gpu__time_duration.sum") or 0) / 1e3,
                     "tensor_pipe_pct": m.get(pipe) if pipe else None,
                     "l2_read_MB": sectors * 32 / 1e6 if sectors is not None else None,
                     "expected_l2_read_MB": expected / 1e6 if expected else None,
                     "dram_read_MB": (m.get("dram__bytes_read.sum") or 0) / 1e6})
    return rows


# --------------------------------------------------------------------------- the run
def run(ctx: Context) -> Result:
    dev = ctx.device
    if tuple(dev.facts.compute_capability) != (9, 0):
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=[f"the Hopper ladder needs sm_90a (TMA, wgmma, setmaxnreg); this GPU is {dev.facts.arch}"])
    sizes = (4096,) if ctx.quick else (4096, 8192)
    rows = measure(sizes, DTYPES, repeat=REPEAT, progress=ctx.progress)
    ncu = {"skipped": "FULLPIPE_NO_NCU=1"} if ncu_turned_off() else ncu_measure()
    nrows = ncu_rows(ncu) if "kernels" in ncu else []

    notes = []
    wrong = [f"{r['size']}^3 {r['dtype']} {r['kernel']}: relative error {r['rel_err']:.3e} vs the float64 product "
             f"(tolerance {REL_TOL:g})" for r in rows if not r["rel_err"] < REL_TOL]  # NaN is wrong too
    notes.extend(wrong)
    if "skipped" in ncu:
        notes.append(f"ncu: {ncu['skipped']}")
    elif not ncu.get("tensor_pipe_metric"):
        notes.append("ncu: this ncu names no tensor-pipe cycles-active metric; tensor-pipe use not measured")
    # The rules read the timed rows (table) and the ncu rows (metrics["ncu"]).
    metrics: dict[str, Any] = {"ncu": nrows, "ncu_size": ncu.get("size"),
                               "ncu_tensor_pipe_metric": ncu.get("tensor_pipe_metric"),
                               "ncu_skipped": ncu.get("skipped")}
    big = max(sizes)
    cub = next(r for r in rows if (r["size"], r["dtype"], r["kernel"]) == (big, "bfloat16", "cuBLAS"))
    best = max((r for r in rows if (r["size"], r["dtype"]) == (big, "bfloat16") and r["kernel"] in LADDER),
               key=lambda r: r["vs_cublas"])
    return with_claims(Result(NAME, CLAIM, "failed" if wrong else UNJUDGED, device_info(dev),
                              {"sizes": list(sizes), "dtypes": list(DTYPES), "repeat": REPEAT}, metrics,
                              bound=Bound(f"cuBLAS bfloat16 {big}^3", cub["TFLOP/s"], "TFLOP/s"),
                              ratio=best["vs_cublas"],
                              table=rows + [dict(r, size=NCU_SIZE, dtype="ncu") for r in nrows], notes=notes),
                       verdict_from=VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
def reach_target(size: int) -> float:
    """What the best rung must reach, as a fraction of cuBLAS, at size^3."""
    return 0.95 if size >= 8192 else 0.9


def _timed_rows(d: Data) -> list[dict]:
    rows = [r for r in d.rows() if r.get("dtype") in DTYPES and isinstance(r.get("size"), int) and is_num(r.get("ms"))]
    if not rows:
        raise Missing("table rows with size, dtype and ms")
    return rows


def _find(rows: list[dict], size: int, dtype: str, kernel: str) -> dict:
    r = next((r for r in rows if (r["size"], r["dtype"], r["kernel"]) == (size, dtype, kernel)), None)
    if r is None:
        raise Missing(f"table row {kernel} {dtype} {size}^3")
    return r


def _short(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)


@rule(NAME, "warp-specialization-beats-double-buffer-hopper")
def _ws_beats_tma(d: Data) -> Judged:
    rows = _timed_rows(d)
    parts, ratios = [], []
    for size in sorted({r["size"] for r in rows}):
        for dtype in DTYPES:
            ws, tma = _find(rows, size, dtype, "ws"), _find(rows, size, dtype, "tma")
            ratios.append(tma["ms"] / ws["ms"])
            parts.append(f"{size}³ {_short(dtype)} {times(ratios[-1])}")
    worst = min(ratios)
    tma_big = _find(rows, max(r["size"] for r in rows), "bfloat16", "tma")
    return Judged(measured="rung 3 (warp-specialized) / rung 2 (TMA ring) speed: " + ", ".join(parts),
                  bound=f"rung 2, every warp loads and computes: {tma_big['TFLOP/s']:.0f} TFLOP/s at "
                        f"{tma_big['size']}³ bf16 (same run)",
                  ratio=worst,
                  verdict="supported" if worst >= WS_TARGET else "partly supported" if worst > 1.0 else "not supported",
                  target=f"supported ≥ {WS_TARGET}× at every size and dtype (the worst counts), partly > 1.0×")


@rule(NAME, "tma-wgmma-reaches-cublas")
def _reaches_cublas(d: Data) -> Judged:
    rows = _timed_rows(d)
    sizes = sorted({r["size"] for r in rows})
    parts, ok = [], []
    for size in sizes:
        target = reach_target(size)
        for dtype in DTYPES:
            rungs = [r for r in rows if (r["size"], r["dtype"]) == (size, dtype) and r["kernel"] in LADDER]
            if not rungs:
                raise Missing(f"table rows of the ladder, {dtype} {size}^3")
            best = max(rungs, key=lambda r: r["vs_cublas"])
            correct = is_num(best.get("rel_err")) and best["rel_err"] < REL_TOL
            ok.append(best["vs_cublas"] >= target and correct)
            parts.append(f"{size}³ {_short(dtype)} {best['kernel']} {times(best['vs_cublas'])} (target {target}×"
                         + ("" if correct else ", wrong result") + ")")
    big = max(sizes)
    ref = max((r for r in rows if (r["size"], r["dtype"]) == (big, "bfloat16") and r["kernel"] in LADDER),
              key=lambda r: r["vs_cublas"])
    cub = {dt: _find(rows, big, dt, "cuBLAS")["TFLOP/s"] for dt in DTYPES}
    if max(sizes) < 8192:
        parts.append("8192³ not measured (--quick)")
    return Judged(measured="best rung / cuBLAS: " + "; ".join(parts),
                  bound=f"cuBLAS bf16 {cub['bfloat16']:.0f}, fp16 {cub['float16']:.0f} TFLOP/s at {big}³ (same run)",
                  ratio=ref["vs_cublas"],
                  verdict="supported" if all(ok) else "partly supported" if any(ok) else "not supported",
                  target="supported: the best rung ≥ 0.95× cuBLAS at 8192³ and ≥ 0.9× at 4096³, in bf16 and fp16; "
                         "partly: some of these")


@rule(NAME, "clusters-remove-duplicate-loads-hopper")
def _multicast(d: Data) -> Judged:
    target = (f"supported: with multicast the L2 → SM reads are the once-per-cluster count (within "
              f"{ONCE_PER_CLUSTER_TOL:.0%}) and fewer than without; partly: one of the two")
    ncu = {r.get("kernel"): r for r in d.m_or([], "ncu") if isinstance(r, dict)}
    if MULTICAST not in ncu or NO_MULTICAST not in ncu:
        skipped = d.m_or(None, "ncu_skipped")
        if skipped:
            return Judged(measured=f"not measured (ncu: {skipped})", bound="", ratio=None, verdict="skipped",
                          target=target)
        raise Missing(f"metrics.ncu rows {MULTICAST!r} and {NO_MULTICAST!r}")
    mc, own = ncu[MULTICAST], ncu[NO_MULTICAST]
    mc_mb, mc_once = Data.num(mc, "l2_read_MB"), Data.num(mc, "expected_l2_read_MB")
    own_mb, own_each = Data.num(own, "l2_read_MB"), Data.num(own, "expected_l2_read_MB")
    ratio = mc_mb / mc_once
    once, fewer = abs(ratio - 1) < ONCE_PER_CLUSTER_TOL, mc_mb < own_mb
    size = d.m_or(NCU_SIZE, "ncu_size")
    measured = (f"ncu at {size}³: L2 → SM reads with multicast {mc_mb:.0f} MB = {times(ratio)} the once-per-cluster "
                f"count; without multicast {own_mb:.0f} MB ({times(own_mb / own_each)} its once-per-block count "
                f"{own_each:.0f} MB)")
    try:  # the time difference, at the largest size timed
        rows = _timed_rows(d)
        big = max(r["size"] for r in rows)
        t_mc, t_own = _find(rows, big, "bfloat16", "persistent")["ms"], _find(rows, big, "bfloat16",
                                                                           "persistent_no_multicast")["ms"]
        faster = t_own / t_mc
        measured += (f"; {faster:.3f}× faster with multicast at {big}³ bf16 ({t_mc:.3f} vs {t_own:.3f} ms)"
                     if faster >= 1 else f"; {1 / faster:.3f}× slower with multicast at {big}³ bf16 "
                                         f"({t_mc:.3f} vs {t_own:.3f} ms)")
    except Missing:
        pass
    return Judged(measured=measured,
                  bound=f"construction: A once per block, B once per 2-block cluster = {mc_once:.0f} MB",
                  ratio=ratio, verdict=both(once, fewer), target=target)


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if x.get("dtype") in DTYPES and is_num(x.get("vs_cublas"))
            and isinstance(x.get("size"), int)]
    need(rows, "table rows with vs_cublas")
    groups = sorted({(x["size"], x["dtype"]) for x in rows})
    kernels = [k for k in LABELS if any(x["kernel"] == k for x in rows)]
    ncu = {x.get("kernel"): x for x in (r.get("metrics") or {}).get("ncu") or [] if isinstance(x, dict)}
    loads = [ncu[k] for k in (MULTICAST, NO_MULTICAST) if k in ncu and is_num(ncu[k].get("l2_read_MB"))
             and is_num(ncu[k].get("expected_l2_read_MB"))]
    fig, axes = plt.subplots(1, 2 if loads else 1, figsize=WIDE, squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1] if loads else [1]})
    ax = axes[0][0]
    shades = ["#9ecae1", "#4292c6", "#2171b5", "#08306b"]
    width = 0.8 / len(groups)
    for j, (size, dtype) in enumerate(groups):
        by = {x["kernel"]: x for x in rows if (x["size"], x["dtype"]) == (size, dtype)}
        cub = by.get("cuBLAS", {}).get("TFLOP/s")
        xs = [i + (j - (len(groups) - 1) / 2) * width for i in range(len(kernels))]
        bars = ax.bar(xs, [by[k]["vs_cublas"] if k in by else 0 for k in kernels], width=width,
                      color=shades[j % len(shades)],
                      label=f"{size}³ {_short(dtype)}" + (f" (cuBLAS {cub:.0f} TFLOP/s)" if is_num(cub) else ""))
        for b in bars:  # upright labels: four bars side by side leave no room for flat ones
            if b.get_height() > 0:
                ax.annotate(f"{b.get_height():.2f}", (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", rotation=90, fontsize=7)
    ax.axhline(1.0, color=BOUND, lw=1.2)
    targets: dict[float, list[int]] = {}
    for size in sorted({g[0] for g in groups}):
        targets.setdefault(reach_target(size), []).append(size)
    for k, (target, at) in enumerate(sorted(targets.items())):
        ax.axhline(target, color=GREY, ls="--", lw=1)
        below = k == 0 and len(targets) > 1  # keep two close labels apart
        ax.annotate(f"target at {', '.join(f'{n}³' for n in at)}: {target}×", (0.0, target),
                    xycoords=("axes fraction", "data"), xytext=(2, -2 if below else 2), textcoords="offset points",
                    ha="left", va="top" if below else "bottom", fontsize=8)
    ax.set_xticks(range(len(kernels)), [LABELS[k] for k in kernels])
    ax.set_ylabel("speed / cuBLAS (same dtype, same run)")
    ax.set_ylim(0, 1.3)
    ax.set_title("the ladder against cuBLAS (1.0, solid line)")
    ax.legend(loc="upper left", ncol=2, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    if loads:
        a2 = axes[0][1]
        names = ["multicast\n(B once per cluster)" if x is ncu.get(MULTICAST) else "no multicast\n(B once per block)"
                 for x in loads]
        xs = range(len(loads))
        b1 = a2.bar([i - 0.2 for i in xs], [x["l2_read_MB"] for x in loads], 0.4, color=PINNED, label="ncu (measured)")
        b2 = a2.bar([i + 0.2 for i in xs], [x["expected_l2_read_MB"] for x in loads], 0.4, color=RING,
                    label="by construction")
        label_bars(a2, b1, "{:.0f}", horizontal=False)
        label_bars(a2, b2, "{:.0f}", horizontal=False)
        a2.set_xticks(list(xs), names)
        a2.set_ylabel("L2 → SM reads (MB)")
        a2.set_title(f"persistent kernel, ncu {(r.get('metrics') or {}).get('ncu_size') or NCU_SIZE}³")
        a2.legend(loc="upper left", fontsize=8)
        a2.set_ylim(0, 1.2 * max(max(x["l2_read_MB"], x["expected_l2_read_MB"]) for x in loads))
        a2.grid(axis="y", alpha=0.3)
    return {"the Hopper ladder against cuBLAS, and the L2 reads multicast saves": save(fig, out / f"{NAME}.png")}


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'size':>6} {'dtype':9} {'kernel':24} {'ms':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9} {'rel err':>9}"]
    for r in rows:
        lines.append(f"{r['size']:>6} {r['dtype']:9} {r['kernel']:24} {r['ms']:8.3f} {r['TFLOP/s']:8.1f} "
                     f"{r['vs_cublas']:9.3f} {r['rel_err']:9.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The experiment without the report: prints the table, the ncu rows and the claims,
    and writes the Result's JSON (scripts/hopper-gemm-check runs this)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.experiments.gemm_hopper")
    ap.add_argument("--quick", action="store_true", help="4096^3 only")
    ap.add_argument("--ncu-child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--no-ncu", action="store_true", help="do not profile with Nsight Compute")
    ap.add_argument("--json", default=None, help="write the Result (the report's JSON) here")
    args = ap.parse_args(argv)
    if args.ncu_child:
        return _ncu_child(args.ncu_child)
    from ..cuda.device import Device

    if args.no_ncu:
        os.environ["FULLPIPE_NO_NCU"] = "1"
    res = run(Context(device=Device(0), quick=args.quick))
    timed = [r for r in res.table if r.get("dtype") in DTYPES]
    if timed:
        print(format_table(timed), flush=True)
    for r in res.metrics.get("ncu") or []:
        print(f"ncu {r['kernel']:34s} {r['time_us']:9.1f} us  tensor pipe {r['tensor_pipe_pct']}%  "
              f"L2->SM {r['l2_read_MB']} MB (expected {r['expected_l2_read_MB']})  DRAM {r['dram_read_MB']:.0f} MB")
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
