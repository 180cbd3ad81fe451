"""fullpipe bench cluster: share a tile through distributed shared memory.

Clusters of 4 blocks side by side along N all need the same A slice at every K
step. cluster_gemm_own_a: every block copies the whole slice from global memory
(cp.async); cluster_gemm_shared_a: every block loads one quarter of it (plain
16-byte loads through registers) and gathers the other three quarters from its
cluster peers' shared memory (cluster.map_shared_rank), so A is read from global
memory once per cluster. Same grid, same cluster launch, same B loads (cp.async),
same math and ring depth: only the source of A differs (and what that costs: one
split cluster barrier per K slice). Bound: cuBLAS fp32 (TF32 off) at the same
size, same stream.

The global loads are measured, not only counted: when Nsight Compute (``ncu``) is
installed, the experiment profiles both kernels once (``--clock-control none``,
at most 60 s; ``FULLPIPE_NO_NCU=1`` turns it off) and reports the A-load
instructions of each (own_a: the LDGSTS beyond B's; shared_a: its LDG) and the L2
bytes read by the SMs, next to what the kernels' construction predicts.
``scripts/ncu-kernels`` prints the same table.
"""

from __future__ import annotations

from pathlib import Path
import os
import re
import subprocess
import sys
import time
from typing import Any

from . import Bound, Context, Result
from .gemm import device_info, rel_error, tflops, torch_on, true_fp32
from ..cuda.timing import median, spread, time_on_stream
from .ncu import find_ncu, ncu_turned_off, parse_ncu_csv
from .claims import UNJUDGED, Data, Judged, is_num, rule, times, with_claims
from .figures import BOUND, GREY, PINNED, WIDE, label_bars, need, pyplot, save

NAME = "cluster"
TITLE = "Thread-block clusters: one global load of a shared tile per cluster"
CLAIM = (
    "With 4-block clusters, the A tile every block needs is read from global memory once per cluster "
    "(through distributed shared memory) instead of once per block, and the GEMM is not slower for it"
)
PRELOAD = ("torch",)  # imported ahead while the previous experiment runs (report/worker.py)
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "On Hopper the blocks of a thread-block cluster can read each other's shared memory (distributed "
    "shared memory). Blocks that need the same tile can load it from global memory once per cluster and "
    "share it instead of each loading it."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): its canonical one.
VERDICT_FROM = ("clusters-remove-duplicate-loads",)

# Metrics asked of ncu (those this ncu does not know are left out, see ncu_measure).
NCU_METRICS = (
    "smsp__inst_executed_op_ldgsts.sum",  # cp.async instructions (warp level)
    "smsp__inst_executed_op_global_ld.sum",  # LDG instructions (shared_a's A quarter)
    "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",  # 32-byte sectors the SMs read from L2
    "lts__t_bytes.sum",
    "dram__bytes_read.sum",
    "gpu__time_duration.sum",
)
# Distributed shared memory metrics differ between ncu versions: any metric whose
# name matches this is added (found with `ncu --query-metrics`).
DSMEM_RE = re.compile(r"dsmem|distributed|dshared|shared_remote|remote_shared", re.I)
DSMEM_WANTED = ("sm__sass_inst_executed_op_dshared_ld", "l1tex__m_xbar2l1tex_read_bytes_mem_dshared")
NCU_TIMEOUT_S = 60.0


def _available_metrics(ncu: str, timeout_s: float) -> set[str] | None:
    """Base names of the metrics this ncu knows for this GPU (None if it cannot say)."""
    try:
        p = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = set(re.findall(r"^\s*([a-z0-9_]+__[a-z0-9_]+)\b", p.stdout, re.M))
    return names or None




LDGSTS = "smsp__inst_executed_op_ldgsts.sum"
LDG = "smsp__inst_executed_op_global_ld.sum"


