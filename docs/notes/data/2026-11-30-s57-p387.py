"""p387: the transposed product in several tiles along the product's rows (swap_build(m, ..., row_tiles=2)), in
pairs along W's rows sharing x (2x1), in pairs along the product's rows sharing W (1x2), one block a cluster, and in
64-row blocks, against the rule and the one-tile transposed product, on p384's layer shapes (7-8B models, GPT-2;
the heads over 40000 rows left out) at 129-300 rows. bf16, b = w.T. CUDA-graph replay of 20 launches, 5 alternating
rounds, medians. Errors against float32 checked (NaN-poisoned outputs). Builds precompiled each in its own process
(ptxas 13.0 segfaults on some widths in clusters): those that fail are skipped. Writes p387-<rows>.json."""
import dataclasses, json, math, os, statistics, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
LAYERS = {"llama3-8b": [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)],
          "llama2-7b": [(4096, 12288), (4096, 22016), (11008, 4096)],
          "qwen2-7b": [(3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584)],
          "phi3-mini": [(3072, 9216), (3072, 16384), (8192, 3072)],
          "gpt2": [(768, 2304), (768, 768), (768, 3072), (3072, 768)]}
ROWS = [int(r) for r in sys.argv[1].split(",")]


def variants(m):
    v = {}
    if m <= 256:
        v["pair1"] = hg.swap_build(m)
        v["r64_1"] = hg.swap_build(m, 64, 1)
    for t in (2, 3) if m > 256 else (2,):
        if -(-m // t) > 256:
            continue
        v[f"pair{t}"] = hg.swap_build(m, 128, 2, t)
        v[f"mc{t}"] = hg.swap_build(m, 128, 1, t, 2)
        v[f"one{t}"] = hg.swap_build(m, 128, 1, t)
        v[f"r64_{t}"] = hg.swap_build(m, 64, 1, t)
    return v


def compile_ok(b):
    code = ("import sys, json; from fullpipe.kernels import hopper_gemm as hg; "
            "hg.module('persistent', 'sm_90a', build=hg.PersistentBuild(**json.loads(sys.argv[1]))); print('OK')")
    try:
        r = subprocess.run([sys.executable, "-c", code, json.dumps(dataclasses.asdict(b))], capture_output=True,
                           text=True, timeout=300)
        return r.returncode == 0 and "OK" in r.stdout
    except subprocess.TimeoutExpired:
        return False


t0 = time.perf_counter()
todo = {b for m in ROWS for b in variants(m).values()}
with ThreadPoolExecutor(14) as ex:
    ok = dict(zip(todo, ex.map(compile_ok, todo)))
bad = sorted(b.label for b, good in ok.items() if not good)
print(f"compiled {len(todo)} builds in {time.perf_counter() - t0:.0f} s; failed: {bad}", flush=True)


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
for m in ROWS:
    for model, layers in LAYERS.items():
        for k, n in layers:
            dt = torch.bfloat16
            a = torch.randn(m, k, device="cuda", dtype=dt)
            w = torch.randn(n, k, device="cuda", dtype=dt)
            b = w.T
            c = torch.empty(m, n, device="cuda", dtype=dt)
            ref = a.float() @ b.float()
            A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
            cur = torch.cuda.current_stream
            builds = {"rule": hg.default_build(m, n, k, sms, True)}
            builds.update({nm: bd for nm, bd in variants(m).items() if ok[bd]})
            fns = {"cuBLAS": lambda: torch.nn.functional.linear(a, w)}
            for nm, bd in builds.items():
                fns[nm] = (lambda bd=bd: hg.run(A, B, "persistent", c, cur(), build=bd))
            errs = {}
            for nm in [x for x in fns if x != "cuBLAS"]:
                c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                errs[nm] = err
                if not err < 1e-2:
                    print("WRONG", nm, builds[nm].label, m, n, k, err, flush=True)
                    del fns[nm]
            gs = {nm: graph(fn) for nm, fn in fns.items()}
            ts = {nm: [] for nm in gs}
            for r in range(5):
                for nm in (list(gs) if r % 2 else list(gs)[::-1]):
                    ts[nm].append(time_us(gs[nm]))
            del gs
            med = {nm: statistics.median(v) for nm, v in ts.items()}
            labels = {nm: bd.label for nm, bd in builds.items()}
            results.append(dict(model=model, m=m, n=n, k=k, labels=labels, us=med, err=errs))
            best = min((x for x in med if x != "cuBLAS"), key=med.get)
            xs = " ".join(f"{nm} {med['cuBLAS'] / med[nm]:.2f}" for nm in med if nm != "cuBLAS")
            print(f"{model:9s} {f'{m}x{n}x{k}':>16} cuBLAS {med['cuBLAS']:6.1f} us | {xs} | best {best} "
                  f"({labels[best]}) {med['rule'] / med[best]:.2f}x rule", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for m in ROWS:
    rs = [r for r in results if r["m"] == m]
    names = sorted({nm for r in rs for nm in r["us"] if nm != "cuBLAS"})
    line = " ".join(f"{nm} {gm([r['us']['cuBLAS'] / r['us'][nm] for r in rs if nm in r['us']]):.3f}" for nm in names)
    bestv = gm([r["us"]["cuBLAS"] / min(v for x, v in r["us"].items() if x != "cuBLAS") for r in rs])
    print(f"SUMMARY M={m}: x cuBLAS gm: {line}; best of all {bestv:.3f}")
print(f"total {time.perf_counter() - t0:.1f} s")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), results=results),
          open(os.environ.get("OUT", ".") + f"/p387-{'-'.join(map(str, ROWS))}.json", "w"), indent=1)
