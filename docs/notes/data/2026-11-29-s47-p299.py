"""p299: where a one-shot user's first run goes. Fresh process per (model, way): every call of the
model's function logged (start, host duration, thread, batch rows), then the run's phases; the naive
loop (batches of 256) the same way."""
import json, os, subprocess, sys, threading, time

MODELS = [("mobilenet_v3_large", 4096, True), ("resnet50", 4096, True), ("convnext_tiny", 2048, True)]


def child(name, count, cl, way):
    import numpy as np, torch, torchvision
    import fullpipe as fp
    dev = torch.device("cuda")
    torch.manual_seed(0)
    net = getattr(torchvision.models, name)().to(dev).half().eval()
    if cl:
        net = net.to(memory_format=torch.channels_last)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    log = []
    t00 = time.perf_counter()

    def f(img):
        t = time.perf_counter()
        y = net(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()
        log.append((round((t - t00) * 1e3, 1), round((time.perf_counter() - t) * 1e3, 1),
                    threading.current_thread().name[:12], int(img.shape[0])))
        return y

    x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (count, 224, 224, 3), dtype=np.uint8))
    torch.cuda.synchronize()
    if way == "naive":
        def run():
            return torch.cat([f(x[i:i + 256].to(dev)).cpu() for i in range(0, count, 256)])
    else:
        p = fp.StreamPipeline(f, chunk=way)

        def run():
            return p.run(x)
    out = {}
    with torch.inference_mode():
        for k in ("first", "second"):
            log.clear()
            torch.cuda.synchronize(); t00 = t = time.perf_counter(); y = run(); torch.cuda.synchronize()
            out[k] = round((time.perf_counter() - t) * 1e3, 1)
            out[f"calls_{k}"] = list(log)
            if way != "naive":
                out[f"chunk_{k}"] = (p.stats.chunk.get("rows"), (p.stats.padded or {}).get("rows", 0),
                                     p.stats.chunk.get("source"), p.stats.chunk.get("reason", "")[:200])
                out[f"host_{k}"] = {k2: v for k2, v in (p.stats.as_dict() if hasattr(p.stats, "as_dict") else {}).items()
                                    if k2 in ("host_us", "wall_ms", "busy_ms", "list_path")}
    print("CHILD " + json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1:] == ["threads"]:
        thread_test()
        sys.exit()
    if len(sys.argv) > 1:
        child(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4])
        sys.exit()
    ways = os.environ.get("P299_WAYS", "auto,naive").split(",")
    for name, count, cl in MODELS:
        for way in ways:
            r = subprocess.run([sys.executable, __file__, name, str(count), "1" if cl else "0", way],
                               capture_output=True, text=True, timeout=150)
            lines = [l for l in r.stdout.splitlines() if l.startswith("CHILD ")]
            if r.returncode or not lines:
                print(f"== {name} {way} failed rc {r.returncode}: {r.stderr[-800:]}", flush=True)
                continue
            d = json.loads(lines[-1][6:])
            print(f"== {name} {way}: first {d['first']} ms, second {d['second']} ms; chunk {d.get('chunk_first')}", flush=True)
            for c in d["calls_first"]:
                if c[1] > 20:
                    print(f"   call at {c[0]:9.1f} ms: {c[1]:8.1f} ms  {c[2]:12s} rows {c[3]}")
            tot = sum(c[1] for c in d["calls_first"])
            print(f"   {len(d['calls_first'])} calls, {tot:.0f} ms of calls in a {d['first']} ms first run; threads "
                  f"{sorted(set(c[2] for c in d['calls_first']))}; rows {[c[3] for c in d['calls_first']]}", flush=True)


def thread_test():
    """Does a batch shape seen on one thread cost again on another (PyTorch's per-thread caches)?"""
    import numpy as np, torch, torchvision
    dev = torch.device("cuda")
    for name in ("mobilenet_v3_large", "resnet50"):
        net = getattr(torchvision.models, name)().to(dev).half().eval().to(memory_format=torch.channels_last)
        res = []

        def call(rows, tag):
            x = torch.zeros(rows, 3, 224, 224, device=dev, dtype=torch.half).to(memory_format=torch.channels_last)
            torch.cuda.synchronize(); t = time.perf_counter()
            with torch.inference_mode():
                net(x)
            torch.cuda.synchronize(); res.append((tag, rows, round((time.perf_counter() - t) * 1e3, 1)))

        call(410, "main 1st"); call(410, "main 2nd"); call(102, "main new shape")
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            call(410, "main, side stream")
        th = threading.Thread(target=lambda: (call(410, "thread A seen shape"), call(410, "thread A again"),
                                              call(205, "thread A new shape")))
        th.start(); th.join()
        call(205, "main, shape seen on thread A")
        print(f"THREADTEST {name}: {res}", flush=True)
