"""p364: who holds workload A's pinned output block after the caller dropped the outputs: referrer chains."""
import gc, sys, types
import numpy as np
import torch
import fullpipe as fp
from fullpipe.cuda.pinned_pool import default_pinned_pool

dev = torch.device("cuda")
rng = np.random.default_rng(0)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()


@torch.inference_mode()
def fa(x):
    return mlp(x.to(torch.bfloat16)).float()


xa = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
pool = default_pinned_pool()


def describe(o):
    t = type(o).__name__
    if isinstance(o, dict):
        owners = [type(r).__name__ for r in gc.get_referrers(o) if getattr(r, "__dict__", None) is o]
        keys = [k for k in list(o.keys())[:40] if isinstance(k, str)]
        return f"dict(owner={owners}, keys~{keys[:12]})"
    if isinstance(o, types.FrameType):
        return f"frame({o.f_code.co_name} {o.f_code.co_filename.rsplit('/', 2)[-1]}:{o.f_lineno})"
    if isinstance(o, types.CellType):
        return "cell"
    if isinstance(o, (list, tuple)):
        return f"{t}(len {len(o)})"
    return t


def chains(obj, depth, seen, prefix=""):
    if depth == 0:
        return
    for r in gc.get_referrers(obj):
        if r is seen or isinstance(r, types.FrameType) and r.f_code.co_name in ("chains", "<module>"):
            continue
        if id(r) in seen:
            continue
        seen.add(id(r))
        print(f"{prefix}<- {describe(r)}", flush=True)
        chains(r, depth - 1, seen, prefix + "   ")


for threads in ("auto", 1):
    pa = fp.StreamPipeline(fa, compute_threads=threads)
    for r in range(16):
        ys = pa.run_batches(xa)
        st = pool.stats
        if st.in_use_bytes > 100 << 20:
            base = ys[0]
            while getattr(base, "base", None) is not None:
                base = base.base
            del ys
            gc.collect()
            st2 = pool.stats
            print(f"== threads={threads} run {r}: in use {st.in_use_bytes >> 20} MiB, after del+collect "
                  f"{st2.in_use_bytes >> 20} MiB; staging {pa.stats.staging}", flush=True)
            if st2.in_use_bytes > 100 << 20:
                seen = {id(base)}
                chains(base, 6, seen)
            del base
            break
        del ys
    else:
        print(f"== threads={threads}: no pinned outputs in 16 runs; staging {pa.stats.staging}")
    pa.close()
