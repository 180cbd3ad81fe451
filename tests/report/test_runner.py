"""`fullpipe report`'s runner on a machine without a GPU: an experiment that fails, one
that hangs, and a whole (small) report that still completes with every claim listed."""

from __future__ import annotations

import json
import sys
import time

import pytest

from fullpipe.report import runner
from fullpipe.experiments.claims import CANONICAL
from tests.conftest import gpu_unavailable_reason

no_gpu_only = pytest.mark.skipif(gpu_unavailable_reason() is None,
                                 reason="this machine has a GPU: the experiments would really run")


def test_a_hung_experiment_is_killed_at_its_time_limit(tmp_path, monkeypatch):
    script = "import time; print('PROGRESS 0.5 halfway', flush=True); time.sleep(120)"
    monkeypatch.setattr(runner, "worker_command", lambda *a: [sys.executable, "-c", script])
    seen = []
    t0 = time.monotonic()
    res = runner.run_one("sync", tmp_path, True, lambda f, m: seen.append((f, m)), limit_s=3)
    assert time.monotonic() - t0 < 15
    assert res["verdict"] == "failed" and "timed out after 3 s" in res["notes"][0]
    assert (0.5, "halfway") in seen
    assert res["wall_s"] >= 3


@no_gpu_only
def test_a_failing_experiment_is_reported_with_its_reason(tmp_path):
    res = runner.run_one("copy-engines", tmp_path, True, lambda f, m: None)
    assert res["verdict"] == "failed"
    assert res["notes"] and res["notes"][0].strip()
    assert isinstance(res["wall_s"], float)
    # the worker filled the claims: failed, with the reason
    assert res["claims"] and all(c["verdict"] == "failed" for c in res["claims"])


@no_gpu_only
def test_report_completes_when_experiments_fail(tmp_path):
    page = runner.run_report(tmp_path, quick=True, only=["sync", "alloc-stall"], facts=None)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [r["experiment"] for r in doc["results"]] == ["sync", "alloc-stall"]
    assert all(r["verdict"] == "failed" and isinstance(r["wall_s"], float) for r in doc["results"])
    assert isinstance(doc["wall_s"], float) and doc["started"]
    html = page.read_text()
    table = html[html.index('id="claims-table"'):html.index("</table>", html.index('id="claims-table"'))]
    assert table.count("<tr") == len(CANONICAL) + 1
    assert "not run" in table and "failed" in table


def test_a_worker_started_ahead_waits_for_go_and_a_cancelled_one_runs_nothing(tmp_path):
    """The report starts the next experiment's process while the current one runs: it
    imports, says READY and touches nothing until told to go; cancelled, it exits."""
    ahead = runner._Worker("sync", tmp_path, True, 0, wait=True)
    assert ahead.lines.get(timeout=60) == "READY\n"
    time.sleep(0.5)
    assert ahead.proc.poll() is None and not (tmp_path / "sync.json").exists()
    ahead.cancel()
    assert ahead.proc.returncode == 0 and not (tmp_path / "sync.json").exists()


@no_gpu_only
def test_a_worker_started_ahead_runs_when_told_to_go(tmp_path):
    ahead = runner._Worker("copy-engines", tmp_path, True, 0, wait=True)
    res = runner.run_one("copy-engines", tmp_path, True, lambda f, m: None, worker=ahead)
    assert res["verdict"] == "failed" and res["notes"][0].strip()  # no GPU here: failed, with the reason
    assert "READY" not in (tmp_path / "logs" / "copy-engines.log").read_text()


def test_precompile_builds_every_kernel_into_the_cache(tmp_path, monkeypatch):
    from fullpipe.cuda import compiler

    monkeypatch.setenv("FULLPIPE_CACHE_DIR", str(tmp_path / "cache"))
    small = [p for p in compiler.package_sources() if p.name in ("probes.cu", "stamps.cu", "workload.cu")]
    monkeypatch.setattr(compiler, "package_sources", lambda: small)  # the spawned workers compile what they are given
    done = []
    res = runner.precompile("sm_90a", lambda f, m: done.append(f), workers=2)
    assert res["errors"] == []
    assert res["compiled"] == len(small) == len(done) >= 3
    assert len(list((tmp_path / "cache").glob("*.cubin"))) >= res["compiled"]


def test_arch_of_matches_the_compiler():
    assert runner.arch_of({"compute_capability": [9, 0]}) == "sm_90a"
    assert runner.arch_of({"compute_capability": [8, 9]}) == "sm_89"
    assert runner.arch_of(None) is None


def test_software_versions_name_everything_the_page_lists():
    v = runner.software_versions()
    for k in ("python", "fullpipe", "cuda-core", "numpy", "torch", "cupy", "cupti-python", "NVRTC wheel"):
        assert k in v


def test_a_worker_started_ahead_imports_on_one_cpu_and_runs_on_all(tmp_path, monkeypatch):
    """The imports of a worker started ahead run beside the current experiment: on one CPU.
    The experiment itself gets every CPU the process had."""
    import io
    import os
    import types

    from fullpipe.report import worker
    from fullpipe.experiments.result import Result

    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs CPU affinity and two CPUs")
    cpus = os.sched_getaffinity(0)
    seen = {}

    def run(ctx):
        seen["run"] = os.sched_getaffinity(0)
        return Result("fake", "", "supported", {}, {}, {})

    real_import = worker.importlib.import_module

    def fake_import(name, *args):  # the preloaded library: records where it was imported
        if name != "somelib":
            return real_import(name, *args)
        seen["import"] = os.sched_getaffinity(0)
        return types.SimpleNamespace()

    monkeypatch.setattr("fullpipe.cuda.device.Device", lambda index: None)
    monkeypatch.setattr(worker, "load", lambda name: types.SimpleNamespace(PRELOAD=("somelib",), run=run))
    monkeypatch.setattr(worker.importlib, "import_module", fake_import)
    monkeypatch.setattr(sys, "stdin", io.StringIO("go\n"))
    assert worker.main(["fake", "--out", str(tmp_path), "--wait"]) == 0
    assert seen["import"] == {max(cpus)} and seen["run"] == cpus
