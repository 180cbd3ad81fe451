"""CLI behaviour that holds on any machine, GPU or not."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from fullpipe import cli, experiments
from fullpipe.cuda import compiler
from tests.conftest import gpu_unavailable_reason

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fullpipe", *args], capture_output=True, text=True, timeout=300)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"fullpipe": parser, **sub.choices}


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


# --------------------------------------------------------------------------- without a GPU
@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_info_without_gpu_is_one_line_and_status_2():
    proc = run_cli("info")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("fullpipe: no usable NVIDIA GPU")


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
@pytest.mark.parametrize("argv", [["report", "--quick"], ["bench", "copy-engines"], ["trace", "overlap"]])
def test_gpu_commands_without_gpu_are_one_line_and_status_2(argv):
    proc = run_cli(*argv)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("fullpipe: no usable NVIDIA GPU")


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU")
def test_compile_without_gpu_asks_for_arch():
    proc = run_cli("compile")
    assert proc.returncode == 2 and "--arch" in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- compile
def test_compile_all_kernels_reports_resources_and_caches():
    """Every shipped source compiles for sm_90a, and a second process finds all of it in
    the cache. The cache is the test run's one cache (conftest), empty at the run's start;
    this test runs last, so most builds were compiled earlier in the run (by the precompile
    thread or other tests) and are not compiled twice."""
    first = run_cli("compile", "--arch", "sm_90a", "--json")
    assert first.returncode == 0, first.stderr
    second = run_cli("compile", "--arch", "sm_90a", "--json")
    assert second.returncode == 0, second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    sources = {p.relative_to(compiler.PACKAGE_ROOT).as_posix() for p in compiler.package_sources()}
    assert {k["source"] for k in a["kernels"]} == sources and a["skipped"] == []
    assert {k["cache"] for k in b["kernels"]} == {"hit"}
    resources = lambda doc: sorted((k["source"], k["kernel"], k["registers"], k["smem"], k["spill_bytes"])
                                   for k in doc["kernels"])
    assert resources(a) == resources(b)
    names = {k["kernel"] for k in a["kernels"]}
    assert {"spin_stamp", "cluster_probe", "iota_add"} <= names


def test_compile_for_an_older_arch_names_the_hopper_sources_in_one_line(monkeypatch, capsys):
    """`compile --arch sm_80` leaves out what the sources declare they need (no compile is
    tried and no ptxas error printed), says so in one line, and compiles the rest."""
    compiled = []

    def fake_compile(path, **kwargs):
        compiled.append((Path(path).relative_to(compiler.PACKAGE_ROOT).as_posix(), kwargs["arch"]))
        return types.SimpleNamespace(resources={}, from_cache=False, seconds=0.0)

    monkeypatch.setattr(compiler, "compile_file", fake_compile)
    assert cli.main(["compile", "--arch", "sm_80", "--json"]) == 0
    captured = capsys.readouterr()
    everything = {p.relative_to(compiler.PACKAGE_ROOT).as_posix() for p in compiler.package_sources()}
    hopper = {s for s in everything if compiler.needed_arch(compiler.PACKAGE_ROOT / s)}
    assert hopper, "no shipped source declares that it needs sm_90"
    assert {s for s, _ in compiled} == everything - hopper and {a for _, a in compiled} == {"sm_80"}
    lines = [l for l in captured.err.splitlines() if l.strip()]
    assert len(lines) == 1 and "sm_80" in lines[0] and all(s in lines[0] for s in hopper)
    assert sorted(s["source"] for s in json.loads(captured.out)["skipped"]) == sorted(hopper)

    compiled.clear()
    assert cli.main(["compile", "--arch", "sm_90a", "--json"]) == 0
    assert {s for s, _ in compiled} == everything and capsys.readouterr().err == ""


# PTX features newer than sm_80 and the oldest target that has them.
_FEATURES = {
    "wgmma.": "sm_90a", "setmaxnreg": "sm_90a",
    "cp.async.bulk": "sm_90", "mbarrier.try_wait": "sm_90", "barrier.cluster": "sm_90",
    "mapa.": "sm_90", "%cluster": "sm_90", "__cluster_dims__": "sm_90",
}


def _source_with_headers(path, seen=None):
    """A source's text with the fullpipe headers it includes, recursively."""
    seen = set() if seen is None else seen
    text = path.read_text()
    for name in re.findall(r'#include\s*<(fullpipe/[^>]+)>', text):
        header = compiler.PACKAGE_ROOT / "cuda" / "include" / name
        if header not in seen:
            seen.add(header)
            text += _source_with_headers(header, seen)
    return text


