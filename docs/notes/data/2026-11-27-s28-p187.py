"""p187: a new user's Llama-style MLP (nn.Linear weights, bf16) with fullpipe's GEMM in place of F.linear:
y = down(silu(gate(x)) * up(x)), each projection gemm(x, lin.weight.T, variant="hopper"), at 1 to 2048 tokens;
outputs against F.linear's, then CUDA-graph replay timings of the whole MLP (weights from HBM: several MLPs
cycled, 3 x 4096 x 11008 x 2 B = 270 MB each). Then what such a user runs into: fp32, K not a multiple of 8,
a sliced weight, a weight on another device kind."""
import statistics
import torch
import torch.nn.functional as F
from fullpipe.kernels import gemm

D, H = 4096, 11008
torch.manual_seed(0)


def make():
    with torch.device("cuda"):
        return [torch.nn.Linear(D, H, bias=False, dtype=torch.bfloat16),
                torch.nn.Linear(D, H, bias=False, dtype=torch.bfloat16),
                torch.nn.Linear(H, D, bias=False, dtype=torch.bfloat16)]


mlps = [make() for _ in range(2)]


def mlp_torch(x, m):
    g, u, d = m
    return F.linear(F.silu(F.linear(x, g.weight)) * F.linear(x, u.weight), d.weight)


def mlp_fullpipe(x, m):
    g, u, d = m
    s = torch.cuda.current_stream()
    a = gemm(x, g.weight.T, variant="hopper", stream=s)
    b = gemm(x, u.weight.T, variant="hopper", stream=s)
    return gemm(F.silu(a) * b, d.weight.T, variant="hopper", stream=s)


def graph_ms(fn, n):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n):
            fn(i)
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts)


print(f"{'tokens':>7} {'max |diff| / max |ref|':>24} {'F.linear us':>12} {'fullpipe us':>12} {'ratio':>6}")
with torch.inference_mode():
    for t in (1, 8, 64, 512, 2048):
        x = torch.randn(t, D, device="cuda", dtype=torch.bfloat16)
        ref = mlp_torch(x, mlps[0])
        got = mlp_fullpipe(x, mlps[0])
        torch.cuda.synchronize()
        err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        n = 8
        tt = min(graph_ms(lambda i: mlp_torch(x, mlps[i % 2]), n) for _ in range(2))
        tf = min(graph_ms(lambda i: mlp_fullpipe(x, mlps[i % 2]), n) for _ in range(2))
        print(f"{t:>7} {err:>24.2e} {tt * 1e3:>12.1f} {tf * 1e3:>12.1f} {tt / tf:>6.2f}", flush=True)

    s = torch.cuda.current_stream()
    x = torch.randn(8, D, device="cuda", dtype=torch.bfloat16)
    cases = {
        "fp32 weights": lambda: gemm(x.float(), torch.randn(H, D, device="cuda").T, variant="hopper", stream=s),
        "K = 4100": lambda: gemm(torch.randn(8, 4100, device="cuda", dtype=torch.bfloat16),
                                 torch.randn(64, 4100, device="cuda", dtype=torch.bfloat16).T, variant="hopper", stream=s),
        "a column slice of w": lambda: gemm(x, mlps[0][0].weight[:, :2048].T, variant="hopper", stream=s),
        "a row slice of w (w[:1024].T)": lambda: gemm(x, mlps[0][0].weight[:1024].T, variant="hopper", stream=s),
        "w on the CPU": lambda: gemm(x, torch.randn(H, D, dtype=torch.bfloat16).T, variant="hopper", stream=s),
        "x transposed": lambda: gemm(x.T.contiguous().T, mlps[0][0].weight.T, variant="hopper", stream=s),
    }
    for name, fn in cases.items():
        try:
            y = fn()
            torch.cuda.synchronize()
            print(f"{name}: ran, shape {tuple(y.shape)}")
        except Exception as e:  # what the user reads
            print(f"{name}: {type(e).__name__}: {e}")
