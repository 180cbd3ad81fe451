"""p241 (session 36): where a pipeline's per-batch host cost goes, graphs and not.

1. graph=True whole-run replays at 16/48/96 batches of 8 MiB: the executor's
   enqueue per batch, split into key, lookup and cuGraphLaunch; the graph's nodes.
2. The same exec launched bare; after cuGraphUpload; graphs of only kernels / only
   copies captured the same way (3 lanes) and on one stream: cost per node.
3. The driver floor's calls alone: 96 H2D, 96 launches, 96 D2H, at 8 MiB and 64 KiB,
   from cuMemHostAlloc'd and cuMemHostRegister'd memory.
"""
import ctypes
import statistics
import time

import numpy as np

from fullpipe.cuda import driver as drv
from fullpipe.cuda.device import Device
from fullpipe.cuda.hotpath import HotPath, PackedArgs, handle_int
from fullpipe.cuda.memory import pinned_empty
from fullpipe.cuda.pool import DevicePool
from fullpipe.cuda.streams import create_stream
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.workload import BLOCK, MixKernel

dev = Device(0)
dev.set_current()
d = drv.driver()
hot = HotPath()
CHUNK = 8 << 20
n = CHUNK // 4
B = 96
x = pinned_empty(B * n, np.uint32)
y = pinned_empty(B * n, np.uint32)
x[:] = np.arange(x.size, dtype=np.uint32)
pool = DevicePool(dev, release_threshold="max")
kernel = MixKernel(dev, rounds=4)
med = statistics.median


def P(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- 1. whole-run replays
class Timed:
    def __init__(self, obj, name):
        self.t = []
        f = getattr(obj, name)

        def w(*a, **k):
            t0 = time.perf_counter()
            r = f(*a, **k)
            self.t.append(time.perf_counter() - t0)
            return r
        setattr(obj, name, w)


def node_types(graph):
    nodes, count = drv.call("cuGraphGetNodes", graph, 0)
    nodes, count = drv.call("cuGraphGetNodes", graph, count)
    hist = {}
    for nd in nodes:
        t = drv.call("cuGraphNodeGetType", nd)
        hist[t.name.replace("CU_GRAPH_NODE_TYPE_", "")] = hist.get(t.name.replace("CU_GRAPH_NODE_TYPE_", ""), 0) + 1
    return count, hist


execs = {}
for nb in (16, 48, 96):
    xs, ys = x[: nb * n], y[: nb * n]
    with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, graph=True) as pipe:
        for _ in range(3):
            pipe.run(xs, out=ys)
        rg = pipe._run_graphs
        tk, tl, tn = Timed(rg, "key"), Timed(rg, "lookup"), Timed(rg, "launch")
        enq, loop, wall = [], [], []
        for _ in range(9):
            t0 = time.perf_counter()
            pipe.run(xs, out=ys)
            wall.append(time.perf_counter() - t0)
            enq.append(pipe.stats.enqueue_us_per_batch)
            loop.append(pipe.stats.loop_us_per_batch)
        assert pipe.stats.graph.get("run_graph") == "replayed", pipe.stats.graph
        g = next(iter(rg._cache.values()))
        cnt, hist = node_types(g.graph)
        P(f"[1] batches {nb}: enqueue/batch {med(enq):.2f} us, loop/batch {med(loop):.2f} us, "
          f"run wall {med(wall)*1e3:.2f} ms; per run: key {med(tk.t)*1e6:.1f} us, lookup {med(tl.t)*1e6:.1f} us, "
          f"launch {med(tn.t)*1e6:.1f} us; nodes {cnt} {hist}")
        # 2. the same exec launched bare, and after an upload
        s = pipe._hs[0]
        bare, up_launch, upload = [], [], []
        for _ in range(7):
            drv.call("cuStreamSynchronize", s)
            t0 = time.perf_counter()
            hot.graph_launch(g.exec_h, s)
            bare.append(time.perf_counter() - t0)
            drv.call("cuStreamSynchronize", s)
        for _ in range(7):
            drv.call("cuStreamSynchronize", s)
            t0 = time.perf_counter()
            drv.call("cuGraphUpload", g.exec, s)
            t1 = time.perf_counter()
            hot.graph_launch(g.exec_h, s)
            t2 = time.perf_counter()
            upload.append(t1 - t0)
            up_launch.append(t2 - t1)
            drv.call("cuStreamSynchronize", s)
        P(f"[2] batches {nb}: bare launch {med(bare)*1e6:.1f} us ({med(bare)*1e6/nb:.2f}/batch, "
          f"{med(bare)*1e6/cnt:.2f}/node); upload {med(upload)*1e6:.1f} then launch {med(up_launch)*1e6:.1f} us")

