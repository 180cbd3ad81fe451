"""p168: debug stream-K with SK_DEBUG builds (1: partials added into acc, 2: partials ignored)."""
import torch
from fullpipe.kernels import hopper_gemm as hg
orig = hg.PersistentBuild.defines
for dbg in (0, 1, 2):
    hg.PersistentBuild.defines = lambda self, dbg=dbg: {**orig(self), "SK_DEBUG": dbg}
    hg._LAUNCHES.clear()
    torch.manual_seed(0)
    for (m, n, k) in [(130, 520, 1000), (512, 256, 4096), (3072, 3072, 256)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        hg.gemm_hopper(a, b, out=out); torch.cuda.synchronize()
        ref = a.double() @ b.double()
        first = a[:, :512].double() @ b[:512].double()
        print(dbg, (m, n, k), f"vs full {float((out.double() - ref).norm() / ref.norm()):.3f}  vs first 8 slices {float((out.double() - first).norm() / first.norm()):.3f}", flush=True)
