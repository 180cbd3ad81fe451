"""fullpipe bench gemm-hopper: the Hopper GEMM ladder beside cuBLAS.

Four bf16/fp16 kernels (fullpipe.kernels.hopper_gemm), each adding one idea: wgmma fed
by cp.async; TMA into an mbarrier ring; warp specialization (TMA producer, two wgmma
consumer warpgroups, setmaxnreg); persistent clusters of 2 with TMA multicast and a
TMA-store epilogue. Each is timed at 4096^3 and 8192^3 (4096^3 only with --quick) in
both dtypes next to cuBLAS (torch.matmul, same dtype, same stream, same run: measured
before and after the ladder, the faster of the two is the bound). Every timed output
is checked against a float64 product first.

When Nsight Compute is installed (and FULLPIPE_NO_NCU is unset) a child run profiles
each rung once at 4096^3 bf16: tensor-pipe utilization, and the L2 -> SM read traffic
of the persistent kernel with and without B multicast, beside what the construction
predicts (B read once per 2-block cluster instead of once per block).

    python -m fullpipe.experiments.gemm_hopper [--quick] [--json FILE]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

from .ncu import find_ncu, parse_ncu_csv
from .result import Bound, Claim, Result

NAME = "gemm-hopper"
TITLE = "Hopper GEMM ladder (wgmma, TMA, warp specialization, persistent clusters) vs cuBLAS"
CLAIM = (
    "A from-scratch TMA + wgmma kernel reaches cuBLAS (best rung >= 0.95x cuBLAS at 8192^3, >= 0.9x at 4096^3), "
    "and on Hopper warp specialization beats double buffering (rung 3 >= 1.2x rung 2)"
)

LABELS = {"wgmma": "1 wgmma+cp.async", "tma": "2 TMA ring", "ws": "3 warp-specialized",
          "persistent": "4 persistent+multicast"}
NCU_SIZE = 4096
NCU_TIMEOUT_S = float(os.environ.get("FULLPIPE_NCU_TIMEOUT", "120"))
NCU_METRICS = (
    "gpu__time_duration.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",   # 32-byte sectors the SMs (TMA included) read from L2
    "dram__bytes_read.sum",
)
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
    """Rows {size, dtype, kernel, ms, TFLOP/s, vs_cublas, rel_err, spread}, cuBLAS first."""
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

            cublas_ms = [_median(_time(lambda: torch.matmul(a, b, out=out), repeat=repeat))]
            cublas_err = rel(out)
            ours = []
            for v in variants:
                name, kw = (v, {}) if v != "persistent_no_multicast" else ("persistent", {"_multicast": False})
                out.fill_(float("nan"))
                gemm_hopper(a, b, variant=name, out=out, **kw)
                torch.cuda.synchronize()
                err = rel(out) if not torch.isnan(out).any() else float("nan")
                ts = _time(lambda: gemm_hopper(a, b, variant=name, out=out, **kw), repeat=repeat)
                ours.append((v, _median(ts), err, (max(ts) - min(ts)) / _median(ts)))
            cublas_ms.append(_median(_time(lambda: torch.matmul(a, b, out=out), repeat=repeat)))
            bound = min(cublas_ms)
            rows.append({"size": size, "dtype": dname, "kernel": "cuBLAS", "ms": bound, "TFLOP/s": tflops(size, bound),
                         "vs_cublas": 1.0, "rel_err": cublas_err, "spread": abs(cublas_ms[0] - cublas_ms[1]) / bound})
            for v, ms, err, sp in ours:
                rows.append({"size": size, "dtype": dname, "kernel": v, "ms": ms, "TFLOP/s": tflops(size, ms),
                             "vs_cublas": bound / ms, "rel_err": err, "spread": sp})
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
            label = f"persistent ({'multicast' if mc else 'no multicast, fp16'})"
            expected = expected_l2_read_bytes(size, mc)
        sectors = m.get("lts__t_sectors_srcunit_tex_op_read.sum")
        rows.append({"kernel": label, "time_us": (m.get("gpu__time_duration.sum") or 0) / 1e3,
                     "tensor_pipe_pct": m.get(pipe) if pipe else None,
                     "l2_read_MB": sectors * 32 / 1e6 if sectors is not None else None,
                     "expected_l2_read_MB": expected / 1e6 if expected else None,
                     "dram_read_MB": (m.get("dram__bytes_read.sum") or 0) / 1e6})
    return rows


# --------------------------------------------------------------------------- claims
def _best(rows, size, dtype, kernels):
    cands = [r for r in rows if r["size"] == size and r["dtype"] == dtype and r["kernel"] in kernels]
    return max(cands, key=lambda r: r["vs_cublas"]) if cands else None


def judge(rows: list[dict[str, Any]], ncu_rows_: list[dict[str, Any]] | None = None) -> list[Claim]:
    ladder = ("wgmma", "tma", "ws", "persistent")
    claims = []
    sizes = sorted({r["size"] for r in rows})
    parts, ok_all, ok_any = [], True, False
    for size in sizes:
        target = 0.95 if size >= 8192 else 0.9
        for dtype in ("bfloat16", "float16"):
            best = _best(rows, size, dtype, ladder)
            if best is None:
                continue
            ok = best["vs_cublas"] >= target and best["rel_err"] < 1e-2
            ok_all &= ok
            ok_any |= ok
            parts.append(f"{size}^3 {dtype}: {best['kernel']} {best['vs_cublas']:.3f}x (target {target})")
    ref = _best(rows, max(sizes), "bfloat16", ladder)
    cub = next((r for r in rows if r["size"] == max(sizes) and r["dtype"] == "bfloat16" and r["kernel"] == "cuBLAS"),
               None)
    claims.append(Claim(
        claim="a from-scratch TMA + wgmma kernel reaches cuBLAS",
        measured="; ".join(parts),
        bound=f"cuBLAS bf16 {cub['TFLOP/s']:.0f} TFLOP/s at {max(sizes)}^3" if cub else "cuBLAS",
        ratio=ref["vs_cublas"] if ref else None,
        verdict="supported" if ok_all and parts else ("partly supported" if ok_any else "not supported"),
        key="hopper_gemm_reaches_cublas", target=">= 0.95x at 8192^3, >= 0.9x at 4096^3, both dtypes"))
    parts, ratios = [], []
    for size in sizes:
        for dtype in ("bfloat16", "float16"):
            ws = _best(rows, size, dtype, ("ws",))
            tma = _best(rows, size, dtype, ("tma",))
            if ws and tma:
                r = tma["ms"] / ws["ms"]
                ratios.append(r)
                parts.append(f"{size}^3 {dtype}: {r:.2f}x")
    worst = min(ratios) if ratios else None
    claims.append(Claim(
        claim="warp specialization beats double buffering (Hopper: rung 3 vs rung 2)",
        measured="ws / tma speed: " + "; ".join(parts), bound="rung 2 (TMA ring, no roles), same run",
        ratio=worst, verdict=("supported" if worst >= 1.2 else "partly supported" if worst > 1.0 else "not supported")
        if worst is not None else "skipped",
        key="ws_beats_double_buffer_hopper", target=">= 1.2x"))
    mc = next((r for r in rows if r["size"] == max(sizes) and r["dtype"] == "bfloat16" and r["kernel"] == "persistent"),
              None)
    own = next((r for r in rows if r["size"] == max(sizes) and r["dtype"] == "bfloat16"
                and r["kernel"] == "persistent_no_multicast"), None)
    nrows = {r["kernel"]: r for r in ncu_rows_ or []}
    n_mc, n_own = nrows.get("persistent (multicast)"), nrows.get("persistent (no multicast, fp16)")
    if n_mc and n_own and n_mc.get("l2_read_MB") and n_own.get("l2_read_MB"):
        # The claim is about the multicast build: B read once per cluster means its L2 -> SM
        # reads match the construction (own A rows + half of B per block). Without multicast
        # the two blocks of a cluster ask for the same B boxes at about the same moment and
        # L2 may merge some of those requests, so that build can read less than its count.
        l2_ratio = n_mc["l2_read_MB"] / n_mc["expected_l2_read_MB"]
        measured = (f"ncu L2->SM reads with multicast {n_mc['l2_read_MB']:.0f} MB = {l2_ratio:.3f}x the "
                    f"once-per-cluster count {n_mc['expected_l2_read_MB']:.0f} MB; without multicast "
                    f"{n_own['l2_read_MB']:.0f} MB ({n_own['l2_read_MB'] / n_own['expected_l2_read_MB']:.3f}x its "
                    f"once-per-block count {n_own['expected_l2_read_MB']:.0f} MB)")
        ok = abs(l2_ratio - 1) < 0.05 and n_mc["l2_read_MB"] < n_own["l2_read_MB"]
        verdict = "supported" if ok else "partly supported"
    else:
        measured, verdict, l2_ratio = "no ncu counters", "skipped", None
    if mc and own:
        measured += f"; time {own['ms'] / mc['ms']:.3f}x faster with multicast ({mc['ms']:.3f} vs {own['ms']:.3f} ms)"
    claims.append(Claim(
        claim="clusters remove duplicate loads (TMA multicast of B in 2-block clusters)", measured=measured,
        bound="construction: A once per block, B once per 2-block cluster", ratio=l2_ratio, verdict=verdict,
        key="hopper_multicast_once_per_cluster", target="B read from L2 once per cluster"))
    return claims


def run(ctx: Any) -> Result:
    from ..cuda.device import Device  # noqa: F401  (the experiment needs a GPU)

    sizes = (4096,) if getattr(ctx, "quick", False) else (4096, 8192)
    rows = measure(sizes, progress=getattr(ctx, "progress", lambda f, m: None))
    ncu = {"skipped": "FULLPIPE_NO_NCU"} if os.environ.get("FULLPIPE_NO_NCU") else ncu_measure()
    nrows = ncu_rows(ncu) if "kernels" in ncu else []
    claims = judge(rows, nrows)
    figures = {}
    try:
        figures["ladder"] = _figure(rows, ctx.out_dir)
    except Exception as exc:  # matplotlib missing: the table still says it all
        figures = {}
        ncu.setdefault("figure_error", str(exc)[:200])
    main = claims[0]
    cub = next((r for r in rows if r["kernel"] == "cuBLAS" and r["dtype"] == "bfloat16" and r["size"] == max(sizes)))
    notes = [f"ncu: {ncu['skipped']}"] if "skipped" in ncu else []
    return Result(experiment=NAME, claim=CLAIM, verdict=main.verdict, device=_device_dict(), params={"sizes": sizes},
                  metrics={"ncu": nrows}, bound=Bound("cuBLAS bf16", cub["TFLOP/s"], "TFLOP/s"), ratio=main.ratio,
                  table=rows + [dict(r, size=NCU_SIZE, dtype="ncu") for r in nrows], notes=notes, figures=figures,
                  claims=[c.as_dict() for c in claims])


def _device_dict() -> dict[str, Any]:
    import torch

    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "sm_count": p.multi_processor_count, "cc": f"{p.major}.{p.minor}"}


def _figure(rows: list[dict[str, Any]], out_dir) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    kernels = ["cuBLAS", "wgmma", "tma", "ws", "persistent", "persistent_no_multicast"]
    groups = sorted({(r["size"], r["dtype"]) for r in rows})
    fig, ax = plt.subplots(figsize=(9, 4))
    w = 0.8 / len(groups)
    for gi, (size, dt) in enumerate(groups):
        vals = [next((r["TFLOP/s"] for r in rows if (r["size"], r["dtype"], r["kernel"]) == (size, dt, k)), 0)
                for k in kernels]
        ax.bar([i + gi * w for i in range(len(kernels))], vals, w, label=f"{size}^3 {dt}")
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(kernels))])
    ax.set_xticklabels(["cuBLAS", "1 wgmma", "2 TMA", "3 warp-spec.", "4 persistent", "4 no multicast"])
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=8)
    ax.set_title("Hopper GEMM ladder")
    path = Path(out_dir) / "gemm_hopper.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'size':>6} {'dtype':9} {'kernel':24} {'ms':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9} {'rel err':>9}"]
    for r in rows:
        lines.append(f"{r['size']:>6} {r['dtype']:9} {r['kernel']:24} {r['ms']:8.3f} {r['TFLOP/s']:8.1f} "
                     f"{r['vs_cublas']:9.3f} {r['rel_err']:9.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.experiments.gemm_hopper")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ncu-child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--json", default=None, help="write rows, ncu rows and claims here")
    args = ap.parse_args(argv)
    if args.ncu_child:
        return _ncu_child(args.ncu_child)
    sizes = (4096,) if args.quick else (4096, 8192)
    rows = measure(sizes)
    print(format_table(rows), flush=True)
    ncu = {"skipped": "--no-ncu"} if args.no_ncu else ncu_measure()
    nrows = ncu_rows(ncu) if "kernels" in ncu else []
    for r in nrows:
        print(f"ncu {r['kernel']:34s} {r['time_us']:9.1f} us  tensor pipe {r['tensor_pipe_pct']}%  "
              f"L2->SM {r['l2_read_MB']} MB (expected {r['expected_l2_read_MB']})  DRAM {r['dram_read_MB']:.0f} MB")
    if "skipped" in ncu:
        print("ncu:", ncu["skipped"])
    claims = judge(rows, nrows)
    for c in claims:
        print(f"[{c.verdict}] {c.claim}: {c.measured}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "ncu": nrows, "ncu_raw": ncu, "claims": [c.as_dict() for c in claims]}, f,
                      indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
