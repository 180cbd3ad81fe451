"""CLI behaviour that holds on any machine, GPU or not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fullpipe import cli
from tests.conftest import gpu_unavailable_reason


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fullpipe", *args], capture_output=True, text=True, timeout=300)


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


def test_compile_all_kernels_reports_resources_and_caches(tmp_path):
    env_cache = str(tmp_path / "cache")
    import os

    env = dict(os.environ, FULLPIPE_CACHE_DIR=env_cache)
    first = subprocess.run([sys.executable, "-m", "fullpipe", "compile", "--arch", "sm_90a", "--json"],
                           capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    second = subprocess.run([sys.executable, "-m", "fullpipe", "compile", "--arch", "sm_90a", "--json"],
                            capture_output=True, text=True, env=env, timeout=600)
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert {k["cache"] for k in a["kernels"]} == {"miss"}
    assert {k["cache"] for k in b["kernels"]} == {"hit"}
    names = {k["kernel"] for k in a["kernels"]}
    assert {"spin_stamp", "cluster_probe", "iota_add"} <= names


@pytest.mark.parametrize("argv, message", [
    (["compile", "--arch", "sm90"], "arch must look like"),
    (["bench", "no-such-experiment"], "unknown experiment"),
    (["report", "--only", "no-such-experiment"], "unknown experiment"),
])
def test_usage_errors_exit_2_with_a_message(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_command_is_an_argparse_error():
    proc = run_cli("frobnicate")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