def expected_counts(size: int) -> dict[str, dict[str, Any]]:
    """What the kernels' construction predicts at size^3 (size a multiple of 256).

    ``A_op`` is the instruction a kernel loads A with (own_a: LDGSTS, shared_a: LDG),
    ``A_loads`` the number of them (``ldgsts_A`` + ``ldg_A``); ``ldgsts`` and ``ldg``
    are the totals ncu's instruction counters should show."""
    from ..kernels import cluster as cl

    gx, gy = cl.grid_for(size, size)
    blocks = gx * gy
    out = {}
    for share in (False, True):
        per_block = cl.loads_per_block(size, share)
        op = cl.A_LOAD_OP[share]
        out[cl.KERNELS[share]] = {
            "blocks": blocks,
            "clusters": blocks // cl.CLUSTER,
            "A_op": op,
            "A_loads": blocks * per_block["A"],
            "ldgsts_A": blocks * per_block["A"] if op == "LDGSTS" else 0,
            "ldg_A": blocks * per_block["A"] if op == "LDG" else 0,
            "ldgsts_B": blocks * per_block["B"],
            "ldgsts": blocks * per_block["LDGSTS"],
            "ldg": blocks * per_block["LDG"],
            "A_bytes": cl.a_slice_loads(size, size, size, share),
            "B_bytes": blocks * cl.TILE * size * 4,
        }
    return out


def measured_a_loads(metrics: dict[str, float], expected: dict[str, Any]) -> float | None:
    """A-load instructions of one kernel from its ncu counters, by the instruction its
    construction loads A with: own_a's LDGSTS minus the B ones (B is copied alike by
    both kernels), shared_a's LDG (its only global loads). None if ncu lacks the counter."""
    if expected["A_op"] == "LDGSTS":
        v = metrics.get(LDGSTS)
        return None if v is None else v - expected["ldgsts_B"]
    return metrics.get(LDG)


def ncu_measure(size: int = 1024, *, timeout_s: float = NCU_TIMEOUT_S, ncu: str | None = None) -> dict[str, Any]:
    """Profile both cluster kernels once at size^3 with ncu; never raises.

    Returns ``{"size", "per_kernel": {kernel: {metric: value}}, "expected", "derived",
    "dsmem_metrics", "seconds", "error"}``; ``error`` is None when it worked.
    """
    t0 = time.perf_counter()
    res: dict[str, Any] = {"size": size, "per_kernel": {}, "expected": expected_counts(size), "derived": {},
                           "dsmem_metrics": [], "seconds": None, "error": None, "command": None}
    ncu = ncu or find_ncu()
    if ncu is None:
        res["error"] = "ncu not found (install Nsight Compute or set NCU=/path/to/ncu)"
        return res
    known = _available_metrics(ncu, min(20.0, timeout_s / 2))
    metrics = [m for m in NCU_METRICS if known is None or m.rsplit(".", 1)[0] in known]
    if known:
        # ncu 2025+ has ~90 distributed-shared-memory counters: keep the two that
        # say how much went through DSMEM (instructions, bytes over the SM-to-SM network).
        res["dsmem_available"] = sum(1 for m in known if DSMEM_RE.search(m))
        res["dsmem_metrics"] = [m + ".sum" for m in DSMEM_WANTED if m in known]
        metrics += res["dsmem_metrics"]
    left = max(5.0, timeout_s - (time.perf_counter() - t0))
    cmd = [ncu, "--clock-control", "none", "--print-units", "base", "--csv", "--metrics", ",".join(metrics),
           "--kernel-name", "regex:cluster_gemm", sys.executable, "-W", "ignore::RuntimeWarning", "-m",
           "fullpipe.kernels.cluster", "--selftest",
           "--size", str(size)]
    res["command"] = " ".join(cmd)
    import fullpipe

    env = dict(os.environ)  # the profiled process imports this very fullpipe
    src = os.path.dirname(os.path.dirname(os.path.abspath(fullpipe.__file__)))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=left, env=env)
    except subprocess.TimeoutExpired:
        res["error"] = f"ncu did not finish within {timeout_s:.0f} s"
        res["seconds"] = time.perf_counter() - t0
        return res
    except OSError as exc:
        res["error"] = f"ncu could not run: {exc}"
        return res
    res["seconds"] = time.perf_counter() - t0
    per = parse_ncu_csv(p.stdout)
    res["per_kernel"] = per
    if not per:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        res["error"] = f"ncu exit {p.returncode}, no metric rows: " + " | ".join(tail)
        return res
    if "BAD" in p.stdout:
        res["error"] = "a kernel gave a wrong result under ncu"
    for kern, m in per.items():
        exp = res["expected"].get(kern)
        if not exp:
            continue
        der = {}
        # A-load instructions (LDGSTS beyond B's in own_a, LDG in shared_a): an instruction
        # count, unlike L2 bytes, does not depend on what else is cached.
        a_loads = measured_a_loads(m, exp)
        if a_loads is not None:
            der.update({"A_loads": a_loads, "A_loads_per_cluster": a_loads / exp["clusters"],
                        "A_loads_per_block": a_loads / exp["blocks"]})
        # A bytes the SMs read from L2 = all L2 reads from the SMs - B (identical in both kernels).
        sectors = m.get("lts__t_sectors_srcunit_tex_op_read.sum")
        if sectors is not None:
            a_bytes = sectors * 32 - exp["B_bytes"]
            der.update({"A_bytes_from_L2": a_bytes, "A_bytes_per_cluster": a_bytes / exp["clusters"],
                        "A_bytes_per_block": a_bytes / exp["blocks"]})
        if der:
            res["derived"][kern] = der
    return res


