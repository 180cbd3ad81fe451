"""Compile the persistent GEMM builds again and again, caching off, in one process, passing NVRTC the source
and name as temporaries (the code before 1637b8b) or held (after): does nvrtcCompileProgram crash?"""
import gc, os, sys, time
from cuda.bindings import nvrtc
from fullpipe.cuda import compiler
from fullpipe.kernels import hopper_gemm as hg

mode = sys.argv[1]  # "temp" or "held"
rounds = int(sys.argv[2])
src_path = compiler.PACKAGE_ROOT / hg.SOURCES["persistent"]
text = open(src_path).read()
inc = [f"-I{d}" for d in compiler.include_dirs()]
builds = list(hg.SWEEP_BUILDS)
t0 = time.time()
for r in range(rounds):
    for b in builds:
        defs = [f"-D{k}={v}" for k, v in b.defines().items()]
        opts = ["-default-device", *defs, "-arch=sm_90a", "-Xptxas=-v", *inc]
        if mode == "temp":
            err, prog = nvrtc.nvrtcCreateProgram(text.encode(), b"gemm_hopper_persistent.cu", 0, [], [])
            junk = [bytes(os.urandom(64)) * 50 for _ in range(200)]  # (reuse freed memory meanwhile)
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        else:
            s, n = text.encode(), b"gemm_hopper_persistent.cu"
            err, prog = nvrtc.nvrtcCreateProgram(s, n, 0, [], [])
            junk = [bytes(os.urandom(64)) * 50 for _ in range(200)]
            enc = [o.encode() for o in opts]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(enc), enc)
        if int(err) != 0:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            buf = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, buf)
            print("COMPILE ERROR", b.label, buf[:400], flush=True)
        nvrtc.nvrtcDestroyProgram(prog)
        del junk
        gc.collect()
    print(f"round {r} ok, {time.time() - t0:.0f}s", flush=True)
