"""pinned: pinned vs pageable host memory, and the pipeline's pageable path.

1. Raw copies of one large buffer: H2D, D2H, and both at once, from pinned and
   from pageable memory (only the host memory differs).
2. Does overlap with compute survive? A kernel calibrated to last as long as the
   pinned copy runs on one stream while the copy runs on another: overlap =
   (kernel alone + copy alone - together) / min(kernel alone, copy alone); 1.0 is
   full overlap, 0 none.
3. The executor: a pageable NumPy array through the pinned ring (CPU staging
   threads), H2D only and both ways (identity compute), against the pinned peak
   measured above; the same array handed to cuMemcpyAsync as is (staging="direct",
   the plain pageable path); and pinned input at chunk sizes from 1 to 32 MiB,
   where the executor's H2D stage should reach the pinned peak from 8 MiB up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cuda.memory import copy_d2h, copy_h2d, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..pipeline import StreamPipeline
from ..cuda.device import device_info
from ..cuda.timing import gbps, time_streams
from ..pipeline.workload import MixKernel, calibrate_rounds
from ..cuda.timing import median
from .measure import median_pipeline_run
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, at_least, at_most, both, is_num, rule, times, with_claims
from .figures import BOUND, GREY, PAGEABLE, PINNED, PLAIN, RING, WIDE, label_bars, need, pyplot, rows_of, save

NAME = "pinned"
TITLE = "Pinned vs pageable host memory; pageable arrays through the pipeline's pinned ring"
CLAIM = ("Pinned memory is needed for full-speed, overlappable copies; staging a pageable array "
         "through a pinned ring reaches >= 0.8x the pinned peak each way")
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "Copy engines DMA only from page-locked (pinned) host memory. From pageable memory the driver copies "
    "through a staging buffer of its own with the CPU, and the call returns only when that is done. "
    "fullpipe stages pageable arrays through a small ring of pinned buffers filled by CPU threads."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): its canonical one.
VERDICT_FROM = ("pageable-kills-overlap",)

MiB = 1 << 20



def _host_memmove_bound(page_src, pin_dst, pin_src, page_dst, size, repeat) -> dict:
    """GB/s of the executor's own HostCopier (same thread count) from pageable into
    pinned memory, alone and together with the reverse direction on a second copier."""
    import threading
    import time

    from ..pipeline.pageable import HostCopier, default_copy_threads

    threads = default_copy_threads()
    cin, cout = HostCopier(threads), HostCopier(threads)
    chunk = 16 * MiB
    try:
        def copy_all(copier, dst, src):
            for off in range(0, size, chunk):
                copier.copy(dst.ctypes.data + off, src.ctypes.data + off, min(chunk, size - off))

        alone, both = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            copy_all(cin, pin_dst, page_src)
            alone.append(time.perf_counter() - t0)
            other = threading.Thread(target=copy_all, args=(cout, page_dst, pin_src))
            t0 = time.perf_counter()
            other.start()
            copy_all(cin, pin_dst, page_src)
            other.join()
            both.append(time.perf_counter() - t0)
    finally:
        cin.close()
        cout.close()
    return {"threads": threads, "in_gbps": size / median(alone) / 1e9,
            "both_gbps_each_way": size / median(both) / 1e9}


def run(ctx) -> Result:
    dev = ctx.device
    quick = ctx.quick
    size = (256 if quick else 1024) * MiB
    repeat = 3 if quick else 5
    n = size // 4
    rng = np.random.default_rng(7)
    pool = DevicePool(dev, release_threshold="max")
    s0, s1 = create_stream(dev), create_stream(dev)
    d_in = pool.empty(n, np.uint32, s0)
    d_out = pool.empty(n, np.uint32, s0)
    s0.sync()
    ctx.progress(0.0, "host buffers")
    pin_src, pin_dst = pinned_empty(n, np.uint32), pinned_empty(n, np.uint32)
    page_src = rng.integers(0, 2**32, n, dtype=np.uint32)
    page_dst = np.ones(n, np.uint32)  # touched: no first-touch page faults inside the timing
    pin_src[:] = page_src

    # ---- 1. raw copies
    ctx.progress(0.05, "raw copies")
    rows, rates = [], {}
    for kind, src, dst in (("pinned", pin_src, pin_dst), ("pageable", page_src, page_dst)):
        h2d = lambda src=src: copy_h2d(d_in.ptr, src, s0)  # noqa: E731
        d2h = lambda dst=dst: copy_d2h(dst, d_out.ptr, s1)  # noqa: E731
        t_h = median(time_streams(dev, s0, [(s0, h2d)], repeat=repeat))
        t_d = median(time_streams(dev, s0, [(s1, d2h)], repeat=repeat))
        t_b = median(time_streams(dev, s0, [(s0, h2d), (s1, d2h)], repeat=repeat))
        rates[kind] = {"h2d": gbps(size, t_h), "d2h": gbps(size, t_d), "both_each_way": gbps(size, t_b)}
        for what, v in rates[kind].items():
            rows.append({"test": "raw copy", "memory": kind, "what": what, "GB/s": v,
                         "ratio_to_pinned": None, "overlap": None})
    for r in rows:
        r["ratio_to_pinned"] = r["GB/s"] / rates["pinned"][r["what"]]
    pinned_h2d, pinned_both = rates["pinned"]["h2d"], rates["pinned"]["both_each_way"]

    # ---- 2. overlap with compute
    ctx.progress(0.3, "overlap with compute")
    kernel = MixKernel(dev)
    t_copy_pinned = size / (pinned_h2d * 1e6)
    calibrate_rounds(kernel, s1, d_in, d_out, t_copy_pinned)
    t_k = median(time_streams(dev, s0, [(s1, lambda: kernel(s1, d_in, d_out))], repeat=repeat))
    overlap = {}
    for kind, src, dst in (("pinned", pin_src, pin_dst), ("pageable", page_src, page_dst)):
        for what, op in (("h2d", lambda src=src: copy_h2d(d_in.ptr, src, s0)),
                         ("d2h", lambda dst=dst: copy_d2h(dst, d_in.ptr, s0))):
            t_c = median(time_streams(dev, s0, [(s0, op)], repeat=repeat))
            # Kernel first, then the copy: with pageable memory the copy call blocks the host,
            # but the kernel is already queued.
            t_both = median(time_streams(dev, s0, [(s1, lambda: kernel(s1, d_in, d_out)), (s0, op)],
                                         repeat=repeat))
            ov = (t_k + t_c - t_both) / min(t_k, t_c)
            overlap[f"{kind}_{what}"] = ov
            rows.append({"test": "copy + kernel", "memory": kind, "what": what, "GB/s": gbps(size, t_c),
                         "ratio_to_pinned": None, "overlap": ov})

    # ---- 3. the host's own bound for the ring: memmove pageable <-> pinned with the
    # executor's staging threads, one direction alone and both at once
    ctx.progress(0.45, "host memmove bound")
    host = _host_memmove_bound(page_src, pin_dst, pin_src, page_dst, size, repeat)

    # ---- 4. the executor
    ctx.progress(0.5, "executor: pageable through the ring")
    chunk = 16 * MiB // 4
    ex = {}
    # The ring rows keep pin_in_place off: they run the same pageable arrays again and again,
    # which the defaults would pin in place after the second run (the last row shows that).
    ring = dict(pin_in_place=False)
    configs = [
        ("ring, H2D only", dict(output=None, **ring), page_src, None, pinned_h2d, "h2d"),
        ("ring, both ways", dict(ring), page_src, page_dst, pinned_both, "both"),
        ("plain pageable cuMemcpyAsync, both ways", dict(staging="direct"), page_src, page_dst, pinned_both, "both"),
        ("pinned direct, both ways", dict(), pin_src, pin_dst, pinned_both, "both"),
        ("pageable, pinned in place after the second run (defaults), both ways", dict(), page_src, page_dst,
         pinned_both, "both"),
    ]
    for i, (label, kw, src, dst, peak, direction) in enumerate(configs):
        ctx.progress(0.5 + 0.3 * i / len(configs), f"executor: {label}")
        with StreamPipeline(None, streams=3, chunk=chunk, pool=pool, device=dev, **kw) as pipe:
            if dst is not None:
                dst.fill(0xDEADBEEF)
                pipe.run(src, out=dst)
                if not np.array_equal(dst, page_src):
                    raise AssertionError(f"{label}: output differs from input")
            st = median_pipeline_run(pipe, src, dst, repeat)
        rate = gbps(size, st.wall_ms)  # bytes each way per second of wall time
        ex[label] = rate / peak
        rows.append({"test": "executor", "memory": "pageable" if src is page_src else "pinned", "what": label,
                     "GB/s": rate, "ratio_to_pinned": rate / peak, "overlap": st.overlap})
    ctx.progress(0.8, "executor: chunk sizes")
    chunk_rows = []
    for mib in (1, 2, 4, 8, 16, 32):
        # timing=True: the H2D stage's rate from every batch's events, not an estimate
        with StreamPipeline(None, streams=3, chunk=mib * MiB // 4, pool=pool, device=dev, output=None,
                            timing=True) as pipe:
            st = median_pipeline_run(pipe, pin_src, None, repeat)
        h2d_stage = st.stage_gbps("h2d")
        chunk_rows.append({"test": "executor H2D stage", "memory": "pinned", "what": f"chunk {mib} MiB",
                           "GB/s": h2d_stage, "ratio_to_pinned": h2d_stage / pinned_h2d,
                           "overlap": None})
    rows += chunk_rows

    ring_h2d = ex["ring, H2D only"]
    ring_both = ex["ring, both ways"]
    big_chunks = [r["ratio_to_pinned"] for r in chunk_rows if int(r["what"].split()[1]) >= 8]
    ratio = min(ring_h2d, ring_both)
    ring_vs_host = {
        "h2d": ring_h2d * pinned_h2d / host["in_gbps"],
        "both": ring_both * pinned_both / host["both_gbps_each_way"],
    }
    notes = [
        f"{size >> 20} MiB per copy. Pinned: H2D {pinned_h2d:.1f}, D2H {rates['pinned']['d2h']:.1f}, "
        f"both at once {pinned_both:.1f} GB/s each way; pageable: H2D {rates['pageable']['h2d']:.1f}, "
        f"D2H {rates['pageable']['d2h']:.1f}, both {rates['pageable']['both_each_way']:.1f} GB/s.",
        "Overlap with a kernel of the same length: "
        + ", ".join(f"{k} {v:.2f}" for k, v in overlap.items()) + " (1 = full overlap).",
        f"Executor, pageable through the ring: H2D only {ring_h2d:.2f}x pinned H2D peak, both ways "
        f"{ring_both:.2f}x the pinned both-ways peak (target 0.8); plain pageable cuMemcpyAsync "
        f"{ex['plain pageable cuMemcpyAsync, both ways']:.2f}x; the same pageable arrays with the defaults, "
        "which pin them in place (cuMemHostRegister) at the second run and copy them directly from then on: "
        f"{ex['pageable, pinned in place after the second run (defaults), both ways']:.2f}x.",
        f"Executor H2D stage with pinned input at chunks >= 8 MiB: min {min(big_chunks):.3f}x the pinned "
        "peak (target 0.95).",
        f"Host bound for the ring ({host['threads']} staging threads per direction, measured now): "
        f"memmove pageable->pinned {host['in_gbps']:.1f} GB/s alone, {host['both_gbps_each_way']:.1f} GB/s "
        f"each way with pinned->pageable at the same time. The ring reaches {ring_vs_host['h2d']:.2f}x / "
        f"{ring_vs_host['both']:.2f}x of that: where the host's memmove is below 0.8x the PCIe peak, the "
        "0.8x target is out of reach of any staging design that copies through the CPU.",
    ]
    pool.free_array(d_in, s0)
    pool.free_array(d_out, s0)
    s0.sync()
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict=UNJUDGED, device=device_info(dev),
        params={"bytes": size, "repeat": repeat, "executor_chunk_bytes": chunk * 4, "streams": 3},
        metrics={"rates": rates, "overlap": overlap, "executor_ratio_to_pinned": ex,
                 "host_memmove_bound": host, "ring_ratio_to_host_bound": ring_vs_host,
                 "h2d_stage_ratio_min_chunks_8mib_up": min(big_chunks)},
        bound=Bound("pinned copy peak (H2D alone / both ways at once), this run", pinned_h2d, "GB/s"),
        ratio=ratio, table=rows, notes=notes,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
def _direction_overlap(rates: dict[str, float]) -> float:
    """How much H2D and D2H overlapped: (t_h2d + t_d2h - t_both) / min(t_h2d, t_d2h)
    for the same bytes (1 = fully, 0 = one after the other)."""
    th, td, tb = 1 / rates["h2d"], 1 / rates["d2h"], 1 / rates["both_each_way"]
    return (th + td - tb) / min(th, td)


@rule(NAME, "pageable-kills-overlap")
def _pageable_overlap(d: Data) -> Judged:
    pin, page = d.m("rates", "pinned"), d.m("rates", "pageable")
    dir_page, dir_pin = max(0.0, _direction_overlap(page)), max(0.0, _direction_overlap(pin))
    both_ratio = page["both_each_way"] / pin["both_each_way"]
    kov = [float(d.m("overlap", "pageable_h2d")), float(d.m("overlap", "pageable_d2h"))]
    plain = d.m_or(None, "executor_ratio_to_pinned", "plain pageable cuMemcpyAsync, both ways")
    kills_copies = dir_page <= 0.25
    kills_kernel = max(kov) <= 0.5
    return Judged(
        measured=(f"pageable H2D ‖ D2H overlap {dir_page:.2f} (pinned {dir_pin:.2f}); both ways at once "
                  f"{page['both_each_way']:.1f} GB/s each way = {times(both_ratio)} pinned"
                  + (f"; a pipeline on plain pageable copies {times(plain)} pinned" if plain is not None else "")
                  + f"; copy ‖ kernel overlap {'lost' if kills_kernel else 'kept'} "
                    f"(H2D {kov[0]:.2f}, D2H {kov[1]:.2f}; 1 = full)"),
        bound=f"pinned, both ways at once = {pin['both_each_way']:.1f} GB/s each way",
        ratio=both_ratio, verdict=both(kills_copies, kills_kernel),
        target="supported: pageable copies overlap neither each other (≤ 0.25) nor a kernel (≤ 0.5); "
               "partly: one of the two")


@rule(NAME, "pinned-full-speed", "pinned host memory is needed for full-speed copies")
def _pinned_speed(d: Data) -> Judged:
    pin, page = d.m("rates", "pinned"), d.m("rates", "pageable")
    rh, rd = page["h2d"] / pin["h2d"], page["d2h"] / pin["d2h"]
    return Judged(measured=f"pageable H2D {page['h2d']:.1f} GB/s = {times(rh)}, D2H {page['d2h']:.1f} GB/s = {times(rd)} pinned",
                  bound=f"pinned H2D {pin['h2d']:.1f}, D2H {pin['d2h']:.1f} GB/s", ratio=max(rh, rd),
                  verdict=at_most(max(rh, rd), 0.8, 0.95), target="supported: pageable ≤ 0.8× pinned both ways")


@rule(NAME, "pinned-ring",
      "a pageable array staged through fullpipe's pinned ring reaches ≥ 0.8× the pinned peak each way")
def _pinned_ring(d: Data) -> Judged:
    ex = d.m("executor_ratio_to_pinned")
    h2d, both_ = float(ex["ring, H2D only"]), float(ex["ring, both ways"])
    pin = d.m("rates", "pinned")
    host = d.m_or(None, "host_memmove_bound")
    vs_host = d.m_or(None, "ring_ratio_to_host_bound")
    hb = ""
    if host:
        hb = (f"; the host's own memmove bound (pageable ↔ pinned, {host.get('threads')} threads): "
              f"{host['in_gbps']:.1f} GB/s alone, {host['both_gbps_each_way']:.1f} GB/s each way")
    return Judged(measured=f"H2D only {times(h2d)}, both ways {times(both_)} the pinned peak"
                           + (f"; {times(vs_host['h2d'])} / {times(vs_host['both'])} of the host memmove bound"
                              if vs_host else ""),
                  bound=f"pinned H2D {pin['h2d']:.1f} GB/s, both ways {pin['both_each_way']:.1f} GB/s each way{hb}",
                  ratio=min(h2d, both_), verdict=at_least(min(h2d, both_), 0.8, 0.5),
                  target="supported ≥ 0.8×, partly ≥ 0.5×")


@rule(NAME, "chunk-size", "the pipeline's H2D stage reaches ≥ 0.95× the pinned peak with chunks ≥ 8 MiB")
def _pinned_chunks(d: Data) -> Judged:
    v = float(d.m("h2d_stage_ratio_min_chunks_8mib_up"))
    rows = d.rows(test="executor H2D stage")
    small = ", ".join(f"{r['what'].replace('chunk ', '')}: {times(r['ratio_to_pinned'])}" for r in rows
                      if isinstance(r.get("ratio_to_pinned"), (int, float)))
    return Judged(measured=f"worst ≥ 8 MiB: {times(v)}" + (f" (by chunk {small})" if small else ""),
                  bound=f"pinned H2D peak {d.m('rates', 'pinned', 'h2d'):.1f} GB/s", ratio=v,
                  verdict=at_least(v, 0.95, 0.8), target="supported ≥ 0.95×, partly ≥ 0.8×")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    raw = {(x["memory"], x["what"]): x["GB/s"] for x in rows_of(r, test="raw copy")}
    ex = {x["what"]: x["GB/s"] for x in rows_of(r, test="executor")}
    chunks = [x for x in rows_of(r, test="executor H2D stage") if is_num(x.get("GB/s"))]
    need(raw, "raw copy rows")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE, gridspec_kw={"width_ratios": [1.5, 1]})
    groups = [("h2d", "H2D"), ("d2h", "D2H"), ("both_each_way", "both ways at once\n(each way)")]
    series = [
        ("pinned (raw copy)", PINNED, lambda g: raw.get(("pinned", g))),
        ("pageable (raw copy)", PAGEABLE, lambda g: raw.get(("pageable", g))),
        ("pageable via fullpipe's pinned ring", RING,
         lambda g: {"h2d": ex.get("ring, H2D only"), "both_each_way": ex.get("ring, both ways")}.get(g)),
        ("pageable, plain cuMemcpyAsync in the pipeline", PLAIN,
         lambda g: ex.get("plain pageable cuMemcpyAsync, both ways") if g == "both_each_way" else None),
        ("pinned, through the pipeline", "#9ecae1",
         lambda g: ex.get("pinned direct, both ways") if g == "both_each_way" else None),
        ("pageable, pinned in place by the pipeline", "#31a354",
         lambda g: ex.get("pageable, pinned in place after the second run (defaults), both ways")
         if g == "both_each_way" else None),
    ]
    width = 0.14
    for j, (label, color, get) in enumerate(series):
        xs, vs = [], []
        for i, (g, _) in enumerate(groups):
            v = get(g)
            if is_num(v):
                xs.append(i + (j - (len(series) - 1) / 2) * width)
                vs.append(v)
        if vs:
            label_bars(a1, a1.bar(xs, vs, width=width, color=color, label=label), "{:.1f}", horizontal=False)
    host = (r.get("metrics") or {}).get("host_memmove_bound") or {}
    ring_j = 2  # the ring's series index
    for i, key in ((0, "in_gbps"), (2, "both_gbps_each_way")):
        v = host.get(key)
        if is_num(v):
            x = i + (ring_j - (len(series) - 1) / 2) * width
            a1.hlines(v, x - width / 2, x + width / 2, colors=BOUND, linestyles="--", lw=1.5,
                      label="host memmove bound of the ring (staging threads)" if i == 0 else None)
    a1.set_xticks(range(len(groups)), [g[1] for g in groups])
    a1.set_ylabel("GB/s")
    a1.set_title("host ↔ device bandwidth: pinned vs pageable")
    a1.legend(loc="upper right", fontsize=8)
    a1.set_ylim(0, max(v for v in raw.values() if is_num(v)) * 1.6)
    a1.grid(axis="y", alpha=0.3)
    if chunks:
        mib = [float(str(x["what"]).split()[1]) for x in chunks]
        a2.plot(mib, [x["GB/s"] for x in chunks], "o-", color=PINNED, label="pipeline H2D stage (pinned input)")
        peak = raw.get(("pinned", "h2d"))
        if is_num(peak):
            a2.axhline(peak, color=BOUND, ls="--", lw=1.2, label=f"bound: pinned H2D peak {peak:.1f} GB/s")
            a2.axhline(0.95 * peak, color=GREY, ls=":", lw=1, label="0.95 × peak (target)")
        a2.set_xscale("log", base=2)
        a2.set_xticks(mib, [f"{m:g}" for m in mib])
        a2.set_xlabel("chunk size (MiB)")
        a2.set_ylabel("GB/s")
        a2.set_ylim(0, (peak if is_num(peak) else max(x["GB/s"] for x in chunks)) * 1.15)
        a2.set_title("bandwidth vs chunk size")
        a2.legend(loc="lower right", fontsize=8)
        a2.grid(alpha=0.3)
    else:
        a2.set_visible(False)
    return {"bandwidth: pinned, pageable and the pinned ring; and vs chunk size": save(fig, out / f"{NAME}.png")}
