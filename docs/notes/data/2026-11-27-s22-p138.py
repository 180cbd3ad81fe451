"""p138 (session 22): the short way for short lists (StreamPipeline._run_small_list) on the workloads it now
takes: the variable-length encoder lists (127 batches, 4 MB of token ids: d512 host-bound, d1024 as the bench)
and a small convnet on many small image batches (GPU-underfilling kernels: streams matter), against compute
alone on device-resident batches and against the long (pipelined) way (session 22's first version ran the short
way's calls on the pipeline's three streams: the caller's one was 0.97-1.09x as fast). Alternating rotated rounds, medians, us per batch; outputs checked against the long way."""
import statistics, sys, time
import torch, torchvision
import fullpipe as fp
import fullpipe.pipeline.executor as E
from fullpipe.experiments import workloads as W
perf = time.perf_counter
dev = torch.device("cuda")
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
gen = torch.Generator().manual_seed(3)
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
def make_enc(d, heads, ff):
    with torch.device(dev):
        emb = W._no_grad(torch.nn.Embedding(W.VOCAB, d, dtype=torch.bfloat16))
        layer = W._no_grad(torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                                            batch_first=True, dtype=torch.bfloat16))
    def f(ids):
        with torch.inference_mode():
            return layer(emb(ids)).float().mean(dim=1)
    return f
net = W._no_grad(torchvision.models.resnet18(num_classes=10)).to(dev).half().to(memory_format=torch.channels_last)
def conv(x):  # (B, 32, 32, 3) uint8 -> (B, 10) float32
    with torch.inference_mode():
        return net(x.permute(0, 3, 1, 2).half().div(255).contiguous(memory_format=torch.channels_last)).float()
images = [torch.randint(0, 256, (32, 32, 32, 3), dtype=torch.uint8, generator=gen) for _ in range(64)]
cases = [("enc d512", make_enc(512, 8, 2048), w.xs), ("enc d1024", w.f, w.xs), ("resnet18 32x32, 64 x 32 images", conv, images)]
for name, f, xs in cases:
    xd = [x.to(dev) for x in xs]
    short = fp.StreamPipeline(f); long = fp.StreamPipeline(f)
    long._run_small_list = lambda given, outs: E._NOT_SMALL
    ref = long.run_batches(xs)
    short.run_batches(xs)
    got = short.run_batches(xs)
    assert short.stats.staging["input"] == "plain", short.stats.staging
    err = max(float((a - b).abs().max()) for a, b in zip(got, ref))
    def alone():
        for x in xd: f(x)
        torch.cuda.synchronize()
    outs = [torch.empty_like(r) for r in ref]
    cands = {"compute alone": alone, "short way": lambda: short.run_batches(xs),
             "short way, outs=": lambda: short.run_batches(xs, outs=outs),
             "long way (pipelined)": lambda: long.run_batches(xs),
             "long way, outs=": lambda: long.run_batches(xs, outs=outs)}
    for c in cands.values(): c(); c()
    res = {k: [] for k in cands}
    order = list(cands)
    for r in range(rounds):
        rot = order[r % len(order):] + order[:r % len(order)]
        for k in (rot if r % 2 == 0 else rot[::-1]):
            torch.cuda.synchronize(); t0 = perf(); cands[k](); res[k].append((perf() - t0) * 1e6 / len(xs))
    base = statistics.median(res["compute alone"])
    print(f"== {name}: {len(xs)} batches, {sum(x.nbytes for x in xs) / 2**20:.1f} MiB in; max |short - long| {err:.1e}")
    for k, v in res.items():
        m = statistics.median(v)
        print(f"   {k:30s} {m:8.1f} us/batch  ({base / m:.3f}x compute alone)  spread {min(v):.0f}-{max(v):.0f}")
    for label, p in (("short", short), ("long", long)):
        p.run_batches(xs, outs=outs); st = p.stats
        print(f"   {label} way, outs=: staging {st.staging}, host_us { {a: round(b, 1) for a, b in st.host_us.items()} }, "
              f"enqueue {st.enqueue_us_per_batch:.1f} us/batch, wall {st.wall_ms:.1f} ms")
    short.close(); long.close()
