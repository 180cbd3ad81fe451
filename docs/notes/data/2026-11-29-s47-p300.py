"""p300: why a model's first call inside fullpipe costs more than the naive loop's (p299: mobilenet_v3_large
4810 ms at 410 rows against 2758 at 256; convnext_tiny 3213 at 205 against 1032). Fresh process per case:
the first call's host time (then a second call, then a new shape) on the default stream, a side torch stream,
a stream made by fullpipe (cuda.core, wrapped for torch); fullpipe with a fixed chunk; fullpipe auto with a
pinned input; a shape seen on one thread called on another."""
import json, subprocess, sys, threading, time

MODELS = [("mobilenet_v3_large", 410), ("convnext_tiny", 205)]
CASES = ["default256", "defaultL", "sideL", "fullpipe_streamL", "fixedL", "auto_pinned", "threads"]


def child(name, L, case):
    import numpy as np, torch, torchvision
    import fullpipe as fp
    dev = torch.device("cuda")
    torch.manual_seed(0)
    net = getattr(torchvision.models, name)().to(dev).half().eval().to(memory_format=torch.channels_last)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    log = []

    def f(img):
        t = time.perf_counter()
        y = net(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()
        log.append((round((time.perf_counter() - t) * 1e3, 1), threading.current_thread().name[:10], int(img.shape[0])))
        return y

    x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (4 * L, 224, 224, 3), dtype=np.uint8))
    torch.cuda.synchronize()
    out = {}
    with torch.inference_mode():
        def calls(rows_list, stream=None):
            for r in rows_list:
                xd = x[:r].to(dev)
                torch.cuda.synchronize()
                if stream is None:
                    f(xd)
                else:
                    with torch.cuda.stream(stream):
                        f(xd)
                torch.cuda.synchronize()
        t = time.perf_counter()
        if case == "default256":
            calls([256, 256, L // 4])
        elif case == "defaultL":
            calls([L, L, L // 4])
        elif case == "sideL":
            calls([L, L, L // 4], torch.cuda.Stream())
        elif case == "fullpipe_streamL":
            from cuda.core import Device
            from fullpipe.cuda import create_stream
            from fullpipe.cuda.interop import torch_stream
            d = Device(0)
            d.set_current()
            s = create_stream(d)
            calls([L, L, L // 4], torch_stream(s, device=0))
        elif case == "fixedL":
            p = fp.StreamPipeline(f, chunk=L)
            p.run(x)
        elif case == "auto_pinned":
            p = fp.StreamPipeline(f, chunk="auto")
            xp = torch.empty_like(x).pin_memory()
            xp.copy_(x)
            x = xp
            p.run(x)
        elif case == "threads":
            calls([L, L])
            th = threading.Thread(target=calls, args=([L, L, L // 2],), name="threadA")
            th.start(); th.join()
            calls([L // 2])
        torch.cuda.synchronize()
        out["total_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    out["calls"] = log
    print("CHILD " + json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1], int(sys.argv[2]), sys.argv[3])
        sys.exit()
    for name, L in MODELS:
        for case in CASES:
            r = subprocess.run([sys.executable, __file__, name, str(L), case], capture_output=True, text=True,
                               timeout=120)
            lines = [l for l in r.stdout.splitlines() if l.startswith("CHILD ")]
            if r.returncode or not lines:
                print(f"== {name} {case} failed rc {r.returncode}: {r.stderr[-800:]}", flush=True)
                continue
            d = json.loads(lines[-1][6:])
            c = d["calls"]
            print(f"RESULT {name:20s} {case:18s} total {d['total_ms']:8.1f} ms; calls "
                  + ", ".join(f"{ms:.0f}ms/{th}/{rows}" for ms, th, rows in c[:8]), flush=True)
