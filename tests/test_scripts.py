"""Every file in scripts/ is a tool a developer runs: executable, and `--help` answers
(status 0, some text) without a GPU.

A script is only run once its text shows it handles --help (argparse, or a `--help`
case): a script that ignores its arguments would start its real work (installs, GPU
runs) instead of printing help.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for p in (REPO / "scripts").iterdir() if p.is_file()) if (REPO / "scripts").is_dir() else []


def handles_help(text: str) -> bool:
    if text.startswith("#!") and "python" in text.splitlines()[0]:
        return "argparse" in text or "--help" in text
    # a `case` arm (`-h|--help)`) or a test of the argument (`[ "$1" = "--help" ]`)
    return re.search(r'^\s*(-h\|)?--help\)|= "--help"', text, re.MULTILINE) is not None


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_executable_and_answers_help(script, tmp_path):
    assert os.access(script, os.X_OK), f"scripts/{script.name} lacks the exec bit"
    text = script.read_text()
    assert text.startswith("#!"), f"scripts/{script.name} has no #! line"
    assert handles_help(text), f"scripts/{script.name} does not handle --help (not run)"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO / "src"), OUT=str(tmp_path))
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert proc.returncode == 0, f"scripts/{script.name} --help: status {proc.returncode}\n{proc.stderr[-2000:]}"
    assert len(proc.stdout.strip().splitlines()) >= 2, f"scripts/{script.name} --help printed almost nothing"