def ncu_table(res: dict[str, Any]) -> list[dict[str, Any]]:
    """One table row per kernel (and one ratio row) from :func:`ncu_measure`."""
    rows = []
    own, shared = "cluster_gemm_own_a", "cluster_gemm_shared_a"
    for kern in (own, shared):
        m, exp, der = res["per_kernel"].get(kern, {}), res["expected"][kern], res["derived"].get(kern, {})
        row = {"kernel": kern, "measurement": f"ncu {res['size']}^3",
               "A loaded by": exp["A_op"],
               "LDGSTS (ncu)": m.get(LDGSTS),
               "LDGSTS expected": exp["ldgsts"],
               "LDG (ncu)": m.get(LDG),
               "LDG expected": exp["ldg"],
               "A-load instructions (ncu)": der.get("A_loads"),
               "A-load instructions expected": exp["A_loads"],
               "A-load instructions per cluster (ncu)": der.get("A_loads_per_cluster"),
               "L2 read MiB from SMs (ncu)": (m["lts__t_sectors_srcunit_tex_op_read.sum"] * 32 / 2**20
                                              if "lts__t_sectors_srcunit_tex_op_read.sum" in m else None),
               "A MiB from global (ncu: L2 reads - B)": (der["A_bytes_from_L2"] / 2**20
                                                         if "A_bytes_from_L2" in der else None),
               "A MiB by construction": exp["A_bytes"] / 2**20,
               "A KiB per cluster (ncu)": (der["A_bytes_per_cluster"] / 2**10 if "A_bytes_per_cluster" in der
                                           else None),
               "A KiB per block (ncu)": (der["A_bytes_per_block"] / 2**10 if "A_bytes_per_block" in der else None),
               "DRAM MiB read (ncu)": (m["dram__bytes_read.sum"] / 2**20 if "dram__bytes_read.sum" in m else None),
               "ms (ncu)": (m["gpu__time_duration.sum"] * 1e-6 if "gpu__time_duration.sum" in m else None)}
        for d in res.get("dsmem_metrics") or []:
            row[d] = m.get(d)
        rows.append(row)
    ratio = {"kernel": "shared_a / own_a", "measurement": f"ncu {res['size']}^3"}
    for col in rows[0]:
        a, b = rows[0][col], rows[1][col]
        if col not in ("kernel", "measurement") and isinstance(a, (int, float)) and isinstance(b, (int, float)) and a:
            ratio[col] = b / a
    rows.append(ratio)
    return rows