# ---------------------------------------------------------------- 2b. graphs of one kind of node
streams = [create_stream(dev) for _ in range(3)]
hs = [handle_int(s) for s in streams]
lanes = [hot.alloc_from_pool(2 * CHUNK, handle_int(pool.handle), h) for h in hs]
for s in streams:
    s.sync()
args = PackedArgs([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32])
kh, grid = handle_int(kernel.kernel.handle), kernel.grid_for(n)
fork = drv.call("cuEventCreate", 0)
joins = [drv.call("cuEventCreate", 0) for _ in range(3)]


def capture(kind, nbat, nlanes):
    drv.call("cuStreamBeginCapture", streams[0].handle, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    drv.call("cuEventRecord", fork, streams[0].handle)
    for k in range(1, nlanes):
        drv.call("cuStreamWaitEvent", streams[k].handle, fork, 0)
    xs, ys = x.ctypes.data, y.ctypes.data
    for i in range(nbat):
        lane = i % nlanes
        h, p = hs[lane], lanes[lane]
        if kind in ("copies", "all"):
            hot.memcpy_htod(p, xs + i * CHUNK, CHUNK, h)
        if kind in ("kernels", "all"):
            args.set(p, p + CHUNK, n, 0)
            hot.launch(kh, grid, BLOCK, args, h)
        if kind in ("copies", "all"):
            hot.memcpy_dtoh(ys + i * CHUNK, p + CHUNK, CHUNK, h)
    for k in range(1, nlanes):
        drv.call("cuEventRecord", joins[k], streams[k].handle)
        drv.call("cuStreamWaitEvent", streams[0].handle, joins[k], 0)
    graph = drv.call("cuStreamEndCapture", streams[0].handle)
    exe = drv.call("cuGraphInstantiate", graph, 0)
    return graph, exe


for kind in ("kernels", "copies", "all"):
    for nlanes in (1, 3):
        graph, exe = capture(kind, 96, nlanes)
        cnt, hist = node_types(graph)
        eh = handle_int(exe)
        t = []
        for _ in range(9):
            drv.call("cuStreamSynchronize", streams[0].handle)
            t0 = time.perf_counter()
            hot.graph_launch(eh, hs[0])
            t.append(time.perf_counter() - t0)
        drv.call("cuStreamSynchronize", streams[0].handle)
        P(f"[2b] {kind:8s} lanes {nlanes}: nodes {cnt:4d} {hist}: launch {med(t)*1e6:7.1f} us, "
          f"{med(t)*1e6/cnt:.2f} us/node, {med(t)*1e6/96:.2f} us/batch")
        drv.call("cuGraphExecDestroy", exe)
        drv.call("cuGraphDestroy", graph)

# ---------------------------------------------------------------- 3. the floor's calls alone
reg = np.empty(B * n, np.uint32)
reg[:] = 1
drv.call("cuMemHostRegister", reg.ctypes.data, reg.nbytes, 0)
for label, host in (("cuMemHostAlloc", x), ("cuMemHostRegister", reg)):
    hp = host.ctypes.data
    for size in (CHUNK, 64 << 10):
        res = {}
        for what in ("h2d", "launch", "d2h", "all3"):
            t = []
            for _ in range(5):
                for s in streams:
                    s.sync()
                t0 = time.perf_counter()
                for i in range(B):
                    lane = i % 3
                    h, p = hs[lane], lanes[lane]
                    if what in ("h2d", "all3"):
                        hot.memcpy_htod(p, hp + i * size, size, h)
                    if what in ("launch", "all3"):
                        args.set(p, p + CHUNK, size // 4, 0)
                        hot.launch(kh, kernel.grid_for(size // 4), BLOCK, args, h)
                    if what in ("d2h", "all3"):
                        hot.memcpy_dtoh(hp + i * size, p + CHUNK, size, h)
                t.append((time.perf_counter() - t0) * 1e6 / B)
            res[what] = med(t)
        P(f"[3] {label:17s} {size >> 10:5d} KiB: " + ", ".join(f"{k} {v:.2f}" for k, v in res.items()) + " us/batch")
for s in streams:
    s.sync()
drv.call("cuMemHostUnregister", reg.ctypes.data)
for p, h in zip(lanes, hs):
    hot.free_async(p, h)
for s in streams:
    s.sync()
P("done")
