"""p167: debug stream-K: which part of the sum is in the output."""
import torch
from fullpipe.kernels import hopper_gemm as hg
torch.manual_seed(0)
for (m, n, k) in [(130, 520, 1000), (512, 256, 4096)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    p = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=66)
    print((m, n, k), "sk", p.sk_tiles, "grid", p.grid, "ws", p.workspace_bytes, p.workspace_zeroed)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    hg.gemm_hopper(a, b, out=out); torch.cuda.synchronize()
    ref = a.double() @ b.double()
    S = -(-k // 64)
    for lo, hi in [(0, 8), (8, 16), (0, 16), (0, 1), (0, 4)]:
        if hi > S: continue
        part = a[:, lo * 64:hi * 64].double() @ b[lo * 64:hi * 64].double()
        print(f"  vs slices [{lo},{hi}): {float((out.double() - part).norm() / part.norm()):.3f}")
    print("  vs full", float((out.double() - ref).norm() / ref.norm()), "zero frac", float((out == 0).double().mean()), "nan", int(out.isnan().sum()))
    for r0 in range(0, m, 64):
        for c0 in range(0, n, 256):
            o, rr = out[r0:r0 + 64, c0:c0 + 256].double(), ref[r0:r0 + 64, c0:c0 + 256]
            print(f"   block rows {r0} cols {c0}: err {float((o - rr).norm() / rr.norm()):.3f}")
