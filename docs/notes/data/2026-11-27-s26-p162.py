"""p162: the persistent Hopper GEMM against cuBLAS over shapes a user would try (bf16)."""
import statistics, sys, time
import torch
from fullpipe.kernels import gemm
from fullpipe.kernels import hopper_gemm as hg

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (6144, 6144, 6144), (3072, 3072, 3072), (2048, 2048, 2048),
          (1024, 1024, 1024), (2048, 4096, 4096), (4096, 11008, 4096), (4096, 4096, 11008), (512, 4096, 4096),
          (128, 4096, 4096), (16384, 1024, 1024), (1000, 4096, 4096), (4224, 8128, 4160), (8192, 2048, 8192)]
if len(sys.argv) > 1:
    SHAPES = [tuple(map(int, s.split("x"))) for s in sys.argv[1:]]
s = torch.cuda.current_stream()


def timeit(fn, reps):
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        a.record(); fn(); b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in evs)


print(f"{'M x N x K':>20} {'tiles':>6} {'waves':>6} {'cuBLAS':>8} {'ours':>8} {'ratio':>6} {'err':>8}")
for m, n, k in SHAPES:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    ref = (a.float() @ b.float())
    out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
    gemm(a, b, variant="hopper_persistent", stream=s, out=out)
    torch.cuda.synchronize()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    del ref
    flop = 2.0 * m * n * k
    reps = max(5, min(200, int(2e13 / flop)))
    ours = lambda: gemm(a, b, variant="hopper_persistent", stream=s, out=out)
    cub = lambda: torch.matmul(a, b, out=out)
    for f in (ours, cub):
        timeit(f, 3)
    t_o, t_c = [], []
    for _ in range(3):
        t_o.append(timeit(ours, reps)); t_c.append(timeit(cub, reps))
    to, tc = statistics.median(t_o), statistics.median(t_c)
    ct = hg.cluster_tiles(m, n)
    print(f"{f'{m}x{n}x{k}':>20} {hg.tiles(m, n):>6} {ct / 66:>6.2f} {flop / tc / 1e9:>8.1f} {flop / to / 1e9:>8.1f} "
          f"{tc / to:>6.3f} {err:>8.1e}", flush=True)
