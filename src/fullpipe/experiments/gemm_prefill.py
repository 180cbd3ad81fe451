"""gemm-prefill: what the transposed product buys for a prefill of a few hundred tokens.

A prefill multiplies a few hundred tokens' activations (M rows) by each projection
weight (N x K, thousands each). Tiles of 128 rows along M then pad (300 tokens compute
512 rows in 128 x 256 cluster tiles) or leave SMs idle. The persistent rung's transposed
product computes C^T = W X^T instead: the weight's rows on wgmma's M, the tokens on its
N in tiles as wide as they are (80-256 columns; 300 tokens in two tiles of 160), the
result stored transposed (``hopper_gemm.swap_build``; cuBLAS runs these shapes so).
``default_build`` takes it where it was measured faster (sessions 56-58), and 128 x 192
tiles of the product as it is where their waves end sooner (session 59: 512 tokens). This
experiment measures it on this GPU, for each projection of Llama-3-8B at a few token
counts and for both layouts of the weight: ``w`` as ``nn.Linear`` holds it (b = ``w.T``)
and a row-major K x N ``b`` (read MN-major: ``a_mn_major``):

- the rule's build (``default_build``), the same product without the transposed product
  (``unswapped_build``: the comparison point) and cuBLAS (torch's ``F.linear(x, w)`` and
  ``x @ b``), each captured as a CUDA graph of REPS launches and replayed in alternating
  rounds (``measure.in_turn``); the median of ROUNDS. Every output is NaN-poisoned
  first and checked against the float32 product (relative error below REL_TOL).

Claims: where the rule takes the transposed product it runs >= 1.1x the unswapped
build (geometric mean, in each layout); over every product the rule runs >= 0.9x cuBLAS
(geometric mean).

Run: ``fullpipe bench gemm-prefill [--quick]`` (needs PyTorch and an sm_90a GPU; --quick: qkv and
gate-up at 200 and 300 tokens).
"""

from __future__ import annotations

import math
import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..cuda.device import device_info
from .claims import UNJUDGED, Data, Judged, Missing, at_least, is_num, rule, times, with_claims
from .figures import GREY, PINNED, RING, need, pyplot, save
from .measure import in_turn
from .result import Bound, Result

NAME = "gemm-prefill"
TITLE = "Prefill-size products: the transposed product against the same kernel unswapped and cuBLAS"
CLAIM = ("For a prefill of a few hundred tokens, the persistent rung's transposed product (the weight's rows on "
         "wgmma's M, the tokens on its N) runs Llama-class projections >= 1.1x the same kernel unswapped where the "
         "rule takes it, for both weight layouts, and the rule >= 0.9x cuBLAS")
PRELOAD = ("torch",)
TECHNIQUE = (
    "A GEMM kernel cuts C into tiles of rows and columns. When C has only a few hundred rows (the tokens of a "
    "prefill) and thousands of columns, 128-row tiles compute padding (300 rows as 512) or too few tiles to fill "
    "the GPU. The transposed product computes C^T = W X^T instead: the weight's rows take the tile's 128-row side "
    "and the tokens its other side, which the tensor cores take in any multiple of 16 (300 tokens as two tiles of "
    "160). The result is written back transposed, so the caller sees x @ w.T as before."
)
VERDICT_FROM = ("gemm-prefill-swap", "gemm-prefill-vs-cublas")

# Llama-3-8B's projections: (name, N, K) of the weight w (N x K)
LAYERS = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate-up", 28672, 4096), ("down", 4096, 14336))
TOKENS = (100, 200, 300, 384, 512, 768)
# --quick (the report's quick run): the two projections the rule treats differently (qkv in 64-row
# blocks of W, gate-up in pairs) at two token counts; each build compiles once (~1.5 s)
QUICK_LAYERS, QUICK_TOKENS = ("qkv", "gate-up"), (200, 300)
LAYOUTS = ("w.T", "row-major")
REPS = 20     # launches a CUDA graph holds
ROUNDS = 5    # alternating rounds of graph replays
REL_TOL = 1e-2
SWAP_TARGET, SWAP_PARTLY = 1.1, 1.0
CUBLAS_TARGET, CUBLAS_PARTLY = 0.9, 0.8


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _graph(torch: Any, fn: Any) -> Any:
    """``fn`` REPS times as one CUDA graph (a warm-up call first, on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(REPS):
            fn()
    return g


def _time_us(torch: Any, fns: dict[str, Any]) -> dict[str, float]:
    """Per launch, median over ROUNDS alternating rounds of each graph's replay."""
    graphs = {k: _graph(torch, f) for k, f in fns.items()}
    times_us: dict[str, list[float]] = {k: [] for k in fns}
    names = list(graphs)
    for r in range(ROUNDS):
        for k in in_turn(names, r):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[k].replay()
            end.record()
            end.synchronize()
            times_us[k].append(start.elapsed_time(end) * 1e3 / REPS)
    return {k: statistics.median(v) for k, v in times_us.items()}


