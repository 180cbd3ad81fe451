"""p119 (session 20): correctness when the pin cache sees new arrays at reused addresses:
imap over np.load'ed files (x * 2, exact) and a plain run() loop over them, every output
checked bit-exact; registrations and staging counted."""
import os, tempfile, collections, numpy as np, torch, fullpipe as fp
from fullpipe.cuda.pin_cache import default_pin_cache
d = tempfile.mkdtemp(dir="/dev/shm")
paths = []
for i in range(24):
    p = os.path.join(d, f"b{i}.npy"); np.save(p, np.random.default_rng(i).standard_normal((8192, 1024), dtype=np.float32)); paths.append(p)
want = [2 * np.load(p) for p in paths]
f = lambda x: x * 2
pool = fp.DevicePool(0, release_threshold="max")
pipe = fp.StreamPipeline(f, pool=pool)
bad = 0
staged = collections.Counter()
orig = pipe._run_batches
def spy(items, outs=None, **kw):
    r = orig(items, outs, **kw); staged[pipe.stats.staging.get("input")] += 1; return r
pipe._run_batches = spy
for rep in range(8):
    c0 = default_pin_cache().stats.registrations
    for i, y in enumerate(pipe.imap(np.load(p) for p in paths)):
        bad += not np.array_equal(y, want[i])
    print(f"imap pass {rep}: wrong outputs so far {bad}, registrations +{default_pin_cache().stats.registrations - c0}, windows by staging {dict(staged)}", flush=True)
    staged.clear()
bad2 = 0
runs = collections.Counter()
for rep in range(3):
    c0 = default_pin_cache().stats.registrations
    for i, p in enumerate(paths):
        y = pipe.run(np.load(p))
        bad2 += not np.array_equal(y, want[i])
        runs[pipe.stats.staging.get("input")] += 1
    print(f"run loop pass {rep}: wrong {bad2}, registrations +{default_pin_cache().stats.registrations - c0}, staging {dict(runs)}", flush=True)
    runs.clear()
# a run() loop over files of 96 MiB (over the cache's 64 MiB): new arrays at reused addresses
paths2 = []
for i in range(6):
    p = os.path.join(d, f"c{i}.npy"); np.save(p, np.random.default_rng(100 + i).standard_normal((24576, 1024), dtype=np.float32)); paths2.append(p)
want2 = [2 * np.load(p) for p in paths2]
bad3 = 0
for rep in range(3):
    c0 = default_pin_cache().stats.registrations
    for i, p in enumerate(paths2):
        y = pipe.run(np.load(p))
        bad3 += not np.array_equal(y, want2[i])
        runs[pipe.stats.staging.get("input")] += 1
    print(f"96 MiB run loop pass {rep}: wrong {bad3}, registrations +{default_pin_cache().stats.registrations - c0}, staging {dict(runs)}", flush=True)
    runs.clear()
x = np.load(paths2[0])
for rep in range(3):
    y = pipe.run(x)
print("the same 96 MiB array 3 times: staging", pipe.stats.staging, "correct", np.array_equal(y, want2[0]))
print("TOTAL wrong outputs: imap", bad, "run loop", bad2, "96 MiB loop", bad3)