def ncu_metrics(res: dict[str, Any]) -> dict[str, Any]:
    """The experiment's ncu metrics from :func:`ncu_measure`'s result.

    ``ncu_a_loads_own_over_shared``: A-load instructions of own_a (its LDGSTS beyond
    B's) over those of shared_a (its LDG), measured; the construction says
    ``ncu_a_loads_expected_own_over_shared`` (= the cluster size). Then the
    per-cluster / per-block counts, all LDGSTS shared/own, the A bytes the SMs read
    from L2 (approximate: L2 reads minus the expected B bytes), and
    ``ncu_loads_as_constructed``: every LDGSTS and LDG count equals the construction."""
    from ..kernels import cluster as cl

    out: dict[str, Any] = {"ncu_size": res["size"]}
    per, exp, der = res["per_kernel"], res["expected"], res["derived"]
    own_k, sh_k = cl.KERNELS[False], cl.KERNELS[True]
    po, ps = per.get(own_k, {}), per.get(sh_k, {})
    if po.get(LDGSTS) and ps.get(LDGSTS):
        out["ncu_ldgsts_shared_over_own"] = ps[LDGSTS] / po[LDGSTS]
        out["ncu_ldgsts_expected_shared_over_own"] = exp[sh_k]["ldgsts"] / exp[own_k]["ldgsts"]
    do, ds = der.get(own_k, {}), der.get(sh_k, {})
    if "A_loads" in do and ds.get("A_loads", 0) > 0:
        out["ncu_a_loads_own_over_shared"] = do["A_loads"] / ds["A_loads"]
        out["ncu_a_loads_expected_own_over_shared"] = exp[own_k]["A_loads"] / exp[sh_k]["A_loads"]
        out["ncu_a_loads_per_cluster_shared"] = ds["A_loads_per_cluster"]
        out["ncu_a_loads_per_block_own"] = do["A_loads_per_block"]
    if "A_bytes_from_L2" in do and ds.get("A_bytes_from_L2", 0) > 0:
        out["ncu_a_bytes_own_over_shared"] = do["A_bytes_from_L2"] / ds["A_bytes_from_L2"]
        out["ncu_a_bytes_per_cluster_own"] = do["A_bytes_per_cluster"]
        out["ncu_a_bytes_per_cluster_shared"] = ds["A_bytes_per_cluster"]
        out["ncu_a_bytes_per_block_own"] = do["A_bytes_per_block"]
    counted = [(per.get(k, {}).get(metric), exp[k][key]) for k in (own_k, sh_k)
               for metric, key in ((LDGSTS, "ldgsts"), (LDG, "ldg"))]
    if all(v is not None for v, _ in counted):
        out["ncu_loads_as_constructed"] = all(v == e for v, e in counted)
    return out