@pytest.mark.parametrize("path", compiler.package_sources(), ids=lambda p: p.relative_to(compiler.PACKAGE_ROOT).as_posix())
def test_sources_declare_the_arch_their_ptx_needs(path):
    """A source whose code (or a fullpipe header it includes) uses an sm_90 feature must
    say so with a `fullpipe-requires:` marker, or `fullpipe compile --arch sm_80` would
    hand it to ptxas and fail."""
    text = _source_with_headers(path)
    needed = [arch for feature, arch in _FEATURES.items() if feature in text]
    declared = compiler.needed_arch(path)
    for arch in needed:
        assert declared is not None and compiler.arch_provides(declared, arch), (
            f"{path.name} uses a {arch} feature but declares {declared or 'nothing'}")


@pytest.mark.parametrize("arch, needed, ok", [
    ("sm_90", "sm_90", True), ("sm_90a", "sm_90", True), ("sm_100", "sm_90", True), ("sm_89", "sm_90", False),
    ("sm_80", "sm_90", False), ("sm_90a", "sm_90a", True), ("sm_90", "sm_90a", False), ("sm_100a", "sm_90a", False),
])
def test_arch_provides(arch, needed, ok):
    assert compiler.arch_provides(arch, needed) is ok


# --------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", ["bench", "trace", "report"])
def test_help_lists_every_experiment_with_what_it_tests(command, capsys):
    text = help_of(command, capsys)
    listed = text[text.index("experiments:"):].splitlines()[1:]
    assert [line.split()[0] for line in listed] == experiments.names()
    for line, name in zip(listed, experiments.names()):
        assert line.split(None, 1)[1] == experiments.load(name).TITLE


def test_every_option_has_help():
    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}"
               for name, parser in subcommands().items() for a in parser._actions
               if not a.help or not a.help.strip()]
    assert not missing, f"options without help text: {missing}"


@pytest.mark.parametrize("command", ["bench", "trace", "report"])
def test_quick_says_how_long_it_takes(command):
    (quick,) = [a for a in subcommands()[command]._actions if "--quick" in a.option_strings]
    assert re.search(r"\d+ s\b", quick.help), quick.help


def test_building_the_parser_loads_no_experiment():
    """Only a help page that lists the experiments imports them."""
    code = ("import sys; from fullpipe import cli; cli.build_parser(); "
            "print([m for m in sys.modules if m.startswith('fullpipe.experiments.')])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
@pytest.mark.parametrize("command", ["bench", "trace", "report"])
def test_default_output_folders_are_ignored_by_git(command):
    (out,) = [a for a in subcommands()[command]._actions if "--out" in a.option_strings]
    proc = subprocess.run(["git", "check-ignore", "-q", f"{out.default}/index.html"], cwd=REPO)
    assert proc.returncode == 0, f"{out.default}/ is not in .gitignore"


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("argv, message", [
    (["compile", "--arch", "sm90"], "arch must look like"),
    (["bench", "no-such-experiment"], "unknown experiment"),
    (["report", "--only", "no-such-experiment"], "unknown experiment"),
    (["bench"], "required: name"),
    (["frobnicate"], "invalid choice"),
    (["info", "--device", "x"], "invalid int value"),
    (["compile", "--bogus"], "unrecognized arguments: --bogus"),
    (["tune-gemm", "4096x4096"], "a product is MxNxK"),
    (["tune-gemm", "64x100x64"], "N must be a multiple of 8 for a row-major b"),
    (["tune-gemm", "0x64x64"], "must be >= 1"),
    (["tune-gemm", "64x64x64", "--dtype", "fp32"], "invalid choice"),
])
def test_usage_errors_are_one_line_and_exit_2(argv, message, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("fullpipe") and message in lines[0], err


def test_python_m_fullpipe_exits_2_on_a_usage_error():
    proc = run_cli("frobnicate")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr and "Traceback" not in proc.stderr
