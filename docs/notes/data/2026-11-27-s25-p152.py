"""Does a tensor function's second call at a size pay allocations when it runs on another
stream? bf16 MLP 1024->4096->1024 on float32 rows (the copy-heavy workload's compute), host
time of each call (no sync inside), device-resident input, at 2 / 8 / 32 MiB."""
import time, torch
dev = torch.device("cuda")
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev, torch.bfloat16)
@torch.inference_mode()
def f(x):
    return mlp(x.to(torch.bfloat16)).float()
s = [torch.cuda.Stream() for _ in range(3)]
def call(x, st):
    torch.cuda.set_stream(st)
    t0 = time.perf_counter(); y = f(x); t = time.perf_counter() - t0
    torch.cuda.synchronize(); del y
    return t * 1e6
for mib in (2, 8, 32):
    rows = mib * 2**20 // 4096
    x = torch.randn(rows, 1024, device=dev)
    a = call(x, s[0]); b = call(x, s[1]); c = call(x, s[0]); d = call(x, s[2]); e = call(x, s[1])
    print(f"{mib:3d} MiB: first {a:7.0f} us (stream 0), then stream 1 {b:7.0f}, stream 0 again {c:7.0f}, "
          f"stream 2 {d:7.0f}, stream 1 again {e:7.0f}; reserved {torch.cuda.memory_reserved()/2**20:.0f} MiB")
torch.cuda.set_stream(torch.cuda.default_stream())
