"""p304: the variable-length list at --quick's size (29 encoder batches): where fullpipe's time per run goes
outside the batches' own calls. (1) per run: the caller's wall against stats.wall_ms (the loop and drain) and its
parts; (2) cProfile of the caller's thread over 40 runs; (3) the calls alone on 3 threads (device-resident, no
fullpipe) against the one-stream loop, in alternating rounds."""
import cProfile, pstats, queue, statistics, threading, time, sys
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256 * 1024
w = W._variable_length(torch, dev, tokens, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
ss = [torch.cuda.Stream() for _ in range(3)]
xd = [t.to(dev) for t in xs]
torch.cuda.synchronize()
print(f"{len(xs)} batches", flush=True)


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
p = fp.StreamPipeline(f)
for _ in range(14):
    p.run_batches(xs, outs=ys)
print("list_path", p.stats.list_path, flush=True)
for _ in range(3):
    th(); alone1()

rec = []
for _ in range(30):
    torch.cuda.synchronize(); t = time.perf_counter(); p.run_batches(xs, outs=ys); outer = (time.perf_counter() - t) * 1e3
    st = p.stats
    rec.append((outer, st.wall_ms, st.gpu_span_ms or 0, st.bulk_drain_ms, (st.compute_threads or {}).get("wait_ms", 0),
                st.host_wait_ms, st.loop_us_per_batch * st.batches / 1e3))
med = [statistics.median(c) for c in zip(*rec)]
print("per run (ms, medians of 30): outer %.2f | stats.wall %.2f | gpu span %.2f | bulk drain %.2f | call wait %.2f | "
      "staging wait %.2f | loop host %.2f" % tuple(med), flush=True)
print("  host_us", {k: round(v) for k, v in p.stats.host_us.items()}, "compute_threads", p.stats.compute_threads,
      "bulk early", p.stats.bulk_drained_early, "uploads", p.stats.bulk_uploads, flush=True)

pr = cProfile.Profile()
pr.enable()
for _ in range(40):
    p.run_batches(xs, outs=ys)
torch.cuda.synchronize()
pr.disable()
s = pstats.Stats(pr)
s.sort_stats("tottime").print_stats(30)
s.sort_stats("cumulative").print_stats(45)

ts = {"alone 1 stream": [], "3 threads alone": [], "fp default": []}
fns = {"alone 1 stream": alone1, "3 threads alone": th, "fp default": lambda: p.run_batches(xs, outs=ys)}
for r in range(25):
    for k in (list(fns) if r % 2 else list(fns)[::-1]):
        torch.cuda.synchronize(); t = time.perf_counter(); fns[k](); torch.cuda.synchronize()
        ts[k].append((time.perf_counter() - t) * 1e3)
base = statistics.median(ts["alone 1 stream"])
for k, v in ts.items():
    print(f"RESULT {k:16s} median {statistics.median(v):6.2f} ms min {min(v):6.2f}  alone/this {base / statistics.median(v):.3f}",
          flush=True)
