"""p307: a new user's tour, workloads no test has: each checked against a naive loop's outputs and timed against it
(first and third run). bf16 torch tensors in and out; a CuPy tensor function; torch.compile; a tuple-returning
compute (a clear error?); a non-contiguous tensor; imap over a generator of varying batches; fp32 NCHW resnet18."""
import time, traceback
import numpy as np
import torch, torchvision
import fullpipe as fp

dev = torch.device("cuda")
results = []


def timed(fn):
    torch.cuda.synchronize(); t = time.perf_counter(); r = fn(); torch.cuda.synchronize()
    return r, (time.perf_counter() - t) * 1e3


def naive_loop(f, x, per, to_np=False):
    outs = []
    for i in range(0, len(x), per):
        xb = torch.as_tensor(x[i:i + per]).to(dev)
        outs.append(f(xb).cpu())
    y = torch.cat(outs)
    return y.numpy() if to_np else y


def case(name, f, x, per, tol, to_np=False, **kw):
    try:
        ref, t_naive1 = timed(lambda: naive_loop(f, x, per, to_np))
        _, t_naive3 = timed(lambda: naive_loop(f, x, per, to_np))
        with fp.StreamPipeline(f, **kw) as p:
            ts, y = [], None
            for _ in range(3):
                y, t = timed(lambda: p.run(x))
                ts.append(t)
            yt = torch.as_tensor(np.asarray(y)) if not isinstance(y, torch.Tensor) else y
            rt = torch.as_tensor(np.asarray(ref)) if not isinstance(ref, torch.Tensor) else ref
            err = ((yt.float() - rt.float()).abs().max() / rt.float().abs().max().clamp_min(1e-6)).item()
            st = p.stats
            line = (f"{name:34s} out {type(y).__module__.split('.')[0]}/{getattr(y, 'dtype', '?')} err {err:.2e} "
                    f"{'OK' if err <= tol else 'WRONG'} | fullpipe {ts[0]:7.1f} / {ts[2]:7.1f} ms, naive {t_naive1:7.1f} / "
                    f"{t_naive3:7.1f} ms -> third x{t_naive3 / ts[2]:.2f} | chunk {st.chunk.get('rows')} "
                    f"{st.chunk.get('source')} staging {st.staging}")
    except Exception as e:  # noqa: BLE001
        line = f"{name:34s} RAISED {type(e).__name__}: {str(e)[:300]}"
        traceback.print_exc()
    print("RESULT " + line, flush=True)


# a. bf16 tensors in and out (NumPy has no bf16)
mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev, torch.bfloat16).eval()
xb = torch.randn(262144, 1024, dtype=torch.bfloat16)  # 512 MiB
with torch.inference_mode():
    case("a. bf16 tensor MLP (512 MiB)", lambda t: mlp(t), xb, 16384, 2e-2)

# b. a CuPy tensor function over NumPy
try:
    import cupy as cp
    xc = np.random.default_rng(0).random((64 << 20,), dtype=np.float32).reshape(-1, 1024)  # 256 MiB
    fc = lambda a: cp.sqrt(a) * 2 + 1  # noqa: E731

    def naive_cp():
        return np.concatenate([cp.asnumpy(fc(cp.asarray(xc[i:i + 8192]))) for i in range(0, len(xc), 8192)])
    ref, t1 = timed(naive_cp)
    _, t3 = timed(naive_cp)
    with fp.StreamPipeline(fc, form="cupy") as p:
        ts = []
        for _ in range(3):
            y, t = timed(lambda: p.run(xc)); ts.append(t)
        err = float(np.abs(y - ref).max())
        print(f"RESULT {'b. CuPy function (256 MiB)':34s} out {type(y).__module__}/{y.dtype} err {err:.2e} "
              f"{'OK' if err < 1e-5 else 'WRONG'} | fullpipe {ts[0]:.1f} / {ts[2]:.1f} ms, naive {t1:.1f} / {t3:.1f} ms "
              f"-> third x{t3 / ts[2]:.2f} | chunk {p.stats.chunk.get('rows')} staging {p.stats.staging}", flush=True)
