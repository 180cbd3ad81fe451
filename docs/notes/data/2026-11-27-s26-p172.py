import statistics
import numpy as np, torch
from fullpipe.cuda.device import Device
from fullpipe.cuda.pool import DevicePool
from fullpipe.kernels import gemm_hopper
from fullpipe.models import (DecoderStack, StackConfig, check_and_pack, init_weights, packed_scratch_bytes,
                             padded_scratch_bytes, reference_prefill)

c = StackConfig()
w = init_weights(c, seed=0, device="cuda")
rng = np.random.default_rng(0)
lens = rng.integers(64, 2049, 8).tolist()
reqs = [rng.integers(0, c.vocab, n) for n in lens]
T, R = sum(lens), len(lens)
print(f"config {c}\nlengths {lens} ({T} tokens)")
pool = DevicePool(Device(0))
s = torch.cuda.Stream()
runs = {
    "fullpipe kernels + pool": DecoderStack(c, w, pool=pool),
    "torch kernels + pool": DecoderStack(c, w, kernels="torch", pool=pool),
}
print("matmul choices:", {k: (v.backend, v.reason) for k, v in runs["fullpipe kernels + pool"].matmul_choices.items()})
with torch.cuda.stream(s):
    ref32 = reference_prefill(c, w, reqs, dtype=torch.float32)
    eager = reference_prefill(c, w, reqs)
s.synchronize()
rel = lambda a: float(((a.float() - ref32).norm(dim=1) / ref32.norm(dim=1)).max())
print(f"eager bf16 vs fp32: max rel err {rel(eager):.2e}")
for name, stack in runs.items():
    logits = stack.prefill(reqs, stream=s).logits
    s.synchronize()
    print(f"{name} vs fp32: max rel err {rel(logits):.2e}")
del ref32
torch.cuda.empty_cache()


def timed(fn, warm=2, reps=5):
    ms = []
    for i in range(warm + reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(s)
        fn()
        b.record(s)
        b.synchronize()
        if i >= warm:
            ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def eager_call():
    with torch.cuda.stream(s):
        reference_prefill(c, w, reqs)


rows = [("eager reference (per request)", timed(eager_call))]
for name, stack in runs.items():
    rows.append((name, timed(lambda: stack.prefill(reqs, stream=s))))
base = rows[0][1]
print(f"\nprefill, {T} tokens; scratch packed {packed_scratch_bytes(c, lens) / 2**20:.0f} MiB vs padded "
      f"{padded_scratch_bytes(c, lens) / 2**20:.0f} MiB; pool {pool.stats()}")
print(f"{'':34s} {'ms':>8s} {'tok/s':>10s} {'x eager':>8s}")
for name, ms in rows:
    print(f"{name:34s} {ms:8.2f} {T / ms * 1e3:10.0f} {base / ms:8.2f}")

print("\nprojections alone (M, K, N): Hopper GEMM / torch.matmul, median ms of 5")
shapes = c.weight_shapes()
for name in ("wqkv", "wo", "w_gate_up", "w_down", "lm_head"):
    k, n = shapes[name if name == "lm_head" else f"layers.0.{name}"]
    for m in ((T, R) if name == "lm_head" else (T,)):
        with torch.cuda.stream(s):
            a = torch.randn(m, k, device="cuda").bfloat16()
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        wt = w[name if name == "lm_head" else f"layers.0.{name}"]
        th = timed(lambda: gemm_hopper(a, wt, out=out, stream=s), 2, 5)

        def tm():
            with torch.cuda.stream(s):
                torch.matmul(a, wt, out=out)
        tt = timed(tm, 2, 5)
        print(f"{name:10s} ({m}, {k}, {n}): hopper {th:.3f} ms, torch {tt:.3f} ms, torch/hopper {tt / th:.2f}")
