"""p183: the skinny kernel's split with and without the co-residency rule (skinny_gemm.split_k's co_resident:
fewer runs where a build's clusters cannot all run at once), against cuBLAS, bf16, weights from HBM (a CUDA graph
cycling over copies of B larger than L2). First the driver's max active clusters per build and cluster size;
results checked against float32."""
import functools
import statistics
import torch
from fullpipe.kernels import skinny_gemm as sk
from fullpipe.kernels._operands import arch_and_sm_count

dev = torch.device("cuda")
KN = [(2048, 2048), (5632, 2048), (2048, 6144), (4096, 4096), (4096, 1024), (4096, 11008), (11008, 4096)]
MS = (1, 8, 32, 64, 96, 128)
arch, sms = arch_and_sm_count(0)
print("max active clusters (rows, tile_n, stages): runs 2..8")
for rows in sk.ROW_BUILDS:
    for tn, st in ((64, 8), (128, 4)):
        print(f"  {rows:3d} n{tn}s{st} smem {sk.shared_mem_bytes(rows, tn, st) // 1024:3d} KiB:",
              [sk.max_active_clusters(0, arch, False, rows, tn, st, r) for r in range(2, 9)], flush=True)


def graph_ms(fns, n):
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


print(f"{'M x K x N':>16} {'build':>6} {'runs old/new':>12} {'cuBLAS us':>9} {'old':>6} {'new':>6}   (x cuBLAS)")
bad = 0
for k, n in KN:
    for m in MS:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        copies = max(1, -(-160 * 2**20 // (k * n * 2)))
        bs = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
        c = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
        ref = a.float() @ bs[0].float()
        old = sk.plan(m, n, k, "bfloat16", sms=sms)
        new = sk.plan(m, n, k, "bfloat16", sms=sms, co_resident=functools.partial(sk.max_active_clusters, 0, arch, False))
        for per in (old.slices_per_run, None):
            c.fill_(float("nan")); sk.gemm_skinny(a, bs[0], out=c, _slices_per_run=per); torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                bad += 1
                print("WRONG", m, k, n, per, err, flush=True)
        t_c = min(graph_ms([(lambda b=b: torch.matmul(a, b, out=c)) for b in bs], 4 * copies) for _ in range(2))
        t = [min(graph_ms([(lambda b=b, per=per: sk.gemm_skinny(a, b, out=c, _slices_per_run=per)) for b in bs],
                          4 * copies) for _ in range(2)) for per in (old.slices_per_run, None)]
        print(f"{f'{m}x{k}x{n}':>16} {f'n{new.tile_n}s{new.stages}':>6} {f'{old.runs}/{new.runs}':>12} "
              f"{t_c * 1e3:>9.1f} {t_c / t[0]:>6.2f} {t_c / t[1]:>6.2f}{'   *' if old.runs != new.runs else ''}",
              flush=True)
print("wrong:", bad)
