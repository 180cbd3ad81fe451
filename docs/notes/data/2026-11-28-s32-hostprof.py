"""Local: fullpipe's per-batch Python with a null driver (every GPU operation a no-op that
completes at once), to see and trim the executor's own host cost without a GPU.
argv[1]: mode (stream | stream-events | profile)."""
import sys, time, types, statistics
import numpy as np
sys.path.insert(0, "tests")  # (run from the repository root: the fake driver is the tests')
import test_pipeline_fakecuda as T
import fullpipe.cuda.device as fdevice, fullpipe.cuda.driver as fdriver, fullpipe.cuda.events as fevents
import fullpipe.cuda.pinned_pool as fpinned, fullpipe.cuda.pool as fpool, fullpipe.cuda.streams as fstreams
import fullpipe.pipeline.executor as fexec
from fullpipe import StreamPipeline


class NullStream:
    def __init__(self):
        self.handle = self

    def put(self, op):
        op()

    def sync(self):
        pass

    def close(self):
        pass

    def __cuda_stream__(self):
        return (0, id(self))


class NullDriver(T.FakeDriver):
    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        return (0,)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        return (0,)


d = NullDriver()
fdriver.driver = lambda: d
fdevice.Device = T.FakeDevice
fpool.DevicePool = T.FakePool
fstreams.create_stream = lambda dev, **kw: NullStream()
fstreams.return_streams = lambda dev, streams, **kw: None
fstreams.long_lived_streams = lambda dev, n, **kw: [NullStream() for _ in range(n)]
fevents.create_event = lambda dev, **kw: T.FakeEvent()
pinned = set()
fexec.is_pinned = lambda a: a.__array_interface__["data"][0] in pinned
fpinned._default_pool = None


def null_compute(stream, x, y):
    pass


mode = sys.argv[1] if len(sys.argv) > 1 else "stream"
n, rows = 2000, 256
x = np.zeros((n * rows, 16), np.uint32)
y = np.zeros_like(x)
pinned.update({x.__array_interface__["data"][0], y.__array_interface__["data"][0]})
timing = mode == "stream-events"
pipe = StreamPipeline(null_compute, streams=3, chunk=rows, timing=timing)
for _ in range(3):
    pipe.run(x, out=y)
if mode == "profile":
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
    for _ in range(5):
        pipe.run(x, out=y)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)
else:
    res = []
    for _ in range(15):
        pipe.run(x, out=y)
        res.append(pipe.stats.enqueue_us_per_batch)
    print(f"{mode}: enqueue {statistics.median(res):.2f} us/batch; host_us {pipe.stats.host_us}; "
          f"staging {pipe.stats.staging}; loop {pipe.stats.loop_us_per_batch:.2f}")
