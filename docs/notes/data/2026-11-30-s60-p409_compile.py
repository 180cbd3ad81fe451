"""p409 (session 60): which of p407's builds NVRTC 13.0 compiles (each in its own process: ptxas may segfault)."""
import subprocess, sys, json
from concurrent.futures import ThreadPoolExecutor
sys.argv = ["p407", "layers"]
src = open(".dev/p407.py").read().split("arg = sys.argv")[0]
src = src.replace("sms = torch.cuda.get_device_properties(0).multi_processor_count", "sms = 132").replace("s = torch.cuda.current_stream()", "")
exec(src)
builds = {}
for arg in ("layers", "seed:406:40"):
    for m, n, k in shapes(arg):
        for lay in (True, False):
            for b in variants(m, n, k, lay).values():
                builds[b.label] = b
print(len(builds), "builds", flush=True)
import dataclasses
def one(b):
    code = ("import sys; from fullpipe.kernels import hopper_gemm as hg; "
            f"hg.module('persistent', 'sm_90a', build=hg.PersistentBuild(**{dataclasses.asdict(b)!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return b.label, r.returncode, r.stderr[-300:]
with ThreadPoolExecutor(16) as pool:
    res = list(pool.map(one, builds.values()))
bad = [(l, rc, e) for l, rc, e in res if rc != 0]
for l, rc, e in bad:
    print("FAIL", l, rc, e.strip().splitlines()[-1] if e.strip() else "")
print(f"{len(res) - len(bad)} compiled, {len(bad)} failed")
