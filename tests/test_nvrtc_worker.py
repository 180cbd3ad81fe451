"""NVRTC in worker processes (fullpipe.cuda.nvrtc_worker): real NVRTC compiles in real child
processes; a worker that segfaults is replaced and the program compiled again; a program on
which every worker dies is a CompileError (not a dead caller); compiles on several threads run
side by side; a worker that ended while idle is not counted as a crash; a forked child uses
workers of its own; and where no worker can serve (it cannot start, loaded another NVRTC, or
garbles its replies) the caller compiles itself, with a warning. FULLPIPE_NVRTC_IN_PROCESS=1
compiles in the caller."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading

import pytest

from fullpipe.cuda import compiler, nvrtc_worker
from fullpipe.cuda.resources import parse_ptxas_log, resource_usage
from fullpipe.errors import CompileError

OPTIONS = ["-arch=sm_90a", "-Xptxas=-v"]


def _kernel(name: str) -> str:
    return f'extern "C" __global__ void {name}(float* p) {{ p[threadIdx.x] = threadIdx.x * 2.0f; }}\n'


def _boot_with(compile_in_process: str) -> str:
    """A worker's boot whose compile_in_process is replaced by the expression given (``real``:
    the module's own; ``replies``: the reply pipe; ``ctypes``, ``os``, ``sys`` imported)."""
    return nvrtc_worker.BOOT.replace("mod.serve(", (
        "import ctypes\n"
        "real = mod.compile_in_process\n"
        f"mod.compile_in_process = {compile_in_process}\n"
        "mod.serve("))


# A real SIGSEGV (reading address 0) on the first program a pool's workers get, counted by a
# marker file: the first worker dies compiling, the next one compiles.
CRASH_FIRST = _boot_with("lambda *a: ctypes.string_at(0) if not os.path.exists(os.environ['FP_TEST_MARKER']) "
                         "and not open(os.environ['FP_TEST_MARKER'], 'w').close() else real(*a)")
CRASH_ALWAYS = _boot_with("lambda *a: ctypes.string_at(0)")


@pytest.fixture
def own_pool(monkeypatch):
    """compile_isolated's pool and fallback state, the test's own."""
    monkeypatch.setattr(nvrtc_worker, "_unavailable", None)

    def use(pool):
        monkeypatch.setattr(nvrtc_worker, "_pool", pool)
        return pool

    yield use
    if nvrtc_worker._pool is not None:
        nvrtc_worker._pool.close()


def test_a_worker_compiles_what_this_process_compiles():
    pool = nvrtc_worker.WorkerPool(version=nvrtc_worker.nvrtc_version())
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
    monkeypatch.setenv("FP_TEST_MARKER", str(tmp_path / "crashed"))
    pool = nvrtc_worker.WorkerPool(boot=CRASH_FIRST)
    try:
        cubin, _, error = pool.compile(_kernel("k_again"), "k_again.cu", OPTIONS)
        assert error is None and b"k_again" in cubin
        assert pool.started == 2 and pool.died == 1
    finally:
        pool.close()


def test_a_program_every_worker_dies_on_is_a_compile_error_not_a_dead_caller(own_pool, monkeypatch, fresh_cubin_cache):
    pool = own_pool(nvrtc_worker.WorkerPool(boot=CRASH_ALWAYS, attempts=2))
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


def test_a_worker_that_ended_while_idle_is_not_counted_as_a_crash():
    """A Ctrl-C to the caller's process group, or the OOM killer, may end idle workers: the
    next compile starts a new one instead of spending its attempts on the dead."""
    pool = nvrtc_worker.WorkerPool()
    try:
        pool.compile(_kernel("k_idle1"), "k_idle1.cu", OPTIONS)
        (idle,) = pool._idle
        assert os.getpgid(idle.proc.pid) != os.getpgid(0)  # (its own session: the terminal's Ctrl-C misses it)
        idle.proc.send_signal(signal.SIGKILL)
        idle.proc.wait()
        cubin, _, error = pool.compile(_kernel("k_idle2"), "k_idle2.cu", OPTIONS)
        assert error is None and b"k_idle2" in cubin and pool.died == 0 and pool.started == 2
    finally:
        pool.close()


FORK_SCRIPT = """
import os, sys
from fullpipe.cuda import nvrtc_worker as w
k = lambda name: 'extern "C" __global__ void %s(float* p) { p[0] = 1.0f; }' % name
opts = ["-arch=sm_90a"]
w.compile_isolated(k("k_before_fork"), "k_before_fork.cu", opts)
parent_pool = w._pool
assert parent_pool._idle
pid = os.fork()
if pid == 0:  # (the child: reports through its exit status only)
    try:
        cubin, _, error = w.compile_isolated(k("k_child"), "k_child.cu", opts)
        ok = error is None and b"k_child" in cubin and w._pool is not parent_pool
    except BaseException:
        ok = False
    os._exit(0 if ok else 1)
cubin, _, error = w.compile_isolated(k("k_parent"), "k_parent.cu", opts)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the child compiled with the parent's workers"
assert error is None and b"k_parent" in cubin and w._pool is parent_pool
print("ok")
"""


def test_a_forked_child_compiles_in_workers_of_its_own():
    """After fork the parent's idle workers' pipes are in both processes: the child must not
    read the parent's replies (the cubin cache would keep a kernel under another's key). In a
    process of its own: forking this (multi-threaded) test process could deadlock the child."""
    done = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_path_entry_that_is_not_a_string_is_left_out(monkeypatch):
    monkeypatch.setattr(sys, "path", [*sys.path, pathlib.Path("/nonexistent")])
    pool = nvrtc_worker.WorkerPool()
    try:
        cubin, _, error = pool.compile(_kernel("k_path"), "k_path.cu", OPTIONS)
        assert error is None and b"k_path" in cubin
    finally:
        pool.close()


@pytest.mark.parametrize("pool_args, why", [
    ({"boot": "import sys\nsys.exit(3)\n"}, "did not start (status 3)"),                      # cannot import, say
    ({"version": (0, 1)}, "loaded NVRTC"),                                                     # another NVRTC
    ({"boot": _boot_with("lambda *a: (replies.write(b'not a reply' * 10), replies.flush())")}, "garbled"),
], ids=["exits-before-hello", "another-nvrtc", "garbled-reply"])
def test_where_no_worker_can_serve_the_caller_compiles_itself_and_says_so(own_pool, pool_args, why):
    pool = own_pool(nvrtc_worker.WorkerPool(**pool_args))
    with pytest.warns(RuntimeWarning, match="compiles kernels in this process"):
        cubin, _, error = nvrtc_worker.compile_isolated(_kernel("k_here"), "k_here.cu", OPTIONS)
    assert error is None and b"k_here" in cubin
    assert why in nvrtc_worker._unavailable and pool.started == 1
    nvrtc_worker.compile_isolated(_kernel("k_here2"), "k_here2.cu", OPTIONS)
    assert pool.started == 1  # (no second try)


def test_what_a_library_prints_in_the_worker_does_not_garble_its_replies():
    chatty = _boot_with("lambda *a: (print('chatter from a library' * 100), sys.stdout.flush(), real(*a))[2]")
    pool = nvrtc_worker.WorkerPool(boot=chatty)
    try:
        for name in ("k_chat1", "k_chat2"):
            cubin, _, error = pool.compile(_kernel(name), f"{name}.cu", OPTIONS)
            assert error is None and name.encode() in cubin
        assert pool.started == 1 and pool.died == 0
    finally:
        pool.close()
