"""p295 (p294 again, after the chunk is chosen for the whole run; plus four models p294 did not try): For several torchvision models (fp16,
channels_last where it applies, pageable uint8 images): the probes' compute readings against GPU time alone
at the same sizes; the compute model; the chosen chunk; the run time the model predicted against the run's;
fixed chunks of 16, 32 and 64 MiB in alternating rounds (medians of 3 after 1) against chunk='auto'."""
import statistics, sys, time
import torch, torchvision
import fullpipe as fp
from fullpipe.pipeline import executor as ex

dev = torch.device("cuda")
real = ex._probe_point
seen = []


def spy(pst, i, wc, wo):
    m = real(pst, i, wc, wo)
    seen.append((m.get("compute", 0) * 1e3, m["host"] * 1e3))
    return m


ex._probe_point = spy
mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255


def gpu_ms(f, x, rows, n=3):
    xs = x[:rows].to(dev)
    f(xs); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(n):
        a.record(); f(xs); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def timed(fn):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3



def dump(p, tag):
    row = 150528
    for key, t in p._tuned.items():
        cm = t.models.get("compute")
        print(f"   [{tag}] key {key[2]}/{key[3]}: compute {cm.fixed_s * 1e3:.2f} ms + {cm.per_byte_s * row * 1e6:.2f} us/row; "
              f"host {t.host.fixed_s * 1e3:.2f} ms; new_shape {t.new_shape_s * 1e3:.0f} ms; run_s {t.run_s * 1e3:.0f}; "
              f"kept {t.kept_bytes // row}; loss {t.kept_loss_s * 1e3:.0f} for {t.kept_loss_for // row}; refined {t.refined}; "
              f"deferred {getattr(t, 'deferred_rows', None)}; cbytes {t.compute_bytes_per_byte:.2f} budget {t.budget_bytes // 2**20} MiB; seen {({k: {n // row: round(v * 1e3, 2) for n, v in d.items()} for k, d in t.seen.items() if k == 'compute'})}; "
              f"keep_loss_ms {p.stats.chunk.get('keep_loss_ms')}", flush=True)


MODELS = [("mobilenet_v3_large", 224, 4096, True), ("convnext_tiny", 224, 2048, True), ("vit_b_16", 224, 1024, False),
          ("resnet50", 224, 4096, True), ("regnet_y_800mf", 224, 4096, True),
          ("efficientnet_b0", 224, 3000, True), ("swin_t", 224, 1500, False), ("densenet121", 224, 2500, True),
          ("resnet18", 160, 10000, True)]
ONLY = sys.argv[1:]
summary = []
for name, px, count, cl in MODELS:
    if ONLY and name not in ONLY:
        continue
    t0 = time.perf_counter()
    net = getattr(torchvision.models, name)().to(dev).half().eval()
    if cl:
        net = net.to(memory_format=torch.channels_last)

    def f(img, net=net):
        return net(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()

    x = torch.randint(0, 256, (count, px, px, 3), dtype=torch.uint8)
    row = x[0].nbytes
    seen.clear()
    with torch.inference_mode():
        p = fp.StreamPipeline(f)
        p.run(x)
        dump(p, "run 1")
        (tuned,) = p._tuned.values()
        cm = tuned.models["compute"]
        probes = list(seen)
        for i in range(2):
            t1 = time.perf_counter(); p.run(x)
            print(f"   run {i + 2}: {(time.perf_counter() - t1) * 1e3:.1f} ms rows {p.stats.chunk['rows']} "
                  f"src {p.stats.chunk.get('source')} probes {p.stats.chunk.get('probe_batches')}", flush=True)
            dump(p, f"run {i + 2}")
        ch = p.stats.chunk
        pad = p.stats.padded or {}
        pipes = {"auto": p}
        for c in ("16MiB", "32MiB", "64MiB"):
            pipes[c] = fp.StreamPipeline(f, chunk=c)
            pipes[c].run(x)
        ts = {k: [] for k in pipes}
        for r in range(3):
            for k in (list(pipes) if r % 2 else list(pipes)[::-1]):
                ts[k].append(timed(lambda q=pipes[k]: q.run(x)))
                if k == "auto":
                    c2 = q2 = pipes[k].stats
                    print(f"   round {r} auto {ts[k][-1]:.1f} ms rows {c2.chunk['rows']} src {c2.chunk.get('source')} "
                          f"refined {c2.chunk.get('refined_runs')} padded {c2.padded} staging {c2.staging} "
                          f"threads {c2.compute_threads} reason {c2.chunk.get('reason', '')[:90]}", flush=True)
                    dump(pipes[k], f"round {r}")
        med = {k: statistics.median(v) for k, v in ts.items()}
        best = min((k for k in med if k != "auto"), key=med.get)
        print(f"== {name} ({count} x {px} px, row {row} B); probes (compute ms, host ms): "
              f"{[(round(a, 3), round(b, 3)) for a, b in probes]}", flush=True)
        print(f"   compute model: fixed {cm.fixed_s * 1e3:.3f} ms + {cm.per_byte_s * row * 1e6:.2f} us/row; host "
              f"{tuned.host.fixed_s * 1e6:.0f} us; new shape {tuned.new_shape_s * 1e3:.0f} ms; chose {ch['rows']} rows "
              f"({ch['bytes'] / 2**20:.1f} MiB, {ch.get('source')}); predicted {ch.get('predicted_ms', float('nan')):.1f} ms",
              flush=True)
        rows_at = sorted({max(1, 2**20 // row), max(2, 8 * 2**20 // row), ch["rows"]})
        alone = {r: gpu_ms(f, x, r) for r in rows_at if r <= count}
        print("   alone (rows: ms, model ms): " + ", ".join(
            f"{r}: {t:.2f} ({(cm.fixed_s + cm.per_byte_s * r * row) * 1e3:.2f})" for r, t in alone.items()), flush=True)
        print(f"RESULT {name:20s} auto {med['auto']:8.1f} ms | 16MiB {med['16MiB']:8.1f} | 32MiB {med['32MiB']:8.1f} | "
              f"64MiB {med['64MiB']:8.1f} | rows {ch['rows']} x{-(-count // ch['rows'])} padded {pad.get('rows', 0)} | auto/best {med[best] / med['auto']:.3f} | predicted/actual "
              f"{ch.get('predicted_ms', float('nan')) / med['auto']:.2f} | {time.perf_counter() - t0:.0f} s", flush=True)
        for q in pipes.values():
            q.close()
    del net
    torch.cuda.empty_cache()
