"""p342: why an eager loop of stream-K products runs at 3-5x its CUDA-graph time (p340/p341: 200 x 1008 x 2048 10 us
in a graph, ~50 us a call eagerly, device-bound). Eager loops of 400 calls timed by events (device-bound: host is
~20 us a call), in variants: the rule; no programmatic dependent launch; whole tiles (no stream-K, no memset);
a stream-K launch with the workspace made once outside the loop (no allocator in the loop); the graph's time."""
import time, statistics
import torch
from fullpipe.kernels import gemm, hopper_gemm as hg
from fullpipe.kernels._operands import operand


def ev_us(fn, n=400):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for _ in range(n):
        fn()
    b.record()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / n, (t1 - t0) * 1e6 / n


def graph_us(fn, n=20):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    out = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / n)
    return statistics.median(out)


s = torch.cuda.current_stream()
for m, n, k, wt in [(200, 1008, 2048, False), (256, 1000, 2048, True), (200, 1001, 2048, True), (200, 2000, 2048, True),
                    (512, 4096, 4096, False), (200, 4096, 4096, True)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = w.T if wt else torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    pitch = -(-n // 8) * 8
    c = torch.empty(m, pitch, device="cuda", dtype=torch.bfloat16)[:, :n]
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    build = hg.default_build(m, n, k, 132, wt)
    tiles = hg.cluster_tiles(m, n, build)
    sk, _ = hg.stream_k(tiles, 132 // build.cluster, -(-k // 64), build.cluster)
    row = {}
    for name, pdl, skt in (("rule", True, None), ("no PDL", False, None), ("whole", True, 0), ("whole no PDL", False, 0)):
        hg.DEPENDENT_LAUNCH = pdl
        fn = lambda: hg.run(A, B, "persistent", c, s, build=build, sk_tiles=skt)
        row[name] = ev_us(fn) + (graph_us(fn),)
    hg.DEPENDENT_LAUNCH = True
    print(f"RESULT {m}x{n}x{k} {'w.T' if wt else 'B  '} {build.label:22s} sk_tiles {sk:3d}/{tiles:3d}  " +
          "  ".join(f"{nm}: eager {e:5.1f} (host {h:5.1f}) graph {g:5.1f}" for nm, (e, h, g) in row.items()), flush=True)
