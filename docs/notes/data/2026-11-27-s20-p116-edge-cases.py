"""p116 (session 20): a new user's edge cases, each printed as OK / the error it raised."""
import traceback, warnings, numpy as np, torch, fullpipe as fp
warnings.simplefilter("ignore")
torch.manual_seed(0)
dev = "cuda"
lin = torch.nn.Linear(256, 64).to(dev).eval()
@torch.inference_mode()
def f(x):
    return lin(x.float())
def ref(x):
    with torch.inference_mode():
        return lin(torch.as_tensor(np.asarray(x)).float().to(dev)).cpu().numpy()
def case(name, fn):
    try:
        r = fn()
        print(f"[ok]   {name}: {r}")
    except Exception as e:
        msg = str(e).replace("\n", " ")[:300]
        notes = " | ".join(getattr(e, "__notes__", []))[:200]
        print(f"[err]  {name}: {type(e).__name__}: {msg} {('NOTES: ' + notes) if notes else ''}")
def close(a, b):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    return bool(np.allclose(a, b, rtol=1e-3, atol=1e-3))
pipe = fp.StreamPipeline(f)
x = np.random.standard_normal((300_000, 256)).astype(np.float32)  # 307 MB
case("in place out=x (same rows in and out? no: 256 -> 64)", lambda: "skip")
g = lambda t: t * 2
p2 = fp.StreamPipeline(g)
y = x.copy()
case("out= aliases the input (in place), 2 runs", lambda: [p2.run(y, out=y) for _ in range(2)] and bool(np.allclose(y, x * 4)))
case("non-contiguous input x[:, :128]", lambda: p2.run(x[:, :128]).shape)
case("Fortran-order input", lambda: p2.run(np.asfortranarray(x[:1000])).shape)
case("float64 input into a float32 model", lambda: close(pipe.run(x[:5000].astype(np.float64)), ref(x[:5000])))
case("zero rows", lambda: pipe.run(np.empty((0, 256), np.float32)).shape)
case("1-D input, scalar rows", lambda: p2.run(np.arange(1_000_000, dtype=np.float32))[:3])
case("run_batches([])", lambda: pipe.run_batches([]))
case("imap([])", lambda: list(pipe.imap([])))
case("imap of dicts", lambda: list(pipe.imap([{"x": x[:10]}])))
case("compute returns non-contiguous", lambda: close(fp.StreamPipeline(lambda t: lin(t.float()).t().contiguous().t()).run(x[:4000]), ref(x[:4000])))
case("compute returns a CPU tensor", lambda: fp.StreamPipeline(lambda t: lin(t.float()).cpu()).run(x[:4000]).shape)
case("compute returns a 0-d/fewer rows", lambda: fp.StreamPipeline(lambda t: t.sum()).run(x[:4000]).shape)
case("compute changes rows (t[::2])", lambda: fp.StreamPipeline(lambda t: t[::2]).run(x[:4000]).shape)
case("compute returns int64", lambda: fp.StreamPipeline(lambda t: t.argmax(dim=1)).run(x[:4000])[:5])
case("compute returns bool", lambda: fp.StreamPipeline(lambda t: t[:, 0] > 0).run(x[:4000])[:5])
case("compute returns a tuple", lambda: fp.StreamPipeline(lambda t: (t, t)).run(x[:4000]).shape)
pc = fp.StreamPipeline(f); pc.close()
case("run after close()", lambda: pc.run(x[:1000]).shape)
case("torch pinned in, new out", lambda: (lambda t: (pipe.run(t).is_pinned(), close(pipe.run(t), ref(x[:50000]))))(torch.from_numpy(x[:50000]).pin_memory()))
case("torch float16 CPU tensor in", lambda: pipe.run(torch.from_numpy(x[:5000]).half()).dtype)
case("torch bfloat16 CPU tensor in", lambda: pipe.run(torch.from_numpy(x[:5000]).bfloat16()).dtype)
case("torch tensor requiring grad", lambda: pipe.run(torch.from_numpy(x[:5000]).requires_grad_()).shape)
case("CUDA tensor in (should refuse)", lambda: pipe.run(torch.from_numpy(x[:5000]).cuda()).shape)
big = np.random.standard_normal((1 << 16, 1024)).astype(np.float32)  # 256 MiB
views = [big[i:i + 8192] for i in range(0, 1 << 16, 4096)]  # overlapping views (sliding window, stride half)
p3 = fp.StreamPipeline(g)
case("overlapping views, run_batches x3", lambda: all(np.array_equal(o, v * 2) for _ in range(3) for o, v in zip(p3.run_batches(views), views)))
case("... then run(big) x2", lambda: [bool(np.array_equal(p3.run(big), big * 2)) for _ in range(2)] + [p3.stats.staging])
case("imap over the same views x2", lambda: [all(np.array_equal(o, v * 2) for o, v in zip(p3.imap(iter(views)), views)) for _ in range(2)])
case("imap with break then reuse", lambda: (next(iter(p3.imap(iter(views)))).shape, p3.run(big[:4096]).shape))
def gen_fail():
    yield big[:4096]
    raise KeyError("bad record")
case("imap generator raising", lambda: list(p3.imap(gen_fail())))
case("stats after imap", lambda: (p3.imap_stats, str(p3.stats).splitlines()[0]))
case("run_batches of tuples", lambda: p3.run_batches([(big[:10], 1)]))
class Ds(torch.utils.data.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i): return {"x": torch.randn(256), "y": i}
loader = torch.utils.data.DataLoader(Ds(), batch_size=16)
case("imap of DataLoader yielding dicts", lambda: list(pipe.imap(loader)))
case("imap of DataLoader dicts, mapped", lambda: [y.shape for y in pipe.imap(b["x"] for b in loader)])
