"""u7 (session 60): gemm(x, lin.weight.T, variant="hopper") as a new user would call it, on models in no test
or probe (Qwen2-7B, Phi-3-mini, Gemma-2B, ViT-L/16 projections), against F.linear on the same tensors.

Each product: the result against float64 (and F.linear's own error beside it), then time: (1) eager, 30 calls
back to back as a user's loop issues them (out=None both: each allocates, as F.linear does), events around them;
(2) CUDA-graph replay of 20 calls each (device time only). 5 alternating rounds, medians."""
import statistics, json, os
import torch
import torch.nn.functional as F
from fullpipe.kernels import gemm

torch.manual_seed(0)
dev = "cuda"
MODELS = {  # name: [(layer, K, N)] as nn.Linear(K, N) holds its weight (N, K)
    "qwen2-7b": [("qkv", 3584, 4608), ("o", 3584, 3584), ("gate_up", 3584, 37888), ("down", 18944, 3584)],
    "phi3-mini": [("qkv", 3072, 9216), ("o", 3072, 3072), ("gate_up", 3072, 16384), ("down", 8192, 3072)],
    "gemma-2b": [("qkv", 2048, 2560), ("o", 2048, 2048), ("gate_up", 2048, 32768), ("down", 16384, 2048)],
}
VIT_L = [("qkv", 1024, 3072), ("o", 1024, 1024), ("fc1", 1024, 4096), ("fc2", 4096, 1024)]
TOKENS = [77, 333, 1000, 2222]


def timed_eager(fn, calls=30):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(calls):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3 / calls


def graphed(fn, calls=20):
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    def run():
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record(); g.replay(); e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1e3 / calls
    return run


def check(x, w, dtype):
    ref = (x.double().reshape(-1, x.shape[-1]) @ w.double().T)
    ours = gemm(x, w.T, variant="hopper", stream=torch.cuda.current_stream())
    theirs = F.linear(x, w)
    torch.cuda.synchronize()
    assert ours.shape == theirs.shape and ours.dtype == dtype, (ours.shape, theirs.shape, ours.dtype)
    scale = ref.abs().max().item()
    e_ours = (ours.double().reshape(ref.shape) - ref).abs().max().item() / scale
    e_theirs = (theirs.double().reshape(ref.shape) - ref).abs().max().item() / scale
    return e_ours, e_theirs


rows = []
cases = [(None, name, layer, K, N, (t,)) for name, layers in MODELS.items() for t in TOKENS for layer, K, N in layers]
cases += [("vit-l", "vit-l", layer, K, N, (b, 197)) for b in (8, 32) for layer, K, N in VIT_L]
for _, model, layer, K, N, lead in cases:
    for dtype in (torch.bfloat16,) if model != "phi3-mini" else (torch.bfloat16, torch.float16):
        x = torch.randn(*lead, K, device=dev, dtype=dtype)
        w = (torch.randn(N, K, device=dev, dtype=torch.float32) / K ** 0.5).to(dtype)
        try:
            e_ours, e_theirs = check(x, w, dtype)
        except Exception as exc:  # (a user's run: print and go on)
            print(f"ERROR {model} {layer} {lead} {dtype}: {type(exc).__name__}: {exc}")
            rows.append(dict(model=model, layer=layer, lead=lead, error=str(exc)))
            continue
        st = torch.cuda.current_stream()
        ours = lambda: gemm(x, w.T, variant="hopper", stream=torch.cuda.current_stream())
        theirs = lambda: F.linear(x, w)
        g_ours, g_theirs = graphed(ours), graphed(theirs)
        ev, gr = {"ours": [], "torch": []}, {"ours": [], "torch": []}
        for _ in range(5):
            ev["ours"].append(timed_eager(ours)); ev["torch"].append(timed_eager(theirs))
            gr["ours"].append(g_ours()); gr["torch"].append(g_theirs())
        med = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in (("eager", ev), ("graph", gr))}
        m = x.numel() // K
        r = dict(model=model, layer=layer, lead=list(lead), m=m, n=N, k=K, dtype=str(dtype)[6:], err=e_ours,
                 err_torch=e_theirs, eager_us=med["eager"], graph_us=med["graph"],
                 eager_ratio=med["eager"]["torch"] / med["eager"]["ours"],
                 graph_ratio=med["graph"]["torch"] / med["graph"]["ours"])
        rows.append(r)
        print(f"{model:10s} {layer:8s} {str(tuple(lead)):10s} {r['dtype']:9s} err {e_ours:.1e} (torch {e_theirs:.1e}) "
              f"eager {med['eager']['ours']:7.1f} vs {med['eager']['torch']:7.1f} us ({r['eager_ratio']:.3f}x) "
              f"graph {med['graph']['ours']:7.1f} vs {med['graph']['torch']:7.1f} us ({r['graph_ratio']:.3f}x)",
              flush=True)
        del g_ours, g_theirs

ok = [r for r in rows if "err" in r]
bad = [r for r in ok if r["err"] > 2e-2]
geo = lambda v: statistics.geometric_mean(v) if v else float("nan")
print(f"\n{len(ok)} products, {len(rows) - len(ok)} errors raised, {len(bad)} beyond 2e-2 relative")
for model in [*MODELS, "vit-l"]:
    rs = [r for r in ok if r["model"] == model]
    print(f"{model:10s} geomean x torch: graph {geo([r['graph_ratio'] for r in rs]):.3f} "
          f"eager {geo([r['eager_ratio'] for r in rs]):.3f}  (min graph {min(r['graph_ratio'] for r in rs):.3f})")
print(f"all        geomean x torch: graph {geo([r['graph_ratio'] for r in ok]):.3f} "
      f"eager {geo([r['eager_ratio'] for r in ok]):.3f}")
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "u7.json"), "w"), indent=1)
