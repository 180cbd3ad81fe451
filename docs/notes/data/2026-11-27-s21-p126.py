"""p126 (session 21): a large pageable array through run() with new outputs, over 4 runs: before, its second
run pinned the input in place and made a pinned output of the whole size (2.2 s for 4.3 GB, 1.5 GB/s);
now the output is pageable and staged. NumPy and torch inputs; ms, GB/s in, staging, pinned pool."""
import time, warnings
import numpy as np, torch, fullpipe as fp
warnings.simplefilter("ignore")
def timed(fn):
    t0 = time.perf_counter(); r = fn(); torch.cuda.synchronize(); return r, (time.perf_counter() - t0) * 1e3
xb = np.random.standard_normal((4_200_000, 256)).astype(np.float32)  # 4.3 GB
lin = torch.nn.Linear(256, 256).cuda().eval()
@torch.inference_mode()
def f(t):
    return lin(t)
for name, x, g in (("numpy, t*2", xb, lambda t: t * 2), ("torch, Linear", torch.from_numpy(xb[:2_000_000]), f)):
    p = fp.StreamPipeline(g)
    for r in range(4):
        y, ms = timed(lambda: p.run(x))
        st = p.stats
        ok = bool(np.array_equal(np.asarray(y[::997]), np.asarray(x[::997]) * 2)) if g is not f else None
        print(f"{name} run {r}: {ms:.0f} ms, {st.bytes_in / ms / 1e6:.1f} GB/s in, staging {st.staging}, exact {ok}, "
              f"pinned allocated {st.pinned['allocated_bytes'] / 2**20:.0f} MiB, pool held {st.pinned['pool_held_bytes'] / 2**20:.0f} MiB, "
              f"chunk {st.chunk['bytes'] / 2**20:.1f} MiB ({st.chunk['source']})", flush=True)
    del y
    p.close()
