"""p302: session 47's review fixes on a GPU. (1) a new pageable array of the same shape after runs on a pinned copy:
does it take the models completed under the other staging (no probe batches, same chunk)? (2) a first run shorter
than the probed size: one padded chunk, correct output, no few-batches warning. Outputs checked against the model."""
import time, warnings
import torch, torchvision
import fullpipe as fp

dev = torch.device("cuda")
net = torchvision.models.resnet50().to(dev).half().eval().to(memory_format=torch.channels_last)
mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255


def f(img):
    return net(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()


def ref(x):
    return torch.cat([f(x[i:i + 256].to(dev)).cpu() for i in range(0, len(x), 256)])


def show(tag, p, t):
    c = p.stats.chunk
    print(f"{tag:34s} {t * 1e3:8.1f} ms rows {c.get('rows')} src {c.get('source')} probes {c.get('probe_batches')} "
          f"padded {p.stats.padded} staging {p.stats.staging}", flush=True)


with torch.inference_mode():
    x = torch.randint(0, 256, (2048, 224, 224, 3), dtype=torch.uint8)
    want = ref(x)
    p = fp.StreamPipeline(f)
    for i in range(3):
        t = time.perf_counter(); y = p.run(x); t = time.perf_counter() - t
        show(f"pageable run {i + 1}", p, t)
    print("  max err", (y - want).abs().max().item(), flush=True)
    xp = x.pin_memory()
    for i in range(3):
        t = time.perf_counter(); y = p.run(xp); t = time.perf_counter() - t
        show(f"pinned run {i + 1}", p, t)
    print("  max err", (y - want).abs().max().item(), flush=True)
    x2 = x.clone()
    for i in range(3):
        t = time.perf_counter(); y = p.run(x2); t = time.perf_counter() - t
        show(f"new pageable array run {i + 1}", p, t)
    print("  max err", (y - want).abs().max().item(), flush=True)
    p.close()

    q = fp.StreamPipeline(f)
    xs = x[:100].clone()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = time.perf_counter(); ys = q.run(xs); t = time.perf_counter() - t
    show("short first run (100 rows)", q, t)
    print("  warnings:", [str(m.message)[:120] for m in w])
    print("  max err", (ys - want[:100]).abs().max().item(), "shape", tuple(ys.shape), flush=True)
    t = time.perf_counter(); y = q.run(x); t = time.perf_counter() - t
    show("then the full array", q, t)
    print("  max err", (y - want).abs().max().item(), flush=True)
    q.close()
print("RESULT done")
