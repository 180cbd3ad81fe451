"""NVRTC in worker processes (fullpipe.cuda.nvrtc_worker): real NVRTC compiles in real child
processes, a worker that segfaults is replaced and the program compiled again, a program on
which every worker dies is a CompileError (not a dead caller), compiles on several threads
run side by side, and FULLPIPE_NVRTC_IN_PROCESS=1 compiles in the caller."""

from __future__ import annotations

import threading

import pytest

from fullpipe.cuda import compiler, nvrtc_worker
from fullpipe.cuda.resources import parse_ptxas_log, resource_usage
from fullpipe.errors import CompileError

OPTIONS = ["-arch=sm_90a", "-Xptxas=-v"]


def _kernel(name: str) -> str:
    return f'extern "C" __global__ void {name}(float* p) {{ p[threadIdx.x] = threadIdx.x * 2.0f; }}\n'


# A worker that segfaults (a real SIGSEGV: reading address 0) the first time a pool starts one,
# then works: the marker file counts the starts.
CRASH_FIRST = ("import ctypes, os, sys\n"
               "marker = os.environ['FP_TEST_MARKER']\n"
               "if not os.path.exists(marker):\n"
               "    open(marker, 'w').close()\n"
               "    sys.stdin.buffer.read(8)\n"
               "    ctypes.string_at(0)\n"
               + nvrtc_worker.BOOT)
CRASH_ALWAYS = "import ctypes, sys\nsys.stdin.buffer.read(8)\nctypes.string_at(0)\n"


def test_a_worker_compiles_what_this_process_compiles():
    pool = nvrtc_worker.WorkerPool()
    try:
        cubin, log, error = pool.compile(_kernel("k_worker"), "k_worker.cu", OPTIONS)
        here, here_log, _ = nvrtc_worker.compile_in_process(_kernel("k_worker"), "k_worker.cu", OPTIONS)
        assert error is None and cubin[:4] == b"\x7fELF" and b"k_worker" in cubin
        # (the same kernel and resources; NVRTC 13.0 leaves ptxas's report out of some logs, either way)
        assert resource_usage(cubin) == resource_usage(here) and set(resource_usage(cubin)) == {"k_worker"}
        assert set(parse_ptxas_log(log)) <= {"k_worker"} and set(parse_ptxas_log(here_log)) <= {"k_worker"}
        # the worker is kept and serves the next program; a broken one comes back as NVRTC's log
        _, bad_log, bad = pool.compile("__global__ void k( {", "bad.cu", OPTIONS)
        assert bad is not None and "bad.cu" in bad and bad == bad_log
        assert pool.started == 1 and pool.died == 0
    finally:
        pool.close()


def test_a_worker_that_segfaults_is_replaced_and_the_program_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("FP_TEST_MARKER", str(tmp_path / "started"))
    pool = nvrtc_worker.WorkerPool(boot=CRASH_FIRST)
    try:
        cubin, _, error = pool.compile(_kernel("k_again"), "k_again.cu", OPTIONS)
        assert error is None and b"k_again" in cubin
        assert pool.started == 2 and pool.died == 1
    finally:
        pool.close()


def test_a_program_every_worker_dies_on_is_a_compile_error_not_a_dead_caller(monkeypatch, fresh_cubin_cache):
    pool = nvrtc_worker.WorkerPool(boot=CRASH_ALWAYS, attempts=2)
    monkeypatch.setattr(nvrtc_worker, "_pool", pool)
    with pytest.raises(CompileError, match=r"died compiling k_dead\.cu, 2 times \(exit statuses \[-11, -11\]"):
        compiler.compile_source(_kernel("k_dead"), name="k_dead.cu", arch="sm_90a")
    assert pool.died == 2
    # ... and the caller may compile in-process instead, as the message says
    monkeypatch.setenv(nvrtc_worker.ENV_IN_PROCESS, "1")
    assert compiler.compile_source(_kernel("k_dead"), name="k_dead.cu", arch="sm_90a").cubin[:4] == b"\x7fELF"
    assert pool.died == 2


def test_compiles_on_several_threads_run_in_workers_of_their_own():
    pool = nvrtc_worker.WorkerPool(keep_idle=2)
    results: dict[str, bytes] = {}
    start = threading.Barrier(4)

    def one(name: str) -> None:
        start.wait()
        cubin, _, error = pool.compile(_kernel(name), f"{name}.cu", OPTIONS)
        assert error is None
        results[name] = cubin

    try:
        threads = [threading.Thread(target=one, args=(f"k_thread{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [f"k_thread{i}" for i in range(4)]
        assert all(name.encode() in cubin for name, cubin in results.items())
        assert 2 <= pool.started <= 4 and len(pool._idle) <= 2  # (the rest closed as they came back)
    finally:
        pool.close()


def test_where_no_worker_can_serve_the_caller_compiles_itself(monkeypatch):
    """A worker that exits before it answers (no cuda.bindings in its interpreter, say) is not
    NVRTC crashing: the process compiles in-process from then on."""
    pool = nvrtc_worker.WorkerPool(boot="import sys\nsys.exit(3)\n")
    monkeypatch.setattr(nvrtc_worker, "_pool", pool)
    monkeypatch.setattr(nvrtc_worker, "_unavailable", None)
    cubin, _, error = nvrtc_worker.compile_isolated(_kernel("k_here"), "k_here.cu", OPTIONS)
    assert error is None and b"k_here" in cubin
    assert "status 3" in nvrtc_worker._unavailable and pool.started == 1
    nvrtc_worker.compile_isolated(_kernel("k_here2"), "k_here2.cu", OPTIONS)
    assert pool.started == 1  # (no second try)


def test_what_a_library_prints_in_the_worker_does_not_garble_its_replies():
    chatty = nvrtc_worker.BOOT.replace("mod.serve(", (
        "real = mod.compile_in_process\n"
        "mod.compile_in_process = lambda *a: (print('chatter from a library' * 100), sys.stdout.flush(), real(*a))[2]\n"
        "mod.serve("))
    pool = nvrtc_worker.WorkerPool(boot=chatty)
    try:
        for name in ("k_chat1", "k_chat2"):
            cubin, _, error = pool.compile(_kernel(name), f"{name}.cu", OPTIONS)
            assert error is None and name.encode() in cubin
        assert pool.started == 1 and pool.died == 0
    finally:
        pool.close()


def test_a_worker_whose_replies_are_garbled_is_not_trusted(monkeypatch):
    garbling = nvrtc_worker.BOOT.replace("mod.serve(", "replies.write(b'not a reply' * 10)\nmod.serve(")
    pool = nvrtc_worker.WorkerPool(boot=garbling)
    monkeypatch.setattr(nvrtc_worker, "_pool", pool)
    monkeypatch.setattr(nvrtc_worker, "_unavailable", None)
    cubin, _, error = nvrtc_worker.compile_isolated(_kernel("k_garbled"), "k_garbled.cu", OPTIONS)
    assert error is None and b"k_garbled" in cubin  # (compiled in this process instead)
    assert "garbled" in nvrtc_worker._unavailable
