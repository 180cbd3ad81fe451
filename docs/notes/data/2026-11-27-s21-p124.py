"""Session 21: where a run_batches' time goes outside the batch loop (wall 115 ms against 73 ms of loop on
600 batches of a 4-op chain; 63 against 51 on the d512 encoder): phases of the run, per case."""
import statistics, time, collections, sys
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
from fullpipe.pipeline import executor as E, plan as P
from fullpipe.pipeline import bulk as B
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(3)
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
acc = collections.defaultdict(float)
def wrap(owner, name, label=None):
    fn = getattr(owner, name); label = label or name
    def wrapped(*a, **k):
        t0 = time.perf_counter()
        try: return fn(*a, **k)
        finally: acc[label] += time.perf_counter() - t0
    setattr(owner, name, wrapped)
wrap(E, "host_view"); wrap(E._Pins, "pinned_list"); wrap(E._Pins, "release")
wrap(P, "batches_from_list"); wrap(E, "_check_out_layout"); wrap(E.StreamPipeline, "_bulk")
wrap(E.StreamPipeline, "_execute"); wrap(E.StreamPipeline, "_open_run"); wrap(E.StreamPipeline, "_finish_run")
wrap(E.StreamPipeline, "_eager_loop"); wrap(E.StreamPipeline, "_pinned_stats"); wrap(E.StreamPipeline, "_tensor_compute")
wrap(E.StreamPipeline, "_drain_while_finishing"); wrap(E.StreamPipeline, "_harvest")
wrap(B.BulkStaging, "stage_inputs"); wrap(B.BulkStaging, "route_outputs"); wrap(B.BulkStaging, "drain_outputs")
wrap(B.BulkStaging, "give_back"); wrap(B.BulkStaging, "wait_copies")
def make_enc(d, heads, ff):
    with torch.device(dev):
        emb = W._no_grad(torch.nn.Embedding(W.VOCAB, d, dtype=torch.bfloat16))
        layer = W._no_grad(torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                                            batch_first=True, dtype=torch.bfloat16))
    def f(ids):
        with torch.inference_mode():
            return layer(emb(ids)).float().mean(dim=1)
    return f
def chain(k):
    def f(x):
        with torch.inference_mode():
            for _ in range(k):
                x = x * 1.0001 + 0.5
            return x
    return f
small = [torch.randn(int(n), 256) for n in torch.randint(64, 512, (600,), generator=gen)]
for name, f, xs in (("enc d512", make_enc(512, 8, 2048), w.xs), ("chain 4 ops", chain(4), small), ("enc d1024", w.f, w.xs)):
    ys = [torch.empty_like(f(x[:1].to(dev)).cpu().expand(x.shape[0], *f(x[:1].to(dev)).shape[1:])).contiguous() for x in xs]
    pipe = fp.StreamPipeline(f, streams=3)
    for _ in range(3): pipe.run_batches(xs, outs=ys)
    rows, sts = [], []
    for r in range(8):
        acc.clear(); torch.cuda.synchronize(); t0 = time.perf_counter()
        pipe.run_batches(xs, outs=ys)
        acc["outer"] = time.perf_counter() - t0
        st = pipe.stats; sts.append(st)
        acc["stats.wall"] = st.wall_ms / 1e3
        acc["loop (loop_us x n)"] = st.loop_us_per_batch * st.batches / 1e6
        acc["enqueue (enq_us x n)"] = st.enqueue_us_per_batch * st.batches / 1e6
        acc["host_wait"] = st.host_wait_ms / 1e3
        acc["bulk_drain"] = st.bulk_drain_ms / 1e3
        acc["gpu_span"] = (st.gpu_span_ms or 0) / 1e3
        rows.append(dict(acc))
    st = sts[-1]
    print(f"== {name}: {len(xs)} batches, staging {st.staging}, host_copies {st.host_copies}, uploads {st.bulk_uploads}, "
          f"drained early {st.bulk_drained_early}; host_us { {k: round(v, 1) for k, v in st.host_us.items()} }")
    for k in rows[0]:
        print(f"  {k:24s} {statistics.median(r.get(k, 0) for r in rows) * 1e3:8.3f} ms")
    pipe.close()