def _product(torch: Any, hg: Any, sms: int, layer: str, n: int, k: int, tokens: int, layout: str) -> dict[str, Any]:
    """One product: the rule's build, the unswapped build and cuBLAS, checked and timed."""
    gen = torch.Generator(device="cuda").manual_seed(n + k + tokens)
    w = (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16)
    x = torch.randn(tokens, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = w.T if layout == "w.T" else w.T.contiguous()
    transposed = layout == "w.T"
    rule_build = hg.default_build(tokens, n, k, sms, transposed)
    plain_build = hg.unswapped_build(tokens, n, k, sms, transposed)
    ref = x.float() @ w.float().T
    errors = {}
    for name, build in (("rule", rule_build), ("unswapped", plain_build)):
        out = torch.full((tokens, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        hg.gemm_hopper(x, b, out=out, stream=torch.cuda.current_stream(), _build=build)
        torch.cuda.synchronize()
        errors[name] = ((out.float() - ref).norm() / ref.norm()).item()
    stream = torch.cuda.current_stream
    fns = {"cuBLAS": (lambda: torch.nn.functional.linear(x, w)) if transposed else (lambda: x @ b),
           "rule": lambda: hg.gemm_hopper(x, b, stream=stream(), _build=rule_build)}
    if rule_build != plain_build:
        fns["unswapped"] = lambda: hg.gemm_hopper(x, b, stream=stream(), _build=plain_build)
    t = _time_us(torch, fns)
    t.setdefault("unswapped", t["rule"])
    return {"layer": layer, "tokens": tokens, "layout": layout, "m": tokens, "n": n, "k": k,
            "build": rule_build.label, "unswapped_build": plain_build.label, "swapped": rule_build.swap_ab,
            "cublas_us": t["cuBLAS"], "rule_us": t["rule"], "unswapped_us": t["unswapped"],
            "vs_cublas": t["cuBLAS"] / t["rule"], "unswapped_vs_cublas": t["cuBLAS"] / t["unswapped"],
            "vs_unswapped": t["unswapped"] / t["rule"], "rel_err": max(errors.values())}


def _compile_all(hg: Any, device_index: int, builds: set) -> None:
    """Every build the run launches, compiled on threads (NVRTC lets the GIL go: on a
    2-core machine two builds took 3.7 s together against 5.7 one after the other), not
    one by one at each product's first launch."""
    from ..kernels._operands import arch_and_sm_count

    arch, _ = arch_and_sm_count(device_index)
    with ThreadPoolExecutor(max(1, min(8, len(builds), os.cpu_count() or 1))) as pool:
        list(pool.map(lambda b: hg.module("persistent", arch, build=b), builds))


def summarize(table: list[dict[str, Any]]) -> dict[str, Any]:
    """The metrics the rules read, from the table: per layout, the geometric means of the
    rule's speed over the unswapped build where it swaps, and of both against cuBLAS."""
    out: dict[str, Any] = {"swap_gain": {}, "swapped_products": {}, "vs_cublas": {}, "unswapped_vs_cublas": {}}
    for layout in LAYOUTS:
        rows = [r for r in table if r["layout"] == layout]
        swapped = [r["vs_unswapped"] for r in rows if r["swapped"]]
        out["swapped_products"][layout] = len(swapped)
        out["swap_gain"][layout] = geomean(swapped) if swapped else None
        out["vs_cublas"][layout] = geomean([r["vs_cublas"] for r in rows]) if rows else None
        out["unswapped_vs_cublas"][layout] = geomean([r["unswapped_vs_cublas"] for r in rows]) if rows else None
    out["vs_cublas_all"] = geomean([r["vs_cublas"] for r in table]) if table else None
    return out


def run(ctx) -> Result:
    dev = ctx.device
    try:
        import torch
    except ImportError as exc:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=[f"skipped: PyTorch is not installed ({exc}); cuBLAS is timed as torch runs it"])
    if not torch.cuda.is_available():
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=["skipped: this PyTorch has no CUDA (a CPU-only build?)"])
    if tuple(dev.facts.compute_capability) != (9, 0):
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {},
                      notes=[f"skipped: the persistent rung needs sm_90a (TMA, wgmma); this GPU is {dev.facts.arch}"])
    from ..kernels import hopper_gemm as hg

    torch.cuda.set_device(dev.index)
    sms = dev.facts.sm_count
    tokens = QUICK_TOKENS if ctx.quick else TOKENS
    layers = [x for x in LAYERS if x[0] in QUICK_LAYERS] if ctx.quick else list(LAYERS)
    todo = [(layer, n, k, m, layout) for layout in LAYOUTS for layer, n, k in layers for m in tokens]
    ctx.progress(0.0, "compiling the builds")
    _compile_all(hg, dev.index, {hg.as_laid_out(b, layout == "w.T") for _, n, k, m, layout in todo
                                 for b in (hg.default_build(m, n, k, sms, layout == "w.T"),
                                           hg.unswapped_build(m, n, k, sms, layout == "w.T"))})
    table = []
    with torch.cuda.stream(torch.cuda.Stream()):
        for i, (layer, n, k, m, layout) in enumerate(todo):
            ctx.progress(i / len(todo), f"{layer} at {m} tokens, {layout}")
            table.append(_product(torch, hg, sms, layer, n, k, m, layout))
        torch.cuda.synchronize()
    wrong = [f"{r['layer']} at {r['tokens']} tokens ({r['layout']}): relative error {r['rel_err']:.2e} against "
             f"float32 (tolerance {REL_TOL:g})" for r in table if not r["rel_err"] < REL_TOL]
    metrics = summarize(table)
    params = {"layers": [list(x) for x in layers], "tokens": list(tokens), "layouts": list(LAYOUTS),
              "dtype": "bfloat16", "reps": REPS, "rounds": ROUNDS}
    notes = wrong + [
        "Times: each product as a CUDA graph of {} launches, replayed in {} alternating rounds; the median per "
        "launch. cuBLAS: torch.nn.functional.linear(x, w) for w.T, x @ b for a row-major b.".format(REPS, ROUNDS),
        "rule: default_build (the transposed product where it was measured faster, 128 x 192 tiles where their "
        "waves end sooner); unswapped: unswapped_build, the same rule without either (the same build where the "
        "rule takes neither).",
    ]
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict="failed" if wrong else UNJUDGED, device=device_info(dev),
        params=params, metrics=metrics,
        bound=Bound("cuBLAS on the same products (this run), sum of one launch each",
                    sum(r["cublas_us"] for r in table), "us"),
        ratio=metrics["vs_cublas_all"], table=table, notes=notes,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
