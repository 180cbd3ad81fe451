"""p391: a user's forward of a Llama-style MLP + attention projections at a few hundred tokens through
fullpipe.kernels.gemm(x, w.T, variant="hopper") against the same layers through torch (cuBLAS): the whole stack's
time (CUDA-graph replay) and its output error. Llama-3-8B's shapes (d 4096, qkv 6144, ffn 14336), 4 layers of
random bf16 weights (scaled), tokens from argv."""
import statistics, sys, time
import torch
import torch.nn.functional as F
from fullpipe.kernels import gemm
torch.manual_seed(0)
D, QKV, FFN, LAYERS = 4096, 6144, 14336, 4
dev, dt = "cuda", torch.bfloat16
layers = [dict(qkv=torch.randn(QKV, D, device=dev, dtype=dt) / D**0.5, o=torch.randn(D, D, device=dev, dtype=dt) / D**0.5,
               up=torch.randn(2 * FFN, D, device=dev, dtype=dt) / D**0.5, down=torch.randn(D, FFN, device=dev, dtype=dt) / FFN**0.5)
          for _ in range(LAYERS)]


def forward(x, linear):
    for L in layers:
        qkv = linear(x, L["qkv"])
        x = x + linear(qkv[:, :D].contiguous(), L["o"])   # (attention itself left out: the projections' products)
        gu = linear(x, L["up"])
        x = x + linear(F.silu(gu[:, :FFN]) * gu[:, FFN:], L["down"])
    return x


ours = lambda x, w: gemm(x, w.T, variant="hopper", stream=torch.cuda.current_stream())
for tokens in map(int, sys.argv[1].split(",")):
    x = torch.randn(tokens, D, device=dev, dtype=dt)
    ref, got = forward(x, F.linear), forward(x, ours)
    torch.cuda.synchronize()
    err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    times = {}
    for name, lin in (("torch", F.linear), ("fullpipe", ours)):
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            forward(x, lin)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            forward(x, lin)
        ts = []
        for _ in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3)
        times[name] = statistics.median(ts)
    print(f"tokens {tokens:5d}: torch {times['torch']:8.1f} us  fullpipe {times['fullpipe']:8.1f} us  "
          f"x torch {times['torch'] / times['fullpipe']:.3f}  rel err {err:.1e}", flush=True)
