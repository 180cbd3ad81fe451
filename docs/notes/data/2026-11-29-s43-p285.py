"""p285: chunk='auto' on the copy-heavy MLP (bench workloads' sequence of calls): what the
tuner believes after each run, and the fixed chunks beside it. Session 43."""
import re, sys, time
import torch
from fullpipe import StreamPipeline

def mlp_fn():
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(torch.bfloat16).cuda().eval()
    def f(t):
        with torch.inference_mode():
            return mlp(t.to(torch.bfloat16)).float()
    return f

def show(tag, pipe, ms):
    st = pipe.stats; c = st.chunk or {}
    reason = c.get("reason", "") or ""
    host = re.search(r"host (\d+) us", reason)
    print(f"  {tag:10s} {ms:7.2f} ms  chunk {c.get('bytes', 0)/2**20:6.1f} MiB  src={c.get('source')!s:22s} "
          f"refined={c.get('refined_runs')} model_host={host.group(1) if host else '-':>5s} us  "
          f"enq={st.enqueue_us_per_batch:6.1f} us  batches={st.batches} staging={st.staging}")
    if VERBOSE and st.staging.get("output") != "ring":
        print("     reason:", reason)
        for k, t in pipe._tuned.items():
            if tuple(k[2:4]) == ("direct", "direct"):
                print(f"     tuned: host {t.host.fixed_s*1e6:.0f} us refined {t.refined} kept {t.kept_bytes/2**20:.1f} MiB "
                      f"new_shape {t.new_shape_s*1e3:.2f} ms run {t.run_s*1e3:.2f} ms costly {t.costly_shapes} "
                      f"kept_loss {t.kept_loss_s*1e3:.2f} ms for {t.kept_loss_for/2**20:.1f} MiB")

def run(total_mib, seq_runs=8):
    rows = total_mib * 2**20 // 4096
    f = mlp_fn()
    x = torch.randn(rows, 1024); fout = torch.empty_like(x)
    print(f"=== {total_mib} MiB")
    with StreamPipeline(f, streams=3, chunk="auto") as pipe:
        for i in range(seq_runs):
            for tag, o in (("out=fout", fout), ("new out", None)):
                torch.cuda.synchronize(); t0 = time.perf_counter(); pipe.run(x, out=o); ms = (time.perf_counter() - t0) * 1e3
                show(f"{i}:{tag}", pipe, ms)
        print("  last reason:", (pipe.stats.chunk or {}).get("reason"))
        for k, t in pipe._tuned.items():
            print("  tuned", k[1:] if isinstance(k, tuple) else k, "host", t.host, "refined", t.refined,
                  {s: (round(m.fixed_s * 1e6, 1), round(1e-9 / m.per_byte_s, 1) if m.per_byte_s else 0) for s, m in t.models.items()})
    res = {}
    for chunk in ("8MiB", "16MiB", "32MiB", "64MiB"):
        with StreamPipeline(f, streams=3, chunk=chunk) as p:
            ts = []
            for _ in range(5):
                torch.cuda.synchronize(); t0 = time.perf_counter(); p.run(x, out=fout); ts.append((time.perf_counter() - t0) * 1e3)
            res[chunk] = sorted(ts)[2]
    print("  fixed:", {k: round(v, 2) for k, v in res.items()})

VERBOSE = True
for mib in [int(a) for a in sys.argv[1:]] or [256, 1024]:
    run(mib)