def _per_layout(d: Data, key: str) -> dict[str, float]:
    values = {k: v for k, v in d.m(key).items() if is_num(v)}
    if not values:
        raise Missing(f"metrics.{key}")
    return values


@rule(NAME, "gemm-prefill-swap",
      f"for a prefill of a few hundred tokens, the transposed product runs ≥ {SWAP_TARGET}× the same kernel "
      "unswapped where the rule takes it (Llama-3-8B's projections, both weight layouts)")
def _swap_rule(d: Data) -> Judged:
    gains = _per_layout(d, "swap_gain")
    counts = d.m("swapped_products")
    worst = min(gains, key=gains.__getitem__)
    return Judged(
        measured="; ".join(f"{k}: {times(v)} over {counts.get(k)} products" for k, v in gains.items()),
        bound=f"the same kernel unswapped on the same products, this run (worst layout: {worst})",
        ratio=gains[worst], verdict=at_least(gains[worst], SWAP_TARGET, SWAP_PARTLY),
        target=f"supported ≥ {SWAP_TARGET}× in each layout (geometric mean), partly ≥ {SWAP_PARTLY}×")


@rule(NAME, "gemm-prefill-vs-cublas",
      f"fullpipe's rule runs prefill-size products ≥ {CUBLAS_TARGET}× cuBLAS (geometric mean over Llama-3-8B's "
      "projections at a few hundred tokens, both weight layouts)")
def _cublas_rule(d: Data) -> Judged:
    overall = float(d.m("vs_cublas_all"))
    per = _per_layout(d, "vs_cublas")
    before = _per_layout(d, "unswapped_vs_cublas")
    return Judged(
        measured=f"{times(overall)} cuBLAS; " + "; ".join(
            f"{k}: {times(v)} (unswapped {times(before[k])})" for k, v in per.items()),
        bound="cuBLAS (torch) on the same products, this run", ratio=overall,
        verdict=at_least(overall, CUBLAS_TARGET, CUBLAS_PARTLY),
        target=f"supported ≥ {CUBLAS_TARGET}× (geometric mean), partly ≥ {CUBLAS_PARTLY}×")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """Per layout, each product's speed against cuBLAS: the rule's and the unswapped build's."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("vs_cublas")) and is_num(x.get("unswapped_vs_cublas"))]
    need(rows, "table.vs_cublas")
    layouts = [k for k in LAYOUTS if any(x["layout"] == k for x in rows)]
    fig, axes = plt.subplots(1, len(layouts), figsize=(11, 0.22 * max(
        sum(x["layout"] == k for x in rows) for k in layouts) + 1.8), squeeze=False, sharex=True)
    for ax, layout in zip(axes[0], layouts):
        mine = [x for x in rows if x["layout"] == layout]
        ys = range(len(mine))
        ax.barh([y + 0.2 for y in ys], [x["unswapped_vs_cublas"] for x in mine], height=0.4, color=GREY,
                label="unswapped")
        ax.barh([y - 0.2 for y in ys], [x["vs_cublas"] for x in mine], height=0.4,
                color=[RING if x["swapped"] else PINNED for x in mine], label="the rule (green: transposed)")
        ax.axvline(1.0, color="#333333", lw=1.0, ls="--", label="cuBLAS")
        ax.set_yticks(list(ys), [f"{x['layer']} · {x['tokens']}" for x in mine], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"b = {layout}" if layout == "w.T" else "b row-major (K x N)", fontsize=9)
        ax.set_xlabel("× cuBLAS (higher is faster)")
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=3, fontsize=7, frameon=False)
    fig.suptitle("Llama-3-8B projections at a few hundred tokens, bf16", fontsize=10, x=0.02, ha="left")
    return {"the transposed product against cuBLAS": save(fig, out / f"{NAME}.png")}
