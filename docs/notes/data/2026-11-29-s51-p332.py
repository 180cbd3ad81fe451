"""p332: the variable-length list at --quick's size (29 encoder batches): does the GIL's switch interval set the
threads' pace? One process, alternating rounds, at switch intervals of 5 ms (Python's default), 1 ms and 0.2 ms:
compute alone (one stream), the calls on 3 threads (hand loop), fullpipe's defaults, compute_threads=3 forced,
compute_threads=1. Medians of ms per run, and CPU ms per run."""
import os, queue, statistics, sys, threading, time
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, int(sys.argv[1]) if len(sys.argv) > 1 else 256 * 1024, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
ss = [torch.cuda.Stream() for _ in range(3)]
xd = [t.to(dev) for t in xs]
torch.cuda.synchronize()
print(f"{len(xs)} batches", flush=True)


def alone():
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


pa, pb, pc = fp.StreamPipeline(f), fp.StreamPipeline(f, compute_threads=3), fp.StreamPipeline(f, compute_threads=1)
fns = {"alone": alone, "hand 3 threads": Threads(), "fp default": lambda: pa.run_batches(xs, outs=ys),
       "fp threads=3": lambda: pb.run_batches(xs, outs=ys), "fp threads=1": lambda: pc.run_batches(xs, outs=ys)}
for _ in range(14):
    for fn in fns.values():
        fn()
torch.cuda.synchronize()
print("fp default list_path", pa.stats.list_path, flush=True)
print("fp threads=1 list_path", pc.stats.list_path, flush=True)
rows = []
for interval in (0.005, 0.001, 0.0002, 0.005):
    sys.setswitchinterval(interval)
    ts = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for r in range(16):
        for k in (list(fns) if r % 2 else list(fns)[::-1]):
            torch.cuda.synchronize(); c0 = os.times(); t = time.perf_counter(); fns[k](); torch.cuda.synchronize()
            t1, c1 = time.perf_counter(), os.times()
            ts[k].append((t1 - t) * 1e3); cpu[k].append((c1.user - c0.user + c1.system - c0.system) * 1e3)
    base = statistics.median(ts["alone"])
    for k in fns:
        m = statistics.median(ts[k])
        rows.append(f"RESULT switch {interval * 1e3:5.1f} ms  {k:15s} median {m:6.2f} ms  alone/this {base / m:.3f}  "
                    f"CPU {statistics.median(cpu[k]):6.2f} ms")
        print(rows[-1], flush=True)
print("fp default list_path after", pa.stats.list_path, flush=True)
