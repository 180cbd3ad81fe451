"""p371: does a DataLoader's idle persistent workers (or its pin-memory thread) slow fullpipe's variable-length list?
States in one process, each 8 alternating rounds of compute alone (3 runs) and fullpipe (10 runs)."""
import statistics, sys, threading, time
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
p = fp.StreamPipeline(w.f)
for _ in range(20):
    p.run_batches(w.xs, outs=w.ys)
stream = torch.cuda.Stream()
alone = W._compute_alone(torch, dev, w.f, w.xs, stream)


def measure(state):
    ts, tw, ta, call = [], [], [], []
    for r in range(8):
        for _ in range(3):
            t = time.perf_counter(); alone(); ta.append((time.perf_counter() - t) * 1e3)
        for _ in range(10):
            t = time.perf_counter(); p.run_batches(w.xs, outs=w.ys); ts.append((time.perf_counter() - t) * 1e3)
            tw.append(p.stats.wall_ms); call.append(p.stats.host_us.get("compute_call", 0))
    mr, mw, ma = statistics.median(ts), statistics.median(tw), statistics.median(ta)
    print(f"RESULT {state:34s} threads alive {threading.active_count():2d}: fullpipe {mr:.2f} ms (wall {mw:.2f}, call "
          f"{statistics.median(call):.0f} us), alone {ma:.2f}: {ma / mr:.3f}x", flush=True)


def loader(pin):
    dl = torch.utils.data.DataLoader(W._BatchList(w.xs), batch_size=None, shuffle=False, num_workers=4,
                                     pin_memory=pin, persistent_workers=True, multiprocessing_context="fork",
                                     timeout=60)
    for xb in dl:
        pass
    return dl


def close(dl):
    dl._iterator._shutdown_workers()


measure("none")
dl = loader(True); measure("DataLoader pin_memory=True alive"); close(dl); del dl
measure("closed")
dl = loader(False); measure("DataLoader pin_memory=False alive"); close(dl); del dl
measure("closed again")
dl = loader(True); measure("pin_memory=True alive again"); close(dl); del dl
measure("closed again")
