"""p291: (1) the GRU list's trial, four fresh pipelines: what each chose, its readings, and its next 5 runs
(median) against compute alone timed between them; (2) resnet18 at 112 px: chunk='auto' run by run (the
chunk, its source and reason, the run's time) over 14 runs of a fresh pipeline."""
import statistics, sys, time
import numpy as np
import torch
import fullpipe as fp

torch.manual_seed(289)
rng = np.random.default_rng(289)
dev = torch.device("cuda")
ONLY = sys.argv[1:]


def timed(fn):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


if not ONLY or "gru" in ONLY:
    gru = torch.nn.GRU(128, 512, 2, batch_first=True).to(dev).eval()

    def gru_last(x):
        return gru(x)[1][-1]

    xs = [torch.randn(int(rng.integers(16, 129)), int(rng.integers(20, 200)), 128) for _ in range(48)]
    with torch.inference_mode():
        dx = [x.to(dev) for x in xs]

        def alone():
            for x in dx:
                gru_last(x)
        for _ in range(2):
            alone()
        for trial in range(4):
            with fp.StreamPipeline(gru_last) as p:
                walls = []
                for i in range(9):
                    walls.append(timed(lambda: p.run_batches(xs)))
                lp = p.stats.list_path
                after, al = [], []
                for i in range(5):
                    after.append(timed(lambda: p.run_batches(xs)))
                    al.append(timed(alone))
                fa, aa = statistics.median(after), statistics.median(al)
                print(f"RESULT gru trial {trial}: chose {lp.get('chosen')} (pipelined {lp.get('pipelined_us_per_batch')}, "
                      f"threads {lp.get('threads_us_per_batch')} us/batch); trial runs {[round(w) for w in walls]} ms; "
                      f"after: {fa:.1f} ms, alone {aa:.1f} ms -> x alone {aa / fa:.3f}", flush=True)

if not ONLY or "r18" in ONLY:
    import torchvision
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    r18 = torchvision.models.resnet18().to(dev).half().to(memory_format=torch.channels_last).eval()

    def r18f(img):
        return r18(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()

    x = torch.randint(0, 256, (8192, 112, 112, 3), dtype=torch.uint8)
    with torch.inference_mode(), fp.StreamPipeline(r18f) as p:
        for i in range(14):
            ms = timed(lambda: p.run(x))
            ch = p.stats.chunk
            print(f"RESULT r18 run {i:2d}: {ms:8.1f} ms, {ch['rows']} rows ({ch['bytes'] / 2**20:.1f} MiB), "
                  f"{ch.get('source')}; predicted {ch.get('predicted_ms')}", flush=True)
            if i in (0, 1, 5, 13):
                print("   ", {k: v for k, v in ch.items() if k not in ('rows', 'bytes', 'source')}, flush=True)
        with fp.StreamPipeline(r18f, chunk="32MiB") as q:
            q.run(x)
            print(f"RESULT r18 fixed 32MiB: {statistics.median(timed(lambda: q.run(x)) for _ in range(5)):.1f} ms; "
                  f"auto now {statistics.median(timed(lambda: p.run(x)) for _ in range(5)):.1f} ms", flush=True)
