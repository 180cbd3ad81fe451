"""p157's dtype cases one by one (each prints its own line)."""
import numpy as np, torch
import fullpipe as fp
def one(name, fn):
    try:
        print(f"{name:12s} {fn()}")
    except Exception as e:
        print(f"{name:12s} RAISED {type(e).__name__}: {str(e)[:200]}")
x16 = np.random.default_rng(3).random((50000, 64)).astype(np.float16)
one("f16", lambda: (lambda y: f"{y.dtype} ok={np.array_equal(y, x16 * 2)}")(fp.StreamPipeline(lambda t: t * 2).run(x16)))
xb = np.random.default_rng(4).random((100000, 8)) > 0.5
one("bool", lambda: (lambda y: f"{y.dtype} ok={np.array_equal(y, xb.sum(1))}")(fp.StreamPipeline(lambda t: t.sum(dim=1, dtype=torch.int32)).run(xb)))
x1 = np.arange(1_000_000, dtype=np.float32)
one("1-D", lambda: (lambda y: f"{y.shape} {y.dtype} ok={np.array_equal(y, x1 + 1)}")(fp.StreamPipeline(lambda t: t.double() + 1).run(x1)))
xt = torch.randn(64, 200000).T
one("torch .T", lambda: (lambda y: f"{tuple(y.shape)} ok={torch.allclose(y, xt * 3)}")(fp.StreamPipeline(lambda t: t * 3).run(xt)))
xn = np.random.default_rng(5).random((64, 200000), dtype=np.float32).T
one("numpy .T", lambda: (lambda y: f"{y.shape} ok={np.allclose(y, xn * 3)}")(fp.StreamPipeline(lambda t: t * 3).run(xn)))
xs = np.random.default_rng(6).random((400000, 16), dtype=np.float32)[::2]
one("numpy [::2]", lambda: (lambda y: f"{y.shape} ok={np.allclose(y, xs * 3)}")(fp.StreamPipeline(lambda t: t * 3).run(xs)))
