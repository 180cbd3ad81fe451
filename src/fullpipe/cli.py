"""The ``fullpipe`` command.

    fullpipe info [--json]              device facts and what they mean for pipelining
    fullpipe compile [--arch sm_90a]    compile every shipped kernel (cached), with resources
    fullpipe bench NAME [--quick]       one experiment: a table and its JSON
    fullpipe trace NAME [--quick]       one experiment under the tracer: Perfetto JSON + PNG
    fullpipe report [--quick]           every experiment: one HTML report with figures
    fullpipe tune-gemm MxNxK ...        measure gemm(variant="hopper")'s plans for these products

Exit status: 0 on success, 2 when there is no usable GPU or the input is wrong,
1 when an experiment or compile fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

EXIT_NO_GPU = 2
EXIT_USAGE = 2


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _fail(message: str, code: int) -> int:
    print(f"fullpipe: {message}", file=sys.stderr)
    return code


def _open_device(index: int):
    """The device, or None after printing one line when there is none."""
    from .cuda.device import Device
    from .errors import NoDeviceError

    try:
        return Device(index)
    except NoDeviceError as exc:
        _fail(f"no usable NVIDIA GPU or driver here ({exc.name}: {exc.description.strip()})", 0)
        return None
    except ValueError as exc:
        _fail(str(exc), 0)
        return None


# --------------------------------------------------------------------------- info
def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}".replace(".0 ", " ")
        n /= 1024
    return str(n)


def _peer_links(index: int) -> dict:
    """{other GPU: fullpipe.cuda.topology.Link} for every other GPU of this host."""
    from .cuda import driver as drv
    from .cuda.topology import link_between

    n = int(drv.call("cuDeviceGetCount"))
    return {j: link_between(index, j) for j in range(n) if j != index}


def cmd_info(args: argparse.Namespace) -> int:
    dev = _open_device(args.device)
    if dev is None:
        return EXIT_NO_GPU
    facts = dev.facts
    links = _peer_links(facts.index)
    if args.json:
        d = facts.as_dict()
        d["implications"] = facts.implications()
        d["links"] = {str(j): link.as_dict() for j, link in links.items()}
        print(json.dumps(d, indent=2))
        return 0
    from rich.table import Table

    t = Table(title=f"GPU {facts.index}: {facts.name}", show_header=True)
    t.add_column("fact")
    t.add_column("value", justify="right")
    rows = [
        ("compute capability", f"{facts.compute_capability[0]}.{facts.compute_capability[1]} ({facts.arch})"),
        ("SMs", str(facts.sm_count)),
        ("copy engines (asyncEngineCount)", str(facts.copy_engines)),
        ("concurrent kernels", "yes" if facts.concurrent_kernels else "no"),
        ("max resident grids", str(facts.max_resident_grids)),
        ("threads / blocks per SM", f"{facts.max_threads_per_sm} / {facts.max_blocks_per_sm}"),
        ("shared memory per SM", _fmt_bytes(facts.shared_memory_per_sm)),
        ("shared memory per block (default / opt-in)",
         f"{_fmt_bytes(facts.shared_memory_per_block)} / {_fmt_bytes(facts.shared_memory_per_block_optin)}"),
        ("registers per SM / per block", f"{facts.registers_per_sm} / {facts.registers_per_block}"),
        ("L2 cache", _fmt_bytes(facts.l2_cache)),
        ("global memory", _fmt_bytes(facts.global_memory)),
        ("memory pools (cudaMallocAsync)", "yes" if facts.memory_pools_supported else "no"),
        ("stream priorities (lowest, highest)", str(facts.stream_priority_range)),
        ("cooperative launch / clusters",
         f"{'yes' if facts.cooperative_launch else 'no'} / {'yes' if facts.cluster_launch else 'no'}"),
        ("PCIe link", f"gen {facts.pcie_generation} x{facts.pcie_width}" if facts.pcie_generation else "unknown (NVML unavailable)"),
        ("driver / runtime / NVRTC", f"{facts.driver_version} / {facts.runtime_version} / {facts.nvrtc_version}"),
    ]
    rows += [(f"link to GPU {j} (nvidia-smi)", link.describe()) for j, link in links.items()]
    for k, v in rows:
        t.add_row(k, v)
    con = _console()
    con.print(t)
    for line in facts.implications():
        con.print(f"  • {line}")
    return 0


# --------------------------------------------------------------------------- compile
def cmd_compile(args: argparse.Namespace) -> int:
    import time

    from .cuda import compiler
    from .errors import CompileError

    if args.clear_cache:
        n = compiler.clear_cache()
        print(f"removed {n} cached files from {compiler.cache_dir()}")
    arch = args.arch
    if arch is None:
        dev = _open_device(args.device)
        if dev is None:
            print("fullpipe: pass --arch (e.g. --arch sm_90a) to compile without a GPU", file=sys.stderr)
            return EXIT_NO_GPU
        arch = compiler.default_arch(dev)
    try:
        compiler.check_arch(arch)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    from rich.table import Table

    t = Table(title=f"fullpipe kernels for {arch} (cache: {compiler.cache_dir()})")
    for col in ("source", "kernel", "regs", "smem", "spills", "cache", "seconds"):
        t.add_column(col)
    rows, failed, skipped, todo = [], 0, [], []
    t_all = time.perf_counter()
    for path in compiler.package_sources():
        rel = path.relative_to(compiler.PACKAGE_ROOT).as_posix()
        needs = compiler.needed_arch(path)
        if needs and not compiler.arch_provides(arch, needs):
            skipped.append({"source": rel, "needs": needs})
        else:
            todo.append((rel, path))

    def build(path):
        """(module, its resources) or the CompileError; NVRTC releases the GIL, so
        threads compile side by side."""
        try:
            mod = compiler.compile_file(path, arch=arch, use_cache=not args.no_cache)
            return mod, mod.resources
        except CompileError as exc:
            return exc, None

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        built = list(pool.map(build, [path for _, path in todo]))
    for (rel, _), (mod, resources) in zip(todo, built):
        if isinstance(mod, CompileError):
            failed += 1
            print(mod, file=sys.stderr)
            continue
        for name, r in sorted(resources.items()):
            row = dict(source=rel, kernel=name, registers=r.registers, smem=r.shared_bytes,
                       spill_bytes=r.spill_store_bytes + r.spill_load_bytes,
                       cache="hit" if mod.from_cache else "miss", seconds=round(mod.seconds, 3))
            rows.append(row)
            t.add_row(rel, name, str(r.registers), str(r.shared_bytes), str(row["spill_bytes"]),
                      row["cache"], f"{mod.seconds:.3f}")
    if skipped:
        print(f"fullpipe: not compiled for {arch}, which lacks what they use: "
              + ", ".join(f"{s['source']} (needs {s['needs']})" for s in skipped), file=sys.stderr)
    total = time.perf_counter() - t_all
    if args.json:
        print(json.dumps({"arch": arch, "seconds": total, "kernels": rows, "skipped": skipped}, indent=2))
    else:
        con = _console()
        con.print(t)
        con.print(f"{len(rows)} kernels in {total:.2f} s")
    return 1 if failed else 0


# --------------------------------------------------------------------------- bench
def _experiment_setup(args: argparse.Namespace):
    """(device, output folder) for `bench`/`trace NAME`, or the exit status on a bad
    name or no GPU."""
    from . import experiments

    if args.name not in experiments.names():
        known = ", ".join(experiments.names()) or "(none yet)"
        return _fail(f"unknown experiment {args.name!r}; known: {known}", EXIT_USAGE)
    dev = _open_device(args.device)
    if dev is None:
        return EXIT_NO_GPU
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return dev, out


def cmd_bench(args: argparse.Namespace) -> int:
    from . import experiments

    setup = _experiment_setup(args)
    if isinstance(setup, int):
        return setup
    dev, out = setup
    from .report.console import run_with_progress, print_result

    result = run_with_progress(args.name, experiments.Context(device=dev, quick=args.quick, out_dir=out))
    path = out / f"{args.name}.json"
    result.to_json(path)
    print_result(result)
    print(f"JSON: {path}")
    return 0 if result.verdict != "failed" else 1


# --------------------------------------------------------------------------- trace
def cmd_trace(args: argparse.Namespace) -> int:
    """Run one experiment under fullpipe.trace; write the Perfetto JSON, the PNG and
    fullpipe's own timeline beside the experiment's JSON."""
    from . import experiments

    setup = _experiment_setup(args)
    if isinstance(setup, int):
        return setup
    dev, out = setup
    from . import trace
    from .report.console import print_result, run_with_progress

    with trace.capture() as tl, trace.nvtx.range(f"fullpipe trace {args.name}"):
        result = run_with_progress(args.name, experiments.Context(device=dev, quick=args.quick, out_dir=out))
    perfetto = tl.save(out / f"{args.name}-trace.json")
    timeline = tl.dump(out / f"{args.name}-timeline.json")
    result.traces.update(perfetto=str(perfetto), timeline=str(timeline))
    try:
        png = tl.plot(out / f"{args.name}-trace.png", title=f"{args.name} on {dev.name}")
        result.figures["trace"] = str(png)
    except ImportError as exc:
        png = None
        print(f"fullpipe: no figure: {exc}", file=sys.stderr)
    path = out / f"{args.name}.json"
    result.to_json(path)
    print_result(result)
    print(tl.summary())
    print(f"JSON: {path}\nPerfetto trace (open at https://ui.perfetto.dev): {perfetto}"
          + (f"\nfigure: {png}" if png else ""))
    return 0 if result.verdict != "failed" else 1


# --------------------------------------------------------------------------- tune-gemm
def _parse_product(text: str) -> tuple[int, int, int]:
    parts = text.lower().replace("*", "x").split("x")
    try:
        m, n, k = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"a product is MxNxK, three whole numbers (e.g. 4096x11008x4096), got {text!r}") from None
    return m, n, k


def cmd_tune_gemm(args: argparse.Namespace) -> int:
    """Measure the candidate plans of gemm(variant="hopper") for each product; remember and
    print the fastest."""
    from .kernels import gemm_tuning, hopper_gemm

    dtype = {"bf16": "bfloat16", "fp16": "float16"}[args.dtype]
    try:
        shapes = [_parse_product(t) for t in args.products]
        for shape in shapes:
            hopper_gemm.check_shapes(*shape, b_transposed=args.w_t)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    dev = _open_device(args.device)
    if dev is None:
        return EXIT_NO_GPU
    if dev.arch != "sm_90":
        return _fail(f"gemm(variant='hopper') runs on Hopper (sm_90) GPUs; device {args.device} is "
                     f"{dev.name} ({dev.arch})", EXIT_NO_GPU)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    with Progress(TextColumn("[bold]tune-gemm"), BarColumn(), TextColumn("{task.fields[msg]}"), TimeElapsedColumn(),
                  console=_console(stderr=True)) as prog:
        task = prog.add_task("tune", total=1.0, msg=f"{len(shapes)} products; first launches compile")
        results = gemm_tuning.tune_gemm(shapes, dtype=dtype, b_transposed=args.w_t, device=args.device,
                                        progress=lambda f, msg: prog.update(task, completed=f, msg=msg))
    layout = "a @ w.T" if args.w_t else "a @ b"
    t = Table(title=f"gemm(variant='hopper') plans, {args.dtype}, {layout}, on {dev.name}")
    for col in ("M x N x K", "rule's plan", "us", "measured plan", "us", "x rule"):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(f"{r.m}x{r.n}x{r.k}", r.rule, f"{r.rule_us:.2f}", r.chosen, f"{r.chosen_us:.2f}", f"{r.speedup:.2f}")
    con = _console()
    con.print(t)
    con.print(f"remembered in {gemm_tuning.tuning_file()}: gemm(variant='hopper') runs these plans for these products")
    return 0


# --------------------------------------------------------------------------- report
def cmd_report(args: argparse.Namespace) -> int:
    """Every experiment, each in its own process, then one self-contained HTML page."""
    from . import experiments

    unknown = [n for n in (args.only or []) if n not in experiments.names()]
    if unknown:
        known = ", ".join(experiments.names())
        return _fail(f"unknown experiment(s) {', '.join(unknown)}; known: {known}", EXIT_USAGE)
    dev = _open_device(args.device)
    if dev is None:
        return EXIT_NO_GPU
    from .report.runner import run_report

    facts = dev.facts.as_dict()
    facts["implications"] = dev.facts.implications()
    del dev  # each experiment runs in a process of its own
    page = run_report(Path(args.out), quick=args.quick, only=args.only, facts=facts, device=args.device)
    doc = json.loads((page.parent / "results.json").read_text())
    verdicts = [r.get("verdict") for r in doc["results"]]
    print(f"report: {page}  ({len(verdicts)} experiments: "
          + ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts)) + ")")
    return 0


# --------------------------------------------------------------------------- main
QUICK_HELP = ("smaller sizes, the same claims and verdicts (on an H200 the full report takes about 240 s, "
              "--quick about 180 s)")


def experiments_help() -> str:
    """One line per experiment: its name and what it tests. Imports every experiment
    module, so it is built only when a help page that shows it is printed."""
    from . import experiments

    lines = ["experiments:"]
    names = experiments.names()
    width = max(map(len, names), default=0)
    for name in names:
        lines.append(f"  {name:<{width}}  {experiments.load(name).TITLE}")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors, and the list of experiments at the end of the
    help of the commands that take one (built only when that help is printed)."""

    def __init__(self, *args, lists_experiments: bool = False, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.lists_experiments = lists_experiments

    def format_help(self) -> str:
        if self.lists_experiments and self.epilog is None:
            self.epilog = experiments_help()
        return super().format_help()

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from ._version import __version__

    p = _Parser(prog="fullpipe", description="Keep every engine of an NVIDIA GPU busy, and measure it.")
    p.add_argument("--version", action="version", version=f"fullpipe {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser,
                           help="what to do; `fullpipe COMMAND --help` tells more")
    device_help = "GPU index (default 0)"

    s = sub.add_parser("info", help="device facts and what they mean for pipelining",
                       description="The GPU's facts that matter for pipelining, and what each one means.")
    s.add_argument("--json", action="store_true", help="print the facts as JSON")
    s.add_argument("--device", type=int, default=0, help=device_help)
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("compile", help="compile every shipped kernel to cubin (cached)",
                       description="Compile every CUDA source shipped in fullpipe to a cubin through NVRTC\n"
                                   "and print each kernel's registers, shared memory and spills. Sources\n"
                                   "that need a newer target than --arch are named in one line and left out.")
    s.add_argument("--arch", help="target, e.g. sm_90a or sm_80 (default: the GPU's; needed without a GPU)")
    s.add_argument("--device", type=int, default=0, help="GPU whose architecture to compile for, without --arch (default 0)")
    s.add_argument("--no-cache", action="store_true", help="compile even if cached (the result is not stored)")
    s.add_argument("--clear-cache", action="store_true", help="empty the cubin cache first")
    s.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                   help="sources compiled at once (default: this process's CPUs)")
    s.add_argument("--json", action="store_true", help="print the kernels as JSON instead of a table")
    s.set_defaults(func=cmd_compile)

    s = sub.add_parser("bench", help="run one experiment and print its table", lists_experiments=True,
                       description="Run one experiment on the GPU: a table, its verdict and its JSON.")
    s.add_argument("name", help="experiment name (listed below)")
    s.add_argument("--quick", action="store_true", help=QUICK_HELP)
    s.add_argument("--out", default="fullpipe-out", help="where JSON and figures go (default fullpipe-out)")
    s.add_argument("--device", type=int, default=0, help=device_help)
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("report", help="run every experiment and write one HTML report", lists_experiments=True,
                       description="Run every experiment, each in its own process, and write one\n"
                                   "self-contained HTML page with the claims table and figures.")
    s.add_argument("--quick", action="store_true", help=QUICK_HELP)
    s.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments (listed below)")
    s.add_argument("--out", default="fullpipe-report",
                   help="output folder: index.html, results.json, traces/ (default fullpipe-report)")
    s.add_argument("--device", type=int, default=0, help=device_help)
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("tune-gemm", help="measure gemm(variant='hopper')'s plans for given products and remember them",
                       description="Measure the candidate plans of gemm(variant='hopper') for each product on\n"
                                   "random operands, and remember the fastest (a candidate replaces the rule's plan\n"
                                   "only where it is faster by more than 3 %): later calls of that shape run it.")
    s.add_argument("products", nargs="+", metavar="MxNxK", help="products, e.g. 4096x11008x4096 96x5528x11016")
    s.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="operand dtype (default bf16)")
    s.add_argument("--w-t", action="store_true", help="b given as w.T of an (N, K) weight, as F.linear(x, w) reads it")
    s.add_argument("--device", type=int, default=0, help=device_help)
    s.set_defaults(func=cmd_tune_gemm)

    s = sub.add_parser("trace", help="run one experiment under the timeline tracer: Perfetto JSON + PNG",
                       lists_experiments=True,
                       description="Run one experiment under fullpipe's tracer (CUPTI when cupti-python\n"
                                   "is installed): the experiment's JSON, a Perfetto trace and a Gantt PNG.")
    s.add_argument("name", help="experiment name (listed below)")
    s.add_argument("--quick", action="store_true", help=QUICK_HELP)
    s.add_argument("--out", default="fullpipe-out", help="where the JSON, trace and figure go (default fullpipe-out)")
    s.add_argument("--device", type=int, default=0, help=device_help)
    s.set_defaults(func=cmd_trace)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
