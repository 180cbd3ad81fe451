"""p185: at 8192^3 bf16 on a card at its power limit, is a kernel slower for want of clock (power) or of work per
clock? cuBLAS and the persistent rung, each with B row-major (NN) and B = w.T (TN), each run back to back for ~3 s
(CUDA-graph replays) while nvidia-smi samples the SM clock and the power draw every 50 ms. Prints TFLOP/s, mean
clock and power of the steady part, flops per SM-clock and per joule."""
import statistics
import subprocess
import time
import torch
from fullpipe.kernels import gemm

N = 8192
x = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
w = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
b = w.T.contiguous()
c = torch.empty(N, N, device="cuda", dtype=torch.bfloat16)
CASES = {
    "cuBLAS NN": lambda: torch.matmul(x, b, out=c),
    "cuBLAS TN": lambda: torch.matmul(x, w.T, out=c),
    "fullpipe NN": lambda: gemm(x, b, variant="hopper", out=c, stream=torch.cuda.current_stream()),
    "fullpipe TN": lambda: gemm(x, w.T, variant="hopper", out=c, stream=torch.cuda.current_stream()),
}


def graph(fn, n):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    return g


print(f"{'':12} {'TFLOP/s':>8} {'MHz':>6} {'W':>6} {'flop/clk/SM':>12} {'GFLOP/J':>8}")
sms = torch.cuda.get_device_properties(0).multi_processor_count
for rnd in range(2):
    for name, fn in CASES.items():
        g = graph(fn, 20)
        g.replay(); torch.cuda.synchronize()
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                "-lms", "50"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.2)
        t0 = time.perf_counter()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        ts = []
        while time.perf_counter() - t0 < 3.0:
            ev[0].record(); g.replay(); ev[1].record(); ev[1].synchronize()
            ts.append(ev[0].elapsed_time(ev[1]) / 20)
        smi.terminate()
        out = smi.communicate()[0].strip().splitlines()
        rows = [tuple(float(v) for v in line.split(",")) for line in out if line.count(",") == 1]
        steady = rows[len(rows) // 3:]   # past the first second
        mhz = statistics.mean(r[0] for r in steady)
        watts = statistics.mean(r[1] for r in steady)
        ms = statistics.median(ts[len(ts) // 3:])
        tflops = 2 * N**3 / (ms * 1e-3) / 1e12
        print(f"{name:12} {tflops:>8.0f} {mhz:>6.0f} {watts:>6.0f} {tflops * 1e12 / (mhz * 1e6 * sms):>12.0f} "
              f"{tflops * 1e3 / watts:>8.2f}   (round {rnd})", flush=True)
