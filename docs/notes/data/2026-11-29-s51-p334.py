"""p334 (from p322): at 200 rows (p320's 7-8B model shapes), every candidate of gemm_tuning.candidates and besides
them 128 x 128 tiles in clusters of 2 sharing B (multicast: B read once for both row tiles), with the rule's
stream-K, every tile dealt out, and whole tiles; beside cuBLAS. CUDA-graph replay of 20 launches, 5 alternating
rounds, medians. Writes p334.json."""
import json, math, os, random, statistics, sys, time
import torch
from fullpipe.kernels import gemm_tuning as gt, hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count



# p320's shapes that ran below 0.9x torch on the device (all b = w.T, bf16): M = 200 of the 7-8B models; GPT-2 / ViT-B.
M200 = [(200, n, k) for k, n in [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (4096, 128256),
                                 (4096, 12288), (4096, 22016), (11008, 4096), (4096, 32000), (3584, 4608), (3584, 3584),
                                 (3584, 37888), (18944, 3584), (3584, 152064), (3072, 9216), (3072, 16384),
                                 (8192, 3072), (3072, 32064)]]
SHORT_K = [(m, n, k) for m in (2048, 6304, 8192) for k, n in [(768, 2304), (768, 768), (768, 3072), (3072, 768)]]
SHORT_K += [(2048, 4608, 3584), (2048, 9216, 3072)]
sets = {"m200": [(m, n, k, False, True) for m, n, k in M200]}
import dataclasses
PAIR = dataclasses.replace(hg.PERSISTENT, tile_n=128, stages=6)
LAUNCHES = int(os.environ.get("P308_LAUNCHES", 20))


def graph(fn, n=LAUNCHES):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def time_us(g, n=LAUNCHES):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


results = []
t0 = time.perf_counter()
for set_name, shapes in sets.items():
    for m, n, k, fp16, wt in shapes:
        dt = torch.float16 if fp16 else torch.bfloat16
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
        c = torch.empty(m, n, device="cuda", dtype=dt)
        ref = a.float() @ b.float()
        A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
        plans = gt.candidates(m, n, k, sms, wt)
        plans += [gt.GemmPlan("persistent", PAIR, sk) for sk in ("rule", "all", "none")]
        plans = list(dict.fromkeys(plans))
        fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c)}
        for p in plans:
            fns[p.label] = (lambda p=p: gt.run_plan(p, A, B, c, torch.cuda.current_stream()))
        for nm, fn in list(fns.items()):
            if nm == "cuBLAS":
                continue
            c.fill_(float("nan")); fn(); torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                print("WRONG", nm, m, n, k, fp16, wt, err, flush=True)
                del fns[nm]
        gs = {nm: graph(fn) for nm, fn in fns.items()}
        ts = {nm: [] for nm in gs}
        for r in range(5):
            for nm in (list(gs) if r % 2 else list(gs)[::-1]):
                ts[nm].append(time_us(gs[nm]))
        del gs
        med = {nm: statistics.median(v) for nm, v in ts.items()}
        rule = plans[0].label
        best = min((nm for nm in med if nm != "cuBLAS"), key=med.get)
        tag = ("f16" if fp16 else "bf16") + (" w.T" if wt else "")
        row = dict(set=set_name, m=m, n=n, k=k, dtype=tag, rule=rule, best=best, us=med)
        results.append(row)
        along_n = {nm: t for nm, t in med.items() if nm.startswith("2x1-g8-n128")}
        an = min(along_n, key=along_n.get) if along_n else None
        print(f"{set_name} {f'{m}x{n}x{k}':>18} {tag:9} rule {rule:>20} {med['cuBLAS'] / med[rule]:.3f}xcB  "
              f"best {best:>22} {med['cuBLAS'] / med[best]:.3f}xcB  pair {an} "
              f"{(med['cuBLAS'] / med[an]) if an else float('nan'):.3f}xcB", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for set_name in sets:
    rs = [r for r in results if r["set"] == set_name]
    print(f"{set_name}: {len(rs)} products; x cuBLAS rule {gm([r['us']['cuBLAS'] / r['us'][r['rule']] for r in rs]):.3f}, "
          f"best of all {gm([r['us']['cuBLAS'] / r['us'][r['best']] for r in rs]):.3f}, best without 1x2 "
          f"{gm([r['us']['cuBLAS'] / min(t for nm, t in r['us'].items() if nm != 'cuBLAS' and not nm.startswith('1x2')) for r in rs]):.3f}",
          flush=True)
print(f"total {time.perf_counter() - t0:.1f} s")
out = os.environ.get("OUT", ".")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), results=results), open(f"{out}/p334.json", "w"), indent=1)
