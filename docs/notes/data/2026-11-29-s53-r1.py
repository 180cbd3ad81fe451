"""r1: a fullpipe kernel compiled (NVRTC) before `import torch` -> torch's schema parser fails? Isolate the step."""
import sys
step = sys.argv[1]
from fullpipe.cuda.device import Device
dev = Device(0)
if step in ("mix", "run"):
    from fullpipe.pipeline.workload import MixKernel
    mix = MixKernel(dev, rounds=3)
if step == "nvrtc":  # NVRTC alone: compile a tiny kernel, no module load
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(b'extern "C" __global__ void k(int* p){ p[0] = 1; }', b"k.cu", 0, [], [])
    print("compile", nvrtc.nvrtcCompileProgram(prog, 1, [b"-arch=sm_90a"]))
if step == "pathfinder":  # load libnvrtc only
    from cuda.pathfinder import load_nvidia_dynamic_lib
    print(load_nvidia_dynamic_lib("nvrtc"))
if step == "run":
    import numpy as np
    from fullpipe.pipeline import StreamPipeline
    with StreamPipeline(mix, streams=3, chunk="1MiB", device=dev) as p:
        p.run(np.arange(1 << 20, dtype=np.uint32))
libs = sorted({l.split()[-1].rsplit("/", 1)[-1] for l in open("/proc/self/maps") if ".so" in l})
print(step, "libs before torch:", [l for l in libs if any(k in l for k in ("nvrtc", "stdc++", "cuda", "nvJit", "ptx"))])
try:
    import torch
    print(step, "import torch OK")
except Exception as e:
    print(step, "import torch FAILED:", str(e).splitlines()[:2])
    C = sys.modules["torch._C"]
    for s in ["annotate(str tag) -> ()", "f(Tensor x, int y) -> Tensor"]:
        try:
            C.parse_schema(s); print("  parse_schema ok:", s)
        except Exception as e2:
            print("  parse_schema FAILED:", s, "->", str(e2).splitlines()[:2])