except Exception as e:  # noqa: BLE001
    traceback.print_exc()
    print(f"RESULT b. CuPy RAISED {type(e).__name__}: {str(e)[:300]}", flush=True)

# c. torch.compile (default mode)
small = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(dev).eval()
comp = torch.compile(small)
xs = np.random.default_rng(1).standard_normal((131072, 512)).astype(np.float32)  # 256 MiB
with torch.inference_mode():
    case("c. torch.compile MLP fp32 (256 MiB)", lambda t: comp(t), xs, 16384, 1e-3, to_np=True)

# d. a compute returning a tuple, a dict; a CuPy function without form='cupy': the errors a user reads
for label, fbad in (("d. returns a tuple", lambda t: (t * 2, t + 1)), ("d. returns a dict", lambda t: {"logits": t * 2}),
                    ("d. CuPy function, no form=", lambda a: cp.sqrt(a))):
    try:
        with torch.inference_mode(), fp.StreamPipeline(fbad) as p:
            p.run(xs[:4096])
        print(f"RESULT {label:34s} no error", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"RESULT {label:34s} {type(e).__name__}: {str(e)[:260]}", flush=True)

# e. a non-contiguous tensor
with torch.inference_mode():
    case("e. non-contiguous tensor", lambda t: t * 2, torch.randn(4096, 512).t(), 128, 1e-6)

# f. imap over a generator of batches of varying sizes (resnet18 fp16, channels_last, uint8 images)
r18 = torchvision.models.resnet18().to(dev).half().eval().to(memory_format=torch.channels_last)


def fr(img):
    return r18((img.permute(0, 3, 1, 2).float() / 255).half()).float()


rng = np.random.default_rng(2)
sizes = [int(s) for s in rng.integers(16, 200, 40)]
imgs = [rng.integers(0, 256, (s, 224, 224, 3), dtype=np.uint8) for s in sizes]
try:
    with torch.inference_mode():
        ref, tn = timed(lambda: [fr(torch.from_numpy(b).to(dev)).cpu().numpy() for b in imgs])
        _, tn3 = timed(lambda: [fr(torch.from_numpy(b).to(dev)).cpu().numpy() for b in imgs])
        with fp.StreamPipeline(fr) as p:
            ts = []
            for _ in range(3):
                ys, t = timed(lambda: list(p.imap(b for b in imgs))); ts.append(t)
            err = max(float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)) for a, b in zip(ys, ref))
            print(f"RESULT {'f. imap generator resnet18 (40 var)':34s} err {err:.2e} {'OK' if err < 2e-2 else 'WRONG'} | "
                  f"fullpipe {ts[0]:.1f} / {ts[2]:.1f} ms, naive {tn:.1f} / {tn3:.1f} ms -> third x{tn3 / ts[2]:.2f} | "
                  f"imap {dict((k, v) for k, v in p.imap_stats.items() if k in ('windows', 'batches', 'read_ahead'))}",
                  flush=True)
except Exception as e:  # noqa: BLE001
    traceback.print_exc()
    print(f"RESULT f. imap RAISED {type(e).__name__}: {str(e)[:300]}", flush=True)

# h. a pinned torch tensor in: what comes back
xp = torch.randn(65536, 1024, dtype=torch.bfloat16).pin_memory()
with torch.inference_mode(), fp.StreamPipeline(lambda t: mlp(t)) as p:
    for _ in range(3):
        y, t = timed(lambda: p.run(xp))
    print(f"RESULT {'h. pinned tensor in':34s} out {type(y).__name__} pinned {y.is_pinned()} {t:.1f} ms "
          f"pinned alloc this run {p.stats.pinned.get('allocated_bytes')} staging {p.stats.staging}", flush=True)

# g. fp32 NCHW resnet18 over float32 images (no channels_last, no half)
r32 = torchvision.models.resnet18().to(dev).eval()
x32 = np.random.default_rng(3).random((1024, 3, 224, 224), dtype=np.float32)  # 616 MB
with torch.inference_mode():
    case("g. fp32 NCHW resnet18 (1024 images)", lambda t: r32(t), x32, 128, 1e-3, to_np=True)
