"""p381: compile one swap build (argv: m tile_m cluster_m) with the device's NVRTC; prints OK or dies."""
import sys
from fullpipe.kernels import hopper_gemm as hg
m, tm, cm = map(int, sys.argv[1:4])
b = hg.swap_build(m, tm, cm)
mod = hg.module("persistent", "sm_90a", build=b)
print("OK", b.label, {k: (r.registers, r.spills) for k, r in mod.resources.items()}, flush=True)
