"""p395 (a): forced list ways (plain, pipelined, threads) against the defaults, compute alone and the naive loop,
alternating rounds, for p393's workloads. (b) gemm(x, b) with a row-major b (K x N) against torch x @ b and
against gemm(x, w.T), Llama-3-8B layer shapes at 64-1024 rows: CUDA-graph replay of 20 launches, median of 5."""
import os, statistics, sys, time, importlib.util
import torch
import fullpipe as fp
spec = importlib.util.spec_from_file_location("p393w", os.path.join(os.path.dirname(__file__), "p393w.py"))
w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)


def ways(name, rounds=8):
    f, xs, to_dev = {"dict": w.dict_workload, "varlen": w.varlen_workload,
                     "varlen_small": lambda: w.varlen_workload(256, 4, 1024, 64 * 1024, (512, 4096))}[name]()
    dx = [to_dev(b) for b in xs]
    pipes = {"default": fp.StreamPipeline(f)}
    for way in ("plain", "pipelined", "threads"):
        p = fp.StreamPipeline(f)
        p._list_paths.next_path = (lambda key, may_thread=False, way=way: way)
        pipes[way] = p
    for p in pipes.values():
        for _ in range(30):
            p.run_batches(xs)
    torch.cuda.synchronize()

    def alone():
        for b in dx:
            f(b)

    def naive():
        for b in xs:
            f(to_dev(b)).cpu()
    runs = [("alone", alone), ("naive", naive)] + [(k, (lambda p=p: p.run_batches(xs))) for k, p in pipes.items()]
    ts = {k: [] for k, _ in runs}
    for r in range(rounds):
        for k, fn in runs[r % len(runs):] + runs[:r % len(runs)]:
            torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
            ts[k].append((time.perf_counter() - t) * 1e3)
    m = {k: statistics.median(v) for k, v in ts.items()}
    st = pipes["default"].stats
    print(f"== {name}: {len(xs)} batches; default way {(st.list_path or {}).get('path')} "
          f"{ {a: b for a, b in (st.list_path or {}).items() if 'us' in a} }", flush=True)
    for k in m:
        print(f"  {k:10s} {m[k]:8.2f} ms  {m['alone'] / m[k]:.3f}x alone  {m['naive'] / m[k]:.3f}x naive", flush=True)


def timed(fn, reps=20):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(ts)


def rowmajor(rows):
    from fullpipe.kernels import gemm
    torch.manual_seed(0)
    print("== row-major b: us (x torch)", flush=True)
    for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (2304, 768), (3072, 768)):
        wt = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5   # an nn.Linear weight
        bk = wt.t().contiguous()                                                # the same as a row-major K x N
        for m in rows:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = x @ bk
            st = torch.cuda.current_stream()
            o1 = gemm(x, bk, variant="hopper", stream=st)
            o2 = gemm(x, wt.T, variant="hopper", stream=st)
            torch.cuda.synchronize()
            e1 = ((o1.float() - ref.float()).norm() / ref.float().norm()).item()
            e2 = ((o2.float() - ref.float()).norm() / ref.float().norm()).item()
            t_t = timed(lambda: x @ bk)
            t_1 = timed(lambda: gemm(x, bk, variant="hopper", stream=torch.cuda.current_stream()))
            t_2 = timed(lambda: gemm(x, wt.T, variant="hopper", stream=torch.cuda.current_stream()))
            print(f"  {m:5d} x {n:5d} x {k:5d}: torch {t_t:7.1f}  row-major b {t_1:7.1f} ({t_t / t_1:.3f})  "
                  f"w.T {t_2:7.1f} ({t_t / t_2:.3f})  err {e1:.1e} {e2:.1e}", flush=True)


for a in sys.argv[1:]:
    if a == "rowmajor":
        rowmajor((64, 100, 128, 200, 256, 300, 384, 512, 768, 1024))
    else:
        ways(a)
