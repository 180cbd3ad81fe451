import sys
order = sys.argv[1]
def libs(tag):
    got = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'nvrtc' in l.lower()})
    print(tag, got, flush=True)
import torch
libs("after import torch")
torch.zeros(1, device="cuda")
libs("after cuda init")
def ours():
    from fullpipe.kernels import gemm
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    gemm(a, a, variant="hopper", stream=torch.cuda.current_stream()); torch.cuda.synchronize()
    libs("after fullpipe gemm")
def theirs():
    fn = torch.cuda.jiterator._create_jit_fn("template <typename T> T twice(T x){ return x * T(2); }")
    fn(torch.ones(4, device="cuda")); torch.cuda.synchronize()
    libs("after torch jiterator")
for step in (ours, theirs) if order == "ours" else (theirs, ours):
    step()
from cuda.bindings import nvrtc
print("cuda.bindings nvrtcVersion", nvrtc.nvrtcVersion(), "torch.version.cuda", torch.version.cuda, flush=True)
