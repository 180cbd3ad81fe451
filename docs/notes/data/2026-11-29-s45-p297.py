"""p297: where a fresh process's first run goes (resnet50 over 4096 and vit_b_16 over 1024 pageable 224-px
uint8 images, fp16): each (model, way) in its own process; the first run under cProfile, its largest
cumulative entries, and the compute's calls timed one by one (rows, host ms) against the naive loop's."""
import cProfile, io, json, pstats, subprocess, sys, time

MODELS = [("resnet50", 4096, True), ("vit_b_16", 1024, False)]


def child(name, count, cl, way):
    import numpy as np, torch, torchvision
    import fullpipe as fp
    dev = torch.device("cuda")
    net = getattr(torchvision.models, name)().to(dev).half().eval()
    if cl:
        net = net.to(memory_format=torch.channels_last)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    calls = []

    def f(img):
        t = time.perf_counter()
        y = net(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()
        calls.append((img.shape[0], round((time.perf_counter() - t) * 1e3, 1)))
        return y

    x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (count, 224, 224, 3), dtype=np.uint8))
    torch.cuda.synchronize()
    if way == "naive":
        def run():
            return torch.cat([f(x[i:i + 256].to(dev)).cpu() for i in range(0, count, 256)])
    else:
        p = fp.StreamPipeline(f, chunk="auto" if way == "auto" else way)

        def run():
            return p.run(x)
    prof = cProfile.Profile()
    with torch.inference_mode():
        torch.cuda.synchronize(); t = time.perf_counter()
        prof.enable(); run(); torch.cuda.synchronize(); prof.disable()
        first = (time.perf_counter() - t) * 1e3
        n_first = len(calls)
        torch.cuda.synchronize(); t = time.perf_counter(); run(); torch.cuda.synchronize()
        second = (time.perf_counter() - t) * 1e3
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
    print(f"PROFILE {name} {way}\n" + "\n".join(l[:200] for l in s.getvalue().splitlines()[6:45]))
    extra = {}
    if way != "naive":
        extra = {"stats": str(p.stats)[:1500]}
    print("CHILD " + json.dumps({"first": first, "second": second, "calls_first": calls[:n_first],
                                 "calls_second": calls[n_first:], **extra}))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4])
        sys.exit()
    for name, count, cl in MODELS:
        for way in ("auto", "32MiB", "naive"):
            r = subprocess.run([sys.executable, __file__, name, str(count), "1" if cl else "0", way],
                               capture_output=True, text=True, timeout=120)
            print(r.stdout[-9000:], r.stderr[-1500:] if r.returncode else "", flush=True)
            lines = [l for l in r.stdout.splitlines() if l.startswith("CHILD ")]
            if lines:
                d = json.loads(lines[0][6:])
                print(f"RESULT {name} {way}: first {d['first']:.0f} ms, second {d['second']:.0f} ms; first run's calls "
                      f"{d['calls_first'][:12]}", flush=True)
