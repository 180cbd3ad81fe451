"""p293: what chunk='auto''s probes read for a convnet's compute against its GPU time alone at those sizes.
resnet18 at 112 px (8192 images) and resnet50 at 224 px (1024 images), fp16 channels_last, pageable uint8:
each probe batch's stage times; the compute model fitted; GPU time alone (device-resident, events, one stream)
at the probe sizes and the chosen chunk; per-chunk compute in the steady runs."""
import statistics
import torch, torchvision
import fullpipe as fp
from fullpipe.pipeline import executor as ex

dev = torch.device("cuda")
real = ex._probe_point
seen = []


def spy(pst, i, wc, wo):
    m = real(pst, i, wc, wo)
    seen.append((pst.timings[i].rows if hasattr(pst.timings[i], "rows") else None, {k: round(v * 1e3, 3) for k, v in m.items()}))
    return m


ex._probe_point = spy
mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255


def gpu_ms(f, x, rows, n=5):
    xs = x[:rows].to(dev)
    f(xs); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(n):
        a.record(); f(xs); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)


for name, model, px, count in (("resnet18-112", torchvision.models.resnet18, 112, 8192),
                               ("resnet50-224", torchvision.models.resnet50, 224, 1024)):
    net = model().to(dev).half().to(memory_format=torch.channels_last).eval()

    def f(img, net=net):
        return net(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()

    x = torch.randint(0, 256, (count, px, px, 3), dtype=torch.uint8)
    row = x[0].nbytes
    seen.clear()
    with torch.inference_mode(), fp.StreamPipeline(f) as p:
        p.run(x)
        ch = p.stats.chunk
        (tuned,) = p._tuned.values()
        print(f"== {name}: row {row} B; probes (stage ms):", flush=True)
        for r, m in seen:
            print("   ", r, m, flush=True)
        cm = tuned.models["compute"]
        print(f"   compute model: fixed {cm.fixed_s * 1e3:.3f} ms + {1e-9 / cm.per_byte_s:.2f} GB/s "
              f"({cm.per_byte_s * row * 1e6:.2f} us/row); host {tuned.host.fixed_s * 1e6:.0f} us; new shape "
              f"{tuned.new_shape_s * 1e3:.0f} ms; chose {ch['rows']} rows", flush=True)
        for _ in range(4):
            p.run(x)
        st = p.stats
        share = st.chunk["bytes"] / st.bytes_in
        print(f"   steady run: {st.wall_ms:.1f} ms, compute busy {st.busy_ms.get('compute', 0):.1f} ms -> "
              f"{st.busy_ms.get('compute', 0) * share:.2f} ms per chunk of {st.chunk['rows']} rows", flush=True)
        sizes = sorted({max(1, 2**20 // row), max(2, 8 * 2**20 // row), max(2, 16 * 2**20 // row), max(2, 32 * 2**20 // row),
                        ch["rows"]})
        for r in sizes:
            if r <= count:
                t = gpu_ms(f, x, r)
                print(f"RESULT {name} alone {r:5d} rows: {t:8.3f} ms = {t * 1e3 / r:7.2f} us/row "
                      f"(model {(cm.fixed_s + cm.per_byte_s * r * row) * 1e3:.3f} ms)", flush=True)
    del net
