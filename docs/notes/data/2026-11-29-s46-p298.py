"""p298: why fullpipe's very first compute call (resnet50 fp16 channels_last, 6 rows, a probe) took 923 ms
where the naive loop's first call (256 rows) took 389 ms (an H200, session 45, p297). Each case in a fresh
process: the first and second call of the model at a batch size, on the main thread or a new thread, on the
default stream or a side stream; and fullpipe's first run with its calls timed."""
import json, subprocess, sys, time

CASES = [("main", "default", 256), ("main", "default", 6), ("main", "side", 6), ("thread", "default", 6),
         ("thread", "side", 6), ("thread", "side", 256), ("main", "side", 456)]


def child(where, stream, rows):
    import threading
    import torch, torchvision
    dev = torch.device("cuda")
    net = getattr(torchvision.models, "resnet50")().to(dev).half().eval().to(memory_format=torch.channels_last)
    x = torch.randint(0, 256, (rows, 224, 224, 3), dtype=torch.uint8)
    torch.cuda.synchronize()
    out = {}

    def body():
        with torch.inference_mode():
            s = torch.cuda.Stream() if stream == "side" else torch.cuda.current_stream()
            with torch.cuda.stream(s):
                xs = x.to(dev, non_blocking=False)
                for k in ("first", "second", "third"):
                    t = time.perf_counter()
                    net((xs.permute(0, 3, 1, 2).half())).float()
                    s.synchronize()
                    out[k] = round((time.perf_counter() - t) * 1e3, 1)

    if where == "thread":
        th = threading.Thread(target=body)
        th.start(); th.join()
    else:
        body()
    print("CHILD " + json.dumps(out))


def child_fullpipe(rows_total):
    import numpy as np, torch, torchvision
    import fullpipe as fp
    dev = torch.device("cuda")
    net = getattr(torchvision.models, "resnet50")().to(dev).half().eval().to(memory_format=torch.channels_last)
    calls = []

    def f(img):
        t = time.perf_counter()
        y = net(img.permute(0, 3, 1, 2).half()).float()
        calls.append((img.shape[0], round((time.perf_counter() - t) * 1e3, 1)))
        return y

    x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (rows_total, 224, 224, 3), dtype=np.uint8))
    torch.cuda.synchronize()
    p = fp.StreamPipeline(f)
    with torch.inference_mode():
        t = time.perf_counter(); p.run(x); first = (time.perf_counter() - t) * 1e3
        n1 = len(calls)
        t = time.perf_counter(); p.run(x); second = (time.perf_counter() - t) * 1e3
    print("CHILD " + json.dumps({"first": round(first), "second": round(second), "calls_first": calls[:n1],
                                 "chunk": p.stats.chunk.get("rows"), "reason": p.stats.chunk.get("reason", "")[:300]}))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        if sys.argv[1] == "fullpipe":
            child_fullpipe(int(sys.argv[2]))
        else:
            child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
        sys.exit()
    for case in CASES:
        r = subprocess.run([sys.executable, __file__, *map(str, case)], capture_output=True, text=True, timeout=120)
        lines = [l for l in r.stdout.splitlines() if l.startswith("CHILD ")]
        print(f"RESULT first call {case}: " + (lines[0][6:] if lines else f"failed {r.stderr[-400:]}"), flush=True)
    r = subprocess.run([sys.executable, __file__, "fullpipe", "4096"], capture_output=True, text=True, timeout=120)
    lines = [l for l in r.stdout.splitlines() if l.startswith("CHILD ")]
    print("RESULT fullpipe resnet50 4096: " + (lines[0][6:] if lines else f"failed {r.stderr[-400:]}"), flush=True)
