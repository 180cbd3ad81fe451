"""CPU tests of the allocator experiments: registry, kernels (compile + SASS), the
workloads and their planning, the fragmentation worker's protocol and verdicts."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fullpipe import experiments
from fullpipe.cuda import compiler, sass
from fullpipe.experiments import _alloc_common as common
from fullpipe.experiments import _alloc_worker as worker
from fullpipe.experiments import fragmentation, llm_scratch

NAMES = ["alloc-stall", "alloc-overhead", "release-threshold", "fragmentation", "llm-scratch"]


@pytest.mark.parametrize("name", NAMES)
def test_experiment_is_registered_with_name_claim_and_run(name):
    assert name in experiments.names()
    mod = experiments.load(name)
    assert mod.NAME == name and mod.TITLE and mod.CLAIM and callable(mod.run)


@pytest.fixture(scope="module")
def alloc_cubin():
    return compiler.compile_package_kernel("experiments/alloc_kernels.cu", arch="sm_90a")


def test_alloc_kernels_compile_without_spills(alloc_cubin):
    res = alloc_cubin.resources
    assert set(res) == {"fill_pattern", "check_pattern", "scale_bias", "touch"}
    assert not any(r.spills for r in res.values())


def test_alloc_kernels_sass_does_what_the_source_says(alloc_cubin):
    text = sass.disassemble(alloc_cubin.cubin)
    counts = sass.opcode_counts(text)
    assert any(op.startswith(("RED", "ATOM")) for op in counts), "check_pattern must count mismatches atomically"
    assert counts.get("FFMA", 0) > 0, "scale_bias is x * a + b"
    assert "STG.E.128" in text, "touch writes 16-byte vectors"


def test_scale_bias_reference_is_exact_with_or_without_fma():
    # The kernel may contract x * 0.5 + 1 into one FMA; the host does two roundings.
    # With a = 0.5 the product is exact, so both give the same float32: check it.
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    host = common.scale_bias_reference(x, 1)
    fused = (x.astype(np.float64) * 0.5 + 1.0).astype(np.float32)  # one rounding, like FMA
    np.testing.assert_array_equal(host, fused)


def test_log_uniform_sizes_are_aligned_and_in_range():
    sizes = common.log_uniform_sizes(np.random.default_rng(1), 500, 1 << 20, 16 << 20, align=64 * 1024)
    assert all(s % (64 * 1024) == 0 for s in sizes)
    assert min(sizes) >= (1 << 20) - 32 * 1024 and max(sizes) <= (16 << 20) + 32 * 1024
    assert len(set(sizes)) > 100  # variable, not a constant
    with pytest.raises(ValueError):
        common.log_uniform_sizes(np.random.default_rng(1), 3, 0, 10)


def test_sequence_lengths_spread_and_clip():
    ls = common.sequence_lengths(np.random.default_rng(5), 2000, 128, 8192)
    assert min(ls) == 128 and max(ls) == 8192  # both clips are reached with 2000 draws
    assert all(L % 16 == 0 for L in ls)
    assert 600 <= float(np.median(ls)) <= 1600


def test_llm_scratch_sizes_follow_the_sequence():
    s = llm_scratch.scratch_bytes(8192)
    assert s["scores"] == 8192 * 8192 * llm_scratch.HEADS * 2
    assert s["activations"] == 8192 * llm_scratch.HIDDEN * 2
    assert llm_scratch.scratch_bytes(100, 3)["kv"] == 103 * llm_scratch.KV_PER_TOKEN
    # every buffer is a whole number of 16-byte vectors (touch) and 4-byte words (patterns)
    for L in (128, 1024, 8192):
        for t in range(4):
            assert all(v % 16 == 0 for v in llm_scratch.scratch_bytes(L, t).values())
    # The largest scratch a stream ever holds stays modest on an 80 GB GPU.
    assert sum(llm_scratch.scratch_bytes(8192, 16).values()) < 1 << 30


def test_fragmentation_workload_is_deterministic_and_admits_below_the_cap():
    budget = 1 << 30
    ops = worker.workload(1, 300, budget)
    assert ops == worker.workload(1, 300, budget)
    assert ops != worker.workload(2, 300, budget)
    live, peak, seen = 0, 0, {}
    for op, rid, n in ops:
        if op == "alloc":
            assert rid not in seen
            seen[rid] = n
            live += n
        else:
            live -= seen.pop(rid)
        peak = max(peak, live)
    assert peak <= 0.55 * budget
    assert peak >= 0.3 * budget, "the workload should fill a good part of the budget"
    assert len({n for op, _, n in ops if op == "alloc"}) > 50  # variable sizes
    big = worker.big_request(budget, live)
    assert live + big <= budget and big >= 0.4 * budget


def test_worker_rejects_unknown_allocator():
    with pytest.raises(SystemExit):
        worker.main(["--allocator", "tcmalloc", "--budget", "100"])
    with pytest.raises(ValueError, match="unknown allocator"):
        worker.make_adapter("tcmalloc", 1)


def test_parse_worker_output_takes_the_last_json_line():
    out = "warning: something\n" + json.dumps({"allocator": "cupy", "big_ok": True}) + "\n"
    assert fragmentation.parse_worker_output("cupy", 0, out, "")["big_ok"] is True
    bad = fragmentation.parse_worker_output("cupy", 1, "", "Traceback\nRuntimeError: boom")
    assert "without JSON" in bad["error"] and "boom" in bad["error"]


def _r(ok: bool, failed=None):
    return {"big_ok": ok, "workload_failed": failed, "peak_live": 1, "peak_reserved": 1, "big_request": 1 << 30}


def _verdict(workers: dict) -> tuple[str, list[str]]:
    """What the end of fragmentation.run() does with the workers' results: its rules
    judge the two claims, and its verdict is theirs (VERDICT_FROM)."""
    from fullpipe.experiments.claims import with_claims
    from fullpipe.experiments.result import Result

    verdict, notes = fragmentation.worker_verdict(workers)
    res = Result(fragmentation.NAME, fragmentation.CLAIM, verdict, {}, {"budget": 2 << 30}, {"workers": workers},
                 notes=notes)
    return with_claims(res, fragmentation.VERDICT_FROM).verdict, res.notes


@pytest.mark.parametrize("native, pool, verdict", [
    (_r(False), _r(True), "supported"),
    (_r(True), _r(True), "partly supported"),  # the pool coped; the caching allocator did not fail here
    (_r(False), _r(False), "partly supported"),
    (_r(True), _r(False), "not supported"),
    (_r(False, failed={"index": 3, "bytes": 1}), _r(True), "supported"),  # an OOM in the workload counts too
])
def test_fragmentation_verdicts(native, pool, verdict):
    assert _verdict({"torch-native": native, "fullpipe": pool})[0] == verdict


def test_fragmentation_verdict_without_pytorch_uses_cupy_or_says_half_tested():
    assert _verdict({"torch-native": {"skipped": "x"}, "cupy": _r(False), "fullpipe": _r(True)})[0] == "supported"
    v, notes = _verdict({"torch-native": {"skipped": "x"}, "cupy": {"skipped": "y"}, "fullpipe": _r(True)})
    assert v == "partly supported" and "half" in notes[0]
    v, notes = _verdict({"fullpipe": {"error": "timed out"}})
    assert v == "failed" and "timed out" in notes[0]


def test_worker_module_runs_as_a_subprocess_and_reports_cleanly_without_a_gpu_framework():
    # On a machine without CuPy the worker must still print one JSON line (skipped).
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy installed here: the GPU run covers the worker")
    except ImportError:
        pass
    proc = subprocess.run([sys.executable, "-m", "fullpipe.experiments._alloc_worker", "--allocator", "cupy",
                           "--budget", str(1 << 30), "--steps", "5"], capture_output=True, text=True, timeout=120)
    out = fragmentation.parse_worker_output("cupy", proc.returncode, proc.stdout, proc.stderr)
    assert out.get("skipped"), out


def test_torch_confs_select_the_three_pytorch_allocators():
    assert worker.TORCH_CONF["torch-expandable"] == "expandable_segments:True"
    assert worker.TORCH_CONF["torch-async"] == "backend:cudaMallocAsync"
    assert set(worker.ALLOCATORS) == {"torch-native", "torch-expandable", "torch-async", "cupy", "fullpipe"}
