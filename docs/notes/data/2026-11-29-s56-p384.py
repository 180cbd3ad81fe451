"""p384 (from p380): the rule with the transposed product (new) against without (old) on p380's layer shapes; p380: the transposed product (swap_ab: W's rows on wgmma's M, the product's rows one tile of 80-256 columns on
its N, as cuBLAS runs x @ w.T) against the rule's build and cuBLAS, on the 23 layer shapes of p320 (7-8B models,
GPT-2) at 200 rows, and on a subset at 100, 129, 160, 256 rows. Variants: swap in 128-row blocks in clusters of 2
(x's slice multicast), 128-row one block a cluster, 64-row blocks; each with stream_k's choice. bf16, b = w.T.
CUDA-graph replay of 20 launches, 5 alternating rounds, medians. Errors against float32 checked. Writes p380.json."""
import json, math, os, statistics, sys, time
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
LAYERS = {"llama3-8b": [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (4096, 128256)],
          "llama2-7b": [(4096, 12288), (4096, 22016), (11008, 4096), (4096, 32000)],
          "qwen2-7b": [(3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584), (3584, 152064)],
          "phi3-mini": [(3072, 9216), (3072, 16384), (8192, 3072), (3072, 32064)],
          "gpt2": [(768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50257)]}
ROWS = [int(r) for r in (sys.argv[1].split(",") if len(sys.argv) > 1 else ["200"])]
SUBSET = len(sys.argv) > 2 and sys.argv[2] == "subset"


def graph(fn, n=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def time_us(g, n=20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


results = []
t0 = time.perf_counter()
for m in ROWS:
    for model, layers in LAYERS.items():
        for k, n in layers:
            if SUBSET and n > 40000:
                continue
            dt = torch.bfloat16
            a = torch.randn(m, k, device="cuda", dtype=dt)
            w = torch.randn(n, k, device="cuda", dtype=dt)
            b = w.T
            pitch = -(-n // 8) * 8
            cbuf = torch.empty(m, pitch, device="cuda", dtype=dt)
            c = cbuf[:, :n]
            ref = a.float() @ b.float()
            A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
            cur = torch.cuda.current_stream
            builds = {"new": None, "old": hg.unswapped_build(m, n, k, sms, True)}
            fns = {"cuBLAS": lambda: torch.nn.functional.linear(a, w)}
            for nm, bd in builds.items():
                fns[nm] = (lambda bd=bd: hg.run(A, B, "persistent", c, cur(), build=bd))
            errs = {}
            for nm in [x for x in fns if x != "cuBLAS"]:
                c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                errs[nm] = err
                if not err < 1e-2:
                    print("WRONG", nm, m, n, k, err, flush=True)
                    del fns[nm]
            gs = {nm: graph(fn) for nm, fn in fns.items()}
            ts = {nm: [] for nm in gs}
            for r in range(5):
                for nm in (list(gs) if r % 2 else list(gs)[::-1]):
                    ts[nm].append(time_us(gs[nm]))
            del gs
            med = {nm: statistics.median(v) for nm, v in ts.items()}
            rule = hg.default_build(m, n, k, sms, True)
            results.append(dict(model=model, m=m, n=n, k=k, rule=rule.label, us=med, err=errs,
                                ))
            xs = "  ".join(f"{nm} {med['cuBLAS'] / med[nm]:.3f}" for nm in med if nm != "cuBLAS")
            print(f"{model:10s} {f'{m}x{n}x{k}':>18} cuBLAS {med['cuBLAS']:7.1f} us  x cuBLAS: {xs}  (rule {rule.label})",
                  flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for m in ROWS:
    rs = [r for r in results if r["m"] == m]
    line = []
    for nm in ("new", "old"):
        v = [r["us"]["cuBLAS"] / r["us"][nm] for r in rs if nm in r["us"]]
        line.append(f"{nm} {gm(v):.3f}")
    sp = [r["us"]["old"] / r["us"]["new"] for r in rs if "swap" in r["rule"]]
    print(f"SUMMARY M={m}: x cuBLAS gm " + ", ".join(line) + f"; new/old on the {len(sp)} swapped: gm {gm(sp):.3f} "
          f"(min {min(sp, default=0):.3f}, max {max(sp, default=0):.3f})")
print(f"total {time.perf_counter() - t0:.1f} s")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), results=results),
          open(os.environ.get("OUT", ".") + f"/p384-{'-'.join(map(str, ROWS))}.json", "w"), indent=1)
