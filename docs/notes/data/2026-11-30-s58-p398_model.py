"""p398: p391's Llama-3-8B projection stack with its weights stored K x N (x @ W, a row-major b) through
fullpipe.kernels.gemm(x, W, variant="hopper") against torch x @ W: the stack's time (CUDA-graph replay) and error."""
import statistics, sys
import torch
import torch.nn.functional as F
import os
from fullpipe.kernels import gemm
from fullpipe.kernels import hopper_gemm as hg
if os.environ.get("P398_OLD"):  # (the rule before session 58: a row-major b never takes the transposed product)
    hg.default_build = lambda m, n, k, sms, b_transposed=False: hg._rule(m, n, k, sms, b_transposed)
torch.manual_seed(0)
D, QKV, FFN, LAYERS = 4096, 6144, 14336, 4
dev, dt = "cuda", torch.bfloat16
layers = [dict(qkv=torch.randn(D, QKV, device=dev, dtype=dt) / D**0.5, o=torch.randn(D, D, device=dev, dtype=dt) / D**0.5,
               up=torch.randn(D, 2 * FFN, device=dev, dtype=dt) / D**0.5, down=torch.randn(FFN, D, device=dev, dtype=dt) / FFN**0.5)
          for _ in range(LAYERS)]


def forward(x, mm):
    for L in layers:
        qkv = mm(x, L["qkv"])
        x = x + mm(qkv[:, :D].contiguous(), L["o"])
        gu = mm(x, L["up"])
        x = x + mm(F.silu(gu[:, :FFN]) * gu[:, FFN:], L["down"])
    return x


ours = lambda x, w: gemm(x, w, variant="hopper", stream=torch.cuda.current_stream())
for tokens in map(int, sys.argv[1].split(",")):
    x = torch.randn(tokens, D, device=dev, dtype=dt)
    ref, got = forward(x, torch.matmul), forward(x, ours)
    torch.cuda.synchronize()
    err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    times = {}
    gs = {}
    for name, mm in (("torch", torch.matmul), ("fullpipe", ours)):
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            forward(x, mm)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            forward(x, mm)
        gs[name] = g
    ts = {k: [] for k in gs}
    for _ in range(7):
        for name, g in gs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); b.synchronize()
            ts[name].append(a.elapsed_time(b) * 1e3)
    times = {k: statistics.median(v) for k, v in ts.items()}
    print(f"tokens {tokens:5d}: torch {times['torch']:8.1f} us  fullpipe {times['fullpipe']:8.1f} us  "
          f"x torch {times['torch'] / times['fullpipe']:.3f}  rel err {err:.1e}", flush=True)
