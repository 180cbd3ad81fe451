"""p394: cProfile of the caller's thread over fullpipe runs (compute_threads=1) of p393's workloads; the time
outside stats.wall per run; the same with the model replaced by a trivial f (fullpipe's own cost alone)."""
import cProfile, io, os, pstats, statistics, sys, time
import torch
sys.path.insert(0, os.path.dirname(__file__))
import importlib.util
spec = importlib.util.spec_from_file_location("p393w", os.path.join(os.path.dirname(__file__), "p393w.py"))
w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)
import fullpipe as fp

OUT = os.environ.get("OUT", "/tmp")
for name in sys.argv[1:]:
    f, xs, to_dev = {"dict": w.dict_workload, "varlen": w.varlen_workload}[name]()
    for tiny in (False, True):
        g = f
        if tiny:
            if name == "dict":
                def g(b):
                    return b["ids"][:, :1].float()
            else:
                def g(ids):
                    return ids[:, :1].float()
        p = fp.StreamPipeline(g, compute_threads=1)
        for _ in range(30):
            p.run_batches(xs)
        torch.cuda.synchronize()
        outside, walls, tot = [], [], []
        for _ in range(20):
            t = time.perf_counter(); p.run_batches(xs); dt = time.perf_counter() - t
            tot.append(dt * 1e3); walls.append(p.stats.wall_ms); outside.append(dt * 1e3 - p.stats.wall_ms)
        st = p.stats
        print(f"== {name} tiny={tiny}: {len(xs)} batches; run {statistics.median(tot):.2f} ms, wall "
              f"{statistics.median(walls):.2f}, outside {statistics.median(outside):.2f} ms; path "
              f"{(st.list_path or {}).get('path')} host_us {({a: round(b, 1) for a, b in (st.host_us or {}).items()})}",
              flush=True)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(20):
            p.run_batches(xs)
        pr.disable()
        s = io.StringIO()
        ps = pstats.Stats(pr, stream=s).sort_stats("tottime")
        ps.print_stats(45)
        s2 = io.StringIO()
        pstats.Stats(pr, stream=s2).sort_stats("cumulative").print_stats(70)
        with open(os.path.join(OUT, f"p394-{name}-{'tiny' if tiny else 'model'}.txt"), "w") as fh:
            fh.write(s.getvalue() + "\n\n" + s2.getvalue())
        print(s.getvalue()[:6000], flush=True)
