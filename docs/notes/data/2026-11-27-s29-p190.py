"""Session 29: where fullpipe's per-batch host time goes, on this host.
1. micro-op costs (us) of what the tensor adapter does per batch;
2. A/B: the tensor path (400 batches of 64-70 x 256 float32 through x*2, run_batches)
   with one adapter step stubbed out at a time (the delta is that step's cost);
3. cProfile of the tensor path, and of fullpipe's own kernel path (MixKernel, pinned);
4. the encoder layer: its call time alone against inside fullpipe."""
import cProfile, pstats, io, time, statistics, sys, threading
import numpy as np, torch
import fullpipe as fp
from fullpipe.pipeline import tensors as T

def us(fn, n=20000):
    fn()
    t0 = time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter() - t0) / n * 1e6

print("== 1. micro-op costs (us)")
dev = torch.device("cuda")
s = torch.cuda.Stream(); s2 = torch.cuda.Stream()
base = torch.zeros(1 << 20, device=dev)
y = torch.zeros(64, 256, device=dev)
lock = threading.Lock()
def locked():
    with lock: pass
ops = {
    "torch.cuda.set_stream": lambda: torch.cuda.set_stream(s),
    "torch._C._cuda_setStream": lambda: torch._C._cuda_setStream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type),
    "as_strided": lambda: base.as_strided((64, 256), (256, 1), 512),
    "get_device": y.get_device, "is_contiguous": y.is_contiguous, "is_conj": y.is_conj, "is_neg": y.is_neg,
    "data_ptr": y.data_ptr, "tuple(shape)": lambda: tuple(y.shape), "stride()": y.stride, "numel": y.numel,
    "extent": lambda: T.TorchFramework.extent(y), "record_stream": lambda: y.record_stream(s2),
    "isinstance Tensor": lambda: isinstance(y, torch.Tensor), "perf_counter": time.perf_counter,
    "lock": locked, "np.empty small": lambda: np.empty((64, 256), np.float32),
    "x*2 (bare call)": lambda: y * 2,
}
for k, fn in ops.items():
    print(f"  {k:28s} {us(fn):7.2f}")
torch.cuda.set_stream(torch.cuda.default_stream())
torch.cuda.synchronize()

print("== 2. A/B stubs on the tensor path")
rng = np.random.default_rng(0)
xs = [rng.random((64 + (i % 7), 256), dtype=np.float32) for i in range(400)]
def f(x): return x * 2
orig = {"_shares": T.TensorCompute._shares, "_learn_shape_cost": T.TensorCompute._learn_shape_cost,
        "graph_trees_state": T.TorchFramework.graph_trees_state, "output": T.TorchFramework.output}
stubs = {
    "_shares": lambda self, lane, raw, span: False,
    "_learn_shape_cost": lambda self, *a: None,
    "graph_trees_state": lambda self: None,
    "output": lambda self, y, fs: (y, tuple(y.shape), y.dtype, y.data_ptr()),
}
def setv(names):
    for k in orig:
        obj = T.TensorCompute if k in ("_shares", "_learn_shape_cost") else T.TorchFramework
        setattr(obj, k, stubs[k] if k in names else orig[k])
variants = {"base": (), **{f"no {k}": (k,) for k in stubs}, "all stubbed": tuple(stubs)}
pipe = fp.StreamPipeline(f)
for _ in range(3): pipe.run_batches(xs)
res = {k: [] for k in variants}
for r in range(7):
    for k, names in list(variants.items())[r % len(variants):] + list(variants.items())[:r % len(variants)]:
        setv(names)
        t0 = time.perf_counter(); pipe.run_batches(xs); ms = (time.perf_counter() - t0) * 1e3
        st = pipe.stats
        res[k].append((st.enqueue_us_per_batch, ms * 1e3 / len(xs), dict(st.host_us)))
setv(())
b0 = statistics.median(e for e, _, _ in res["base"])
for k, v in res.items():
    e = statistics.median(x for x, _, _ in v); w = statistics.median(x for _, x, _ in v)
    hu = {p: round(statistics.median(h[p] for _, _, h in v), 1) for p in v[0][2]}
    print(f"  {k:24s} enqueue {e:6.1f} us/batch (base - this {b0 - e:+5.1f}); wall {w:6.1f} us/batch; {hu}")
ys = pipe.run_batches(xs)
assert all(np.allclose(a, b * 2) for a, b in zip(ys, xs))

print("== 3a. cProfile, tensor path")
pr = cProfile.Profile(); pr.enable(); pipe.run_batches(xs); pr.disable()
out = io.StringIO(); pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(32); print(out.getvalue()[:7000])
pipe.close()

print("== 3b. fullpipe's own kernel (MixKernel, pinned uint32, 1 MiB batches, 3 streams)")
from fullpipe.pipeline.workload import MixKernel
from fullpipe.cuda.memory import pinned_empty
d = fp.Device(0)
k = MixKernel(d, rounds=1)
n = 256 * 1024  # uint32 per 1 MiB
for label, kw in (("plain", {}), ("timing=False", {"timing": False}), ("graph=True", {"graph": True})):
    x = pinned_empty((64 * n,), np.uint32); x[:] = np.arange(x.size, dtype=np.uint32)
    yk = pinned_empty((64 * n,), np.uint32)
    with fp.StreamPipeline(k, streams=3, chunk=n, device=d, **kw) as p:
        got = []
        for _ in range(12):
            p.run(x, out=yk); got.append((p.stats.enqueue_us_per_batch, dict(p.stats.host_us or {})))
        e = statistics.median(g[0] for g in got[2:])
        hu = {q: round(statistics.median(g[1][q] for g in got[2:]), 1) for q in (got[-1][1] or {})}
        print(f"  {label:14s} enqueue {e:6.1f} us/batch  {hu}")
        if label == "plain":
            pr = cProfile.Profile(); pr.enable()
            for _ in range(3): p.run(x, out=yk)
            pr.disable()
            out = io.StringIO(); pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25); print(out.getvalue()[:5000])

print("== 4. the encoder: its call alone against inside fullpipe")
import random
VOCAB, D, H, FF = 32000, 1024, 16, 4096
with torch.device("cuda"):
    emb = torch.nn.Embedding(VOCAB, D, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True, dtype=torch.bfloat16).eval()
def enc(ids):
    with torch.inference_mode():
        return layer(emb(ids)).float().mean(dim=1)
rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, VOCAB, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
bdev = [t.cuda() for t in bx]
cs = torch.cuda.Stream()
def alone():
    calls = 0.0
    with torch.cuda.stream(cs):
        for t in bdev:
            t0 = time.perf_counter(); enc(t); calls += time.perf_counter() - t0
    cs.synchronize(); return calls / len(bdev) * 1e6
pe = fp.StreamPipeline(enc)
alone(); pe.run_batches(bx); pe.run_batches(bx)
rows = {"alone": [], "fullpipe": []}
for r in range(7):
    for name in (("alone", "fullpipe") if r % 2 == 0 else ("fullpipe", "alone")):
        t0 = time.perf_counter()
        if name == "alone":
            call = alone()
        else:
            pe.run_batches(bx); call = pe.stats.host_us.get("compute_call")
        rows[name].append(((time.perf_counter() - t0) * 1e3, call, dict(pe.stats.host_us) if name == "fullpipe" else {}))
for name, v in rows.items():
    print(f"  {name:9s} ms {[round(a, 1) for a, _, _ in v]}  call us {[round(c, 0) for _, c, _ in v]}")
print("  fullpipe host_us (last):", {k: round(v, 1) for k, v in rows['fullpipe'][-1][2].items()}, "batches", len(bx))