def run(ctx: Context) -> Result:
    import torch

    from ..cuda.streams import create_stream
    from ..kernels import cluster as cl

    dev = ctx.device
    if not dev.facts.cluster_launch:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {}, notes=["this GPU has no cluster launch (needs sm_90)"])
    stream = create_stream(dev)
    n = 2048 if ctx.quick else 4096
    repeat = 5 if ctx.quick else 10
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(n, n, device="cuda", generator=gen)
    b = torch.randn(n, n, device="cuda", generator=gen)
    out = torch.empty(n, n, device="cuda")
    torch.cuda.synchronize()
    rows: list[dict[str, Any]] = []
    metrics: dict[str, Any] = {}
    notes: list[str] = []
    with true_fp32(), torch_on(stream):
        ref = a @ b
        ts = time_on_stream(lambda: torch.matmul(a, b), stream, repeat=repeat)
    cublas = tflops(n, n, n, median(ts))
    rows.append({"kernel": "cuBLAS fp32", "A bytes from global": None, "ms": median(ts), "spread": spread(ts),
                 "TFLOP/s": cublas, "ratio vs cuBLAS": 1.0, "rel_err": None})
    ctx.progress(0.1, "cuBLAS")
    failed = []
    ms: dict[tuple[bool, int], float] = {}
    configs = [(cl.TILE_K, cl.STAGES), (16, cl.STAGES)]  # the default (verdict) and T_K = 16 (more barriers)
    for i, (tk, st) in enumerate(configs):
        for share in (False, True):
            label = cl.KERNELS[share] + ("" if (tk, st) == configs[0] else f" (T_K={tk})")
            with torch_on(stream):
                out.fill_(float("nan"))
            cl.cluster_gemm(a, b, share_a=share, stream=stream, out=out, tile_k=tk, stages=st)
            stream.sync()
            err = rel_error(out, ref)
            a_bytes = cl.a_slice_loads(n, n, n, share)
            if not err < 1e-4:
                failed.append(f"{label}: relative error {err:.3e} vs cuBLAS fp32")
                rows.append({"kernel": label, "A bytes from global": a_bytes, "ms": None, "spread": None,
                             "TFLOP/s": None, "ratio vs cuBLAS": None, "rel_err": err})
                continue
            ts = time_on_stream(lambda: cl.cluster_gemm(a, b, share_a=share, stream=stream, out=out, tile_k=tk,
                                                        stages=st), stream, repeat=repeat)
            ms[(share, tk)] = median(ts)
            tf = tflops(n, n, n, ms[(share, tk)])
            rows.append({"kernel": label, "A bytes from global": a_bytes, "ms": ms[(share, tk)], "spread": spread(ts),
                         "TFLOP/s": tf, "ratio vs cuBLAS": tf / cublas, "rel_err": err})
            if (tk, st) == configs[0]:
                metrics[f"{cl.KERNELS[share]}_ms"] = ms[(share, tk)]
                metrics[f"{cl.KERNELS[share]}_a_bytes"] = a_bytes
            else:
                metrics[f"{cl.KERNELS[share]}_tk{tk}_ms"] = ms[(share, tk)]
            ctx.progress(0.1 + 0.15 * (2 * i + share + 1), label)

    own_bytes, shared_bytes = cl.a_slice_loads(n, n, n, False), cl.a_slice_loads(n, n, n, True)
    metrics["a_bytes_ratio_own_over_shared"] = own_bytes / shared_bytes
    notes.append(
        f"A slices copied from global memory: {own_bytes / 2**20:.0f} MiB (every block the whole slice) vs "
        f"{shared_bytes / 2**20:.0f} MiB (every block one quarter, gathered through DSMEM) = "
        f"{own_bytes / shared_bytes:.0f}x fewer, by the kernels' construction"
    )

    # ---- ncu: measured global loads -------------------------------------------------
    ncu_res = None
    if ncu_turned_off():
        notes.append("ncu skipped (FULLPIPE_NO_NCU=1): global loads by construction only")
    else:
        ctx.progress(0.75, "ncu")
        ncu_res = ncu_measure(min(n, 2048))
        if ncu_res["error"] and not ncu_res["per_kernel"]:
            notes.append(f"ncu measurement not available: {ncu_res['error']}")
            ncu_res = None
        else:
            if ncu_res["error"]:
                notes.append(f"ncu: {ncu_res['error']}")
            rows.extend(ncu_table(ncu_res))
            metrics.update(ncu_metrics(ncu_res))
            if metrics.get("ncu_loads_as_constructed") is False:
                notes.append("ncu: the LDGSTS / LDG counts differ from the kernels' construction (see the ncu rows)")
            if ncu_res["dsmem_metrics"]:
                per = ncu_res["per_kernel"]
                notes.append("DSMEM traffic (ncu): " + "; ".join(
                    f"{d}: own_a {per.get('cluster_gemm_own_a', {}).get(d)}, shared_a "
                    f"{per.get('cluster_gemm_shared_a', {}).get(d)}" for d in ncu_res["dsmem_metrics"]))
            else:
                notes.append("this ncu lists no distributed-shared-memory metric; the DSMEM reads show as generic "
                             "loads (LD) in the SASS of cluster_gemm_shared_a")

    ratio = None
    if failed:
        verdict = "failed"
        notes.extend(failed)
    else:
        ratio = ms[(False, cl.TILE_K)] / ms[(True, cl.TILE_K)]  # > 1: sharing is faster
        metrics["time_own_over_shared"] = ratio
        notes.append(f"time own_a / shared_a = {ratio:.3f} at T_K={cl.TILE_K} (> 1 means sharing through DSMEM "
                     "is faster)" + (f"; at T_K=16: {ms[(False, 16)] / ms[(True, 16)]:.3f}" if (True, 16) in ms
                                     and (False, 16) in ms else ""))
        verdict = UNJUDGED  # the claim's verdict, judged by the rule at the end
        if ratio < 1.0:
            notes.append("why sharing is not free: the 4 blocks of a cluster read the same A lines at about the same "
                         "time, so most duplicate loads hit L2 anyway; in exchange every K slice costs a cluster "
                         "barrier (release arrive = MEMBAR.ALL.GPU + UCGABAR_ARV, acquire wait = UCGABAR_WAIT + "
                         "CCTL.IVALL) and a DSMEM gather (remote LD.128 + STS.128) into the local working copy, "
                         "and the quarter of A goes through registers (LDG.128 + STS.128) instead of cp.async")
    return with_claims(Result(NAME, CLAIM, verdict, device_info(dev),
                              {"size": n, "cluster": cl.CLUSTER, "tile": cl.TILE, "tile_k": cl.TILE_K,
                               "stages": cl.STAGES, "repeat": repeat,
                               "ncu_size": ncu_res["size"] if ncu_res else None},
                              metrics, bound=Bound(f"cuBLAS fp32 {n}^3", cublas, "TFLOP/s"), ratio=ratio, table=rows,
                              notes=notes),
                       verdict_from=VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
@rule(NAME, "clusters-remove-duplicate-loads")
def _cluster(d: Data) -> Judged:
    size = int(d.p("cluster"))
    t = float(d.m("time_own_over_shared"))
    # Measured A-load instructions own_a / shared_a (ncu): "ncu_a_loads_own_over_shared"
    # since shared_a loads its quarter with LDG; results recorded when both kernels loaded
    # A with cp.async call it "ncu_a_ldgsts_own_over_shared". Older results only have the
    # A bytes attributed from L2 reads.
    instr = d.m_or(None, "ncu_a_loads_own_over_shared")
    if instr is None:
        instr = d.m_or(None, "ncu_a_ldgsts_own_over_shared")
    l2_bytes = d.m_or(None, "ncu_a_bytes_own_over_shared")
    measured_cut = instr if instr is not None else l2_bytes
    cut = float(measured_cut) if measured_cut is not None else float(d.m("a_bytes_ratio_own_over_shared"))
    own = d.m_or(None, "cluster_gemm_own_a_a_bytes")
    shared = d.m_or(None, "cluster_gemm_shared_a_a_bytes")
    removed = cut >= 0.9 * size
    expected = d.m_or(None, "ncu_a_loads_expected_own_over_shared")
    if instr is not None:
        src = (f"{cut:.2f}× fewer A-load instructions (ncu, {d.m_or('?', 'ncu_size')}³"
               + (f"; {times(expected)} by construction)" if expected is not None else ")"))
    elif l2_bytes is not None:
        src = f"A from L2 {cut:.2f}× fewer bytes (ncu, {d.m_or('?', 'ncu_size')}³)"
    else:
        mib = f"A from global {own / 2**20:.0f} → {shared / 2**20:.0f} MiB, " if own and shared else ""
        src = f"{mib}{cut:.1f}× fewer loads (by the kernels' construction, not measured)"
    speed = f"{times(t)} faster" if t >= 1 else f"{times(1 / t)} slower"
    return Judged(measured=f"{src}; sharing through DSMEM is {speed}",
                  bound=f"cluster of {size}: at most {size}× fewer A loads; time of the own-A kernel "
                        f"{d.m_or(float('nan'), 'cluster_gemm_own_a_ms'):.2f} ms",
                  ratio=cut / size,
                  verdict="supported" if (removed and t >= 0.95) else "partly supported" if removed else "not supported",
                  target="supported: A loads cut ≥ 0.9 × the cluster size and not slower (≥ 0.95×); partly: cut but slower")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("TFLOP/s"))]
    need(rows, "table TFLOP/s")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    kern = [x for x in rows if not str(x["kernel"]).startswith("cuBLAS")]
    cub = next((x for x in rows if str(x["kernel"]).startswith("cuBLAS")), None)
    label_bars(a1, a1.bar([x["kernel"] for x in kern], [x["TFLOP/s"] for x in kern], color=PINNED), "{:.1f}", False)
    if cub:
        a1.axhline(cub["TFLOP/s"], color=BOUND, ls="--", lw=1.2)
        a1.annotate(f"bound: {cub['kernel']} {cub['TFLOP/s']:.1f} TFLOP/s", (1.0, cub["TFLOP/s"]),
                    xycoords=("axes fraction", "data"), xytext=(-2, -3), textcoords="offset points",
                    ha="right", va="top", fontsize=8)
    a1.set_ylabel("TFLOP/s")
    a1.set_title("time: GEMM with and without sharing A in the cluster")
    loads = [x for x in kern if is_num(x.get("A bytes from global"))]
    if loads:
        label_bars(a2, a2.bar([x["kernel"] for x in loads], [x["A bytes from global"] / 2**20 for x in loads],
                               color=GREY), "{:.0f} MiB", False)
        a2.set_ylabel("A read from global memory (MiB, by construction)")
        a2.set_title("duplicate loads of A")
    else:
        a2.set_visible(False)
    for ax in (a1, a2):
        ax.grid(axis="y", alpha=0.3)
    return {"cluster GEMM: loads saved vs time": save(fig, out / f"{NAME}.png")}
