"""p296: a one-shot user. Each (model, way) in a fresh process: build the model, then time its first and
second run over pageable uint8 224-px images (fp16, channels_last where it applies): fullpipe with its
defaults (chunk='auto': the probes and the chunk's new shapes inside the first run), fullpipe with a fixed
32 MiB chunk, and the naive loop (batches of 256 images, .cuda() ... .cpu()). Outputs compared to the naive
loop's on the second run."""
import json, os, subprocess, sys, time

MODELS = [("resnet50", 4096, True), ("convnext_tiny", 2048, True), ("vit_b_16", 1024, False),
          ("mobilenet_v3_large", 4096, True), ("efficientnet_b0", 3000, True), ("mlp", 262144, False)]
WAYS = os.environ.get("P296_WAYS", "auto,32MiB,naive").split(",")


def child(name, count, cl, way):
    import numpy as np, torch, torchvision
    import fullpipe as fp
    dev = torch.device("cuda")
    torch.manual_seed(0)
    if name == "mlp":  # bench workloads' copy-heavy: a bf16 MLP over 1 GiB of pageable float32 rows
        with torch.device(dev):
            mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                      torch.nn.Linear(4096, 1024)).to(torch.bfloat16).eval()

        def f(t):
            return mlp(t.to(torch.bfloat16)).float()

        x = torch.randn(count, 1024)
        per = count // 32
    else:
        net = getattr(torchvision.models, name)().to(dev).half().eval()
        if cl:
            net = net.to(memory_format=torch.channels_last)
        mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
        std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255

        def f(img):
            return net(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()

        x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (count, 224, 224, 3), dtype=np.uint8))
        per = 256
    torch.cuda.synchronize()
    if way == "naive":
        def run():
            return torch.cat([f(x[i:i + per].to(dev)).cpu() for i in range(0, count, per)])
    else:
        p = fp.StreamPipeline(f, chunk="auto" if way == "auto" else way)

        def run():
            return p.run(x)
    out = {}
    with torch.inference_mode():
        for k in ("first", "second", "third"):
            torch.cuda.synchronize(); t = time.perf_counter(); y = run(); torch.cuda.synchronize()
            out[k] = (time.perf_counter() - t) * 1e3
            if way != "naive":
                out[f"chunk_{k}"] = (p.stats.chunk.get("rows"), (p.stats.padded or {}).get("rows", 0),
                                     p.stats.chunk.get("reason", "")[:110])
    if way != "naive":
        out["chunk"] = {k: p.stats.chunk.get(k) for k in ("rows", "source", "probe_batches", "new_shape_ms")}
    np.save(f"/tmp/p296-{name}-{way}.npy", y[:64].numpy())
    print("CHILD " + json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        name, count, cl, way = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
        child(name, count, cl, way)
        sys.exit()
    import numpy as np
    only = os.environ.get("P296_ONLY", "").split(",") if os.environ.get("P296_ONLY") else None
    for name, count, cl in MODELS:
        if only and name not in only:
            continue
        res = {}
        for way in WAYS:
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, __file__, name, str(count), "1" if cl else "0", way],
                               capture_output=True, text=True, timeout=120)
            lines = [l for l in r.stdout.splitlines() if l.startswith("CHILD ")]
            if r.returncode or not lines:
                print(f"== {name} {way} failed rc {r.returncode}: {r.stderr[-600:]}", flush=True)
                continue
            res[way] = json.loads(lines[0][6:])
            res[way]["process_s"] = time.perf_counter() - t0
        ref = np.load(f"/tmp/p296-{name}-naive.npy") if "naive" in res else None
        for way in res:
            if way != "naive" and ref is not None:
                y = np.load(f"/tmp/p296-{name}-{way}.npy")
                res[way]["max_err"] = float(np.abs(y - ref).max())
        print(f"== {name} ({count}): " + json.dumps(res), flush=True)
        if "auto" in res and "naive" in res:
            a, n = res["auto"], res["naive"]
            print(f"RESULT {name:20s} first run: auto {a['first']:7.0f} | naive {n['first']:7.0f} ms | then auto "
                  f"{a['second']:6.0f}, {a['third']:6.0f} | naive {n['second']:6.0f}, {n['third']:6.0f} | auto chunk "
                  f"{a['chunk']}", flush=True)
        if all(w in res for w in ("auto", "32MiB", "naive")):
            a, c, n = res["auto"], res["32MiB"], res["naive"]
            print(f"RESULT {name:20s} first run: auto {a['first']:7.0f} | 32MiB {c['first']:7.0f} | naive {n['first']:7.0f} ms"
                  f" | second: auto {a['second']:6.0f} | 32MiB {c['second']:6.0f} | naive {n['second']:6.0f} | third auto "
                  f"{a['third']:6.0f} 32MiB {c['third']:6.0f} naive {n['third']:6.0f} | auto chunk {a['chunk']} | "
                  f"err {a.get('max_err', -1):.3g}/{c.get('max_err', -1):.3g}", flush=True)
