"""p351: does the hot path's GIL release (ctypes.CDLL) cost the threads way of the variable-length list? The
same list through two pipelines, one whose HotPath binds libcuda through CDLL (releases the GIL each call), one
through PyDLL (keeps it), in alternating rounds beside compute alone on one stream and a 3-thread hand loop."""
import ctypes, queue, statistics, sys, threading, time
import torch
import fullpipe as fp
from fullpipe.cuda import hotpath
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256 * 1024
w = W._variable_length(torch, dev, tokens, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
ss = [torch.cuda.Stream() for _ in range(3)]
xd = [t.to(dev) for t in xs]
torch.cuda.synchronize()
print(f"{len(xs)} batches, switch interval {sys.getswitchinterval()}", flush=True)


def alone1():
    with torch.cuda.stream(ss[0]):
        for x in xd:
            f(x)
    ss[0].synchronize()


class Threads:
    def __init__(self, n=3):
        self.qs = [queue.Queue() for _ in range(n)]
        self.done = queue.Queue()
        for i in range(n):
            threading.Thread(target=self.work, args=(i,), daemon=True).start()

    def work(self, i):
        torch.cuda.set_device(0)
        while True:
            x = self.qs[i].get()
            with torch.inference_mode(), torch.cuda.stream(ss[i]):
                f(x)
            self.done.put(i)

    def __call__(self):
        n = len(self.qs)
        for k, x in enumerate(xd):
            if k >= n:
                self.done.get()
            self.qs[k % n].put(x)
        for _ in range(min(n, len(xd))):
            self.done.get()
        for s in ss:
            s.synchronize()


th = Threads()
p_c = fp.StreamPipeline(f)
hotpath._libcuda = ctypes.PyDLL("libcuda.so.1")
p_py = fp.StreamPipeline(f)
p_py._start()
hotpath._libcuda = None
p_c._start()
print("hot types", type(p_c._hot._fn["cuEventRecord"]).__name__, type(p_py._hot._fn["cuEventRecord"]).__name__,
      p_c._hot._fn["cuEventRecord"]._flags_, p_py._hot._fn["cuEventRecord"]._flags_, flush=True)
for _ in range(20):
    p_c.run_batches(xs, outs=ys); p_py.run_batches(xs, outs=ys)
print("paths", p_c.stats.list_path["path"], p_py.stats.list_path["path"], flush=True)
for _ in range(3):
    th(); alone1()
fns = {"alone 1 stream": alone1, "3 threads alone": th, "fp CDLL": lambda: p_c.run_batches(xs, outs=ys),
       "fp PyDLL": lambda: p_py.run_batches(xs, outs=ys)}
ts = {k: [] for k in fns}
extra = {k: [] for k in ("fp CDLL", "fp PyDLL")}
for r in range(30):
    for k in (list(fns) if r % 2 else list(fns)[::-1]):
        torch.cuda.synchronize(); t = time.perf_counter(); fns[k](); torch.cuda.synchronize()
        ts[k].append((time.perf_counter() - t) * 1e3)
        if k in extra:
            st = (p_c if k == "fp CDLL" else p_py).stats
            extra[k].append((st.host_us.get("front", -1), st.host_us.get("back", -1), st.loop_us_per_batch, st.wall_ms,
                             (st.list_path or {}).get("path")))
base = statistics.median(ts["alone 1 stream"])
for k, v in ts.items():
    line = f"RESULT {k:16s} median {statistics.median(v):6.2f} ms min {min(v):6.2f}  alone/this {base / statistics.median(v):.3f}"
    if k in extra:
        e = extra[k]
        line += (f"  front {statistics.median(x[0] for x in e):5.1f} back {statistics.median(x[1] for x in e):5.1f} "
                 f"loop/batch {statistics.median(x[2] for x in e):6.1f} us wall {statistics.median(x[3] for x in e):6.2f}"
                 f" paths {sorted(set(str(x[4]) for x in e))}")
    print(line, flush=True)
