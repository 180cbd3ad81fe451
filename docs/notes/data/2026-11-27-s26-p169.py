"""p169: debug stream-K: launch with our own workspace and read it back."""
import torch
from fullpipe.kernels import hopper_gemm as hg
m, n, k = 130, 520, 1000
torch.manual_seed(0)
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
out = torch.zeros((m, n), device="cuda", dtype=torch.bfloat16)
arch, _ = hg.arch_and_sm_count(0)
p = hg.plan("persistent", m, n, k, "bfloat16", a.data_ptr(), b.data_ptr(), out.data_ptr(), max_clusters=66)
print("plan", p.grid, p.sk_tiles, p.workspace_bytes, p.workspace_zeroed)
ws = torch.full((p.workspace_bytes,), 7, dtype=torch.uint8, device="cuda")
s = torch.cuda.current_stream().cuda_stream
L = hg._prepare(p, a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, k, s, 0, arch)
L.enqueue(ws.data_ptr())
torch.cuda.synchronize()
hdr = ws[:256].view(torch.int32)
print("counter", int(hdr[0]))
C = p.grid // 2
nflags = C * 2 * 2
flags = ws[256:256 + nflags * 4].view(torch.int32).view(C, 2, 2)
print("flags (unit, rank, wg):", flags.tolist())
fb = -(-nflags * 4 // 256) * 256
parts = ws[256 + fb:].view(torch.float32).view(C, 2, 2, 32, 128, 4)
# expected partials: unit u in (0, 2, 4): tile t = 2 - u // 2, slices [8, 16)
t_idx = torch.arange(128)
warp, lane = t_idx // 32, t_idx % 32
for u in (0, 2, 4):
    tile = 2 - u // 2
    for rank in (0, 1):
        for wg in (0, 1):
            r0, c0 = rank * 128 + wg * 64, tile * 256
            A = torch.zeros(64, 1024, dtype=torch.float64, device="cuda"); Bm = torch.zeros(1024, 256, dtype=torch.float64, device="cuda")
            ar = a[r0:r0 + 64, :].double(); A[:ar.shape[0], :ar.shape[1]] = ar
            bc = b[:, c0:c0 + 256].double(); Bm[:bc.shape[0], :bc.shape[1]] = bc
            exp = A[:, 512:1024] @ Bm[512:1024, :]
            cands = {"[0,8)": A[:, :512] @ Bm[:512], "[0,16)": A @ Bm, "[8,12)": A[:, 512:768] @ Bm[512:768], "[12,16)": A[:, 768:] @ Bm[768:]}
            got = torch.zeros(64, 256, dtype=torch.float64, device="cuda")
            P = parts[u, rank, wg].double()  # (32 j, 128 t, 4)
            for j in range(32):
                for h in range(2):
                    for e in range(2):
                        rows = (warp * 16 + lane // 4 + 8 * h).cuda()
                        cols = (j * 8 + (lane % 4) * 2 + e).cuda()
                        got[rows, cols] = P[j, :, 2 * h + e]
            mask = exp.abs().sum() > 0
            print(f"unit {u} rank {rank} wg {wg}: |exp| {float(exp.norm()):.1f} |got| {float(got.norm()):.1f} err {float((got - exp).norm() / max(exp.norm(), 1e-9)):.3f} "
                  + " ".join(f"{kk} {float((got - v).norm() / max(v.norm(), 1e-9)):.3f}" for kk, v in cands.items()))
            if u == 0 and rank == 0 and wg == 0:
                print("got[0,:8]", got[0, :8].tolist()); print("exp[0,:8]", exp[0, :8].tolist())
                print("raw P[0,0,:]", P[0, 0].tolist(), "P[0,1,:]", P[0, 1].tolist())
