"""p140 (session 23): computes whose output is a buffer written again by the next call, through the
pipelined (long) way on 3 streams: torch.compile(mode="reduce-overhead") (CUDA-graph static outputs)
and a hand-written compute returning one reused buffer. Counts rows that differ from the eager loop."""
import time, traceback
import torch, fullpipe as fp
torch.manual_seed(0)
pool = fp.DevicePool(0, release_threshold="max")
lin = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda().to(torch.bfloat16).eval()
@torch.inference_mode()
def eager(x):
    return lin(x.to(torch.bfloat16)).float()
compiled_lin = torch.compile(lin, mode="reduce-overhead")
@torch.inference_mode()
def compiled(x):
    return compiled_lin(x.to(torch.bfloat16)).float()
@torch.inference_mode()
def compiled_bf16_out(x):       # the graph's static output itself is returned
    return compiled_lin(x.to(torch.bfloat16))
buf = {}
@torch.inference_mode()
def reused(x):                   # one output buffer written again by every call
    b = buf.get(x.shape)
    if b is None:
        b = buf[x.shape] = torch.empty(x.shape[0], 1024, device=x.device, dtype=torch.bfloat16)
    torch.matmul(x.to(torch.bfloat16), lin[0].weight[:1024, :1024].t(), out=b)
    return b
def rows_off(y, ref, tol):
    d = (y.float() - ref.float()).abs().amax(dim=1)
    return int((d > tol).sum())
x = torch.randn(65536, 1024)          # 256 MiB pageable float32
xp = x.pin_memory()
t0 = time.perf_counter()
for f, name in ((compiled, "compiled"), (compiled_bf16_out, "compiled bf16 out")):
    for _ in range(3):
        f(torch.randn(4096, 1024, device="cuda"))
print(f"compile+warm {time.perf_counter() - t0:.1f} s", flush=True)
ref_f32 = torch.cat([eager(x[i:i + 4096].cuda()).cpu() for i in range(0, x.shape[0], 4096)])
ref_reused = torch.cat([reused(x[i:i + 4096].cuda()).cpu() for i in range(0, x.shape[0], 4096)])
for name, f, ref, tol in (("compiled, .float()", compiled, ref_f32, 0.05),
                          ("compiled, static out", compiled_bf16_out, ref_f32, 0.05),
                          ("reused buffer", reused, ref_reused, 0.0)):
    for inp_name, inp in (("pageable", x), ("pinned", xp)):
        for chunk in ("16MiB", "auto"):
            try:
                with fp.StreamPipeline(f, pool=pool, chunk=chunk) as pipe:
                    bad = []
                    for r in range(4):
                        y = pipe.run(inp)
                        bad.append(rows_off(y, ref, tol))
                    st = pipe.stats
                    print(f"{name:22s} {inp_name:8s} chunk={chunk:6s} run(): rows off per run {bad} of {x.shape[0]}; "
                          f"batches {st.batches} streams {st.streams}", flush=True)
                    xs = [inp[i:i + 4096] for i in range(0, x.shape[0], 4096)]
                    bad = []
                    for r in range(3):
                        ys = pipe.run_batches(xs)
                        bad.append(rows_off(torch.cat(ys), ref, tol))
                    print(f"{name:22s} {inp_name:8s} chunk={chunk:6s} run_batches(16x4096 rows): rows off {bad}", flush=True)
                    xs = [inp[i:i + 1024] for i in range(0, 32 * 1024, 1024)]
                    bad = []
                    for r in range(3):
                        ys = pipe.run_batches(xs)
                        bad.append(rows_off(torch.cat(ys), ref[:32 * 1024], tol))
                    print(f"{name:22s} {inp_name:8s} chunk={chunk:6s} run_batches(32x1024 rows): rows off {bad}", flush=True)
            except Exception as e:
                print(f"{name:22s} {inp_name:8s} chunk={chunk}: {type(e).__name__}: {str(e)[:300]}", flush=True)
