"""p331: the variable-length list at --quick's size (29 encoder batches): who holds the GIL. Run under
`py-spy record --gil`: argv mode ("fp": fullpipe's defaults, run_batches(xs, outs=ys); "alone": the one-stream
loop on device-resident batches; "threads": the same on 3 threads), seconds. Prints runs and ms per run, and the
process's CPU seconds per run (all threads)."""
import os, queue, sys, threading, time
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

mode, secs = sys.argv[1], float(sys.argv[2])
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
ss = [torch.cuda.Stream() for _ in range(3)]
xd = [t.to(dev) for t in xs]
torch.cuda.synchronize()


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


if mode == "fp":
    p = fp.StreamPipeline(f)
    fn = lambda: p.run_batches(xs, outs=ys)  # noqa: E731
elif mode == "threads":
    fn = Threads()
else:
    fn = alone
for _ in range(14):
    fn()
torch.cuda.synchronize()
if mode == "fp":
    print("list_path", p.stats.list_path, flush=True)
print("MARK start", flush=True)
t0, c0, n = time.perf_counter(), os.times(), 0
while time.perf_counter() - t0 < secs:
    fn(); n += 1
torch.cuda.synchronize()
t1, c1 = time.perf_counter(), os.times()
cpu = (c1.user - c0.user) + (c1.system - c0.system)
print(f"RESULT {mode:8s} {n} runs, {1e3 * (t1 - t0) / n:.2f} ms/run, CPU {1e3 * cpu / n:.2f} ms/run "
      f"(user {1e3 * (c1.user - c0.user) / n:.2f}, sys {1e3 * (c1.system - c0.system) / n:.2f})", flush=True)
if mode == "fp":
    st = p.stats
    print("host_us", {k: round(v) for k, v in st.host_us.items()}, "threads", st.compute_threads, flush=True)
