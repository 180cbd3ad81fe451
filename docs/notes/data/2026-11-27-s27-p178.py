"""p178: the skinny GEMM (M <= 64) against cuBLAS and the persistent rung, bf16, GPU time by CUDA-graph replay:
'warm' replays one product (B stays in L2 when it fits), 'cold' cycles over copies of B larger than L2 together
(a decode step's weights come from HBM). Every result checked against float32 first; then splits of K."""
import statistics
import sys
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm as sk

dev = torch.device("cuda")
MS = [1, 8, 16, 32, 64, 96, 128]
NK = [(4096, 4096), (6144, 4096), (11008, 4096), (4096, 11008), (32000, 4096), (1024, 4096), (2048, 2048)]
if len(sys.argv) > 1 and sys.argv[1] == "quick":
    MS, NK = [8, 64, 128], [(4096, 4096), (11008, 4096), (32000, 4096)]


def graph_ms(fns, n):
    """Median time per launch of a graph of n launches cycling over fns."""
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n):
            fns[i % len(fns)]()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts)


def run_for(m, n, k, skinny_ok):
    out = {}
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    copies = max(1, -(-160 * 2**20 // (k * n * 2)))  # > 160 MiB of B in all: beyond the 50 MiB L2
    bs = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    c = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
    kinds = {"cuBLAS": lambda b: (lambda: torch.matmul(a, b, out=c)),
             "persistent": lambda b: (lambda: hg.gemm_hopper(a, b, out=c, variant="persistent"))}
    if skinny_ok:
        kinds["skinny"] = lambda b: (lambda: sk.gemm_skinny(a, b, out=c))
    ref = a.float() @ bs[0].float()
    bad = 0
    for name, mk in kinds.items():
        c.fill_(float("nan")); mk(bs[0])(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print(f"WRONG {name} {m}x{n}x{k}: {err}", flush=True)
    for name, mk in kinds.items():
        warm = min(graph_ms([mk(bs[0])], 40) for _ in range(2))
        cold = min(graph_ms([mk(b) for b in bs], 4 * copies) for _ in range(2))
        out[name] = (warm, cold)
    return out, bad


print(f"{'M x N x K':>16} | {'warm: cuBLAS':>12} {'persist':>8} {'skinny':>8} {'p/c':>5} {'s/c':>5} | "
      f"{'cold: cuBLAS':>12} {'persist':>8} {'skinny':>8} {'p/c':>5} {'s/c':>5} | GB/s skinny cold")
bad = 0
for n, k in NK:
    for m in MS:
        r, b = run_for(m, n, k, m <= sk.MAX_ROWS)
        bad += b
        w = {x: v[0] * 1e3 for x, v in r.items()}
        cd = {x: v[1] * 1e3 for x, v in r.items()}
        sw = w.get("skinny", float("nan")); sc = cd.get("skinny", float("nan"))
        gbs = k * n * 2 / (sc * 1e-6) / 1e9 if m <= sk.MAX_ROWS else float("nan")
        print(f"{f'{m}x{n}x{k}':>16} | {w['cuBLAS']:>10.1f}us {w['persistent']:>8.1f} {sw:>8.1f} "
              f"{w['cuBLAS'] / w['persistent']:>5.2f} {w['cuBLAS'] / sw:>5.2f} | {cd['cuBLAS']:>10.1f}us "
              f"{cd['persistent']:>8.1f} {sc:>8.1f} {cd['cuBLAS'] / cd['persistent']:>5.2f} {cd['cuBLAS'] / sc:>5.2f} | "
              f"{gbs:>6.0f}", flush=True)
print("wrong results:", bad)

# Splits of K at 8 rows: slices per run against the default's
print("\nsplit sweep (cold, us): M x N x K: default runs -> times in 1, 2, 3, 4, 6, 8 runs")
for m, n, k in [(8, 4096, 4096), (8, 1024, 4096), (32, 4096, 4096), (64, 4096, 4096), (64, 4096, 11008),
                (128, 4096, 4096), (128, 1024, 4096)]:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    copies = max(1, -(-160 * 2**20 // (k * n * 2)))
    bs = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    c = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
    p = sk.plan(m, n, k, "bfloat16", sms=torch.cuda.get_device_properties(0).multi_processor_count)
    row = []
    slices = -(-k // 64)
    for per in [-(-slices // r) for r in (1, 2, 3, 4, 6, 8)]:
        t = min(graph_ms([(lambda b=b, per=per: sk.gemm_skinny(a, b, out=c, _slices_per_run=per)) for b in bs],
                         4 * copies) for _ in range(2))
        row.append(f"{t * 1e3:.1f}")
    print(f"{f'{m}x{n}x{k}':>16}: default {p.slices_per_run} ({p.runs} runs) -> " + " ".join(row), flush=True)
