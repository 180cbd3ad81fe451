"""NVRTC in a child process, so that a crash inside it is a retry, not the end of the caller's process.

NVRTC 13.0's ``nvrtcCompileProgram`` has segfaulted now and then on kernels that compiled in
every other run: in GPU test runs of sessions 51 and 52, and twice in session 60 on H200 hosts
(a pytest process compiling the 1 x 2 persistent GEMM build for ``w.T``, which had compiled in
an earlier process on another machine of the same kind; and a probe compiling 80 builds on 16
threads, all of which then compiled one process each). In-process, that kills the user's
program at its first call of a kernel. Here a worker process compiles: where it dies, a new one
compiles the same program again (up to ``ATTEMPTS`` times), and the caller gets a
:class:`~fullpipe.errors.CompileError` if every one died. Workers are started on demand (one per
compile running at once, so compiles on several threads still run side by side), kept for the
next compile, and end with the parent (their stdin closes). ``FULLPIPE_NVRTC_IN_PROCESS=1``
compiles in the calling process instead (as does any host where a worker cannot start).

This file imports nothing of fullpipe: a worker loads it by its path (:data:`BOOT`), paying
for ``cuda.bindings.nvrtc`` (~0.2 s) and not for the package. A worker runs the parent's
interpreter isolated (``-I``) with the parent's ``sys.path``, in a session of its own (a
terminal's Ctrl-C does not reach it), and first says which NVRTC it loaded: one that does not
say so in time, or loaded another NVRTC than this process (the cubin cache's key names this
process's), is not used, and this process compiles itself from then on (with a warning).
A forked child starts workers of its own.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import warnings
from typing import Any, BinaryIO

ENV_IN_PROCESS = "FULLPIPE_NVRTC_IN_PROCESS"
ATTEMPTS = 3          # workers that may die on one program before it is reported as failed
KEEP_IDLE = 4         # idle workers kept for later compiles; more are closed
MAX_MESSAGE = 1 << 30  # bytes: a source or a cubin is far smaller
HELLO_SECONDS = 60.0   # a worker that has not said which NVRTC it loaded by then is not used

# How a worker starts (``python -I -c BOOT <this file> <the parent's sys.path as JSON>``): the
# parent's module path, this file loaded by its path, requests on stdin and replies on what was
# stdout (fd 1 then points at stderr: a library's print cannot garble a reply).
BOOT = ("import importlib.util, json, os, sys\n"
        "replies = os.fdopen(os.dup(1), 'wb')\n"
        "os.dup2(2, 1)\n"
        "sys.path[:] = json.loads(sys.argv[2])\n"
        "spec = importlib.util.spec_from_file_location('fullpipe_nvrtc_worker', sys.argv[1])\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(mod)\n"
        "mod.serve(sys.stdin.buffer, replies)\n")


def compile_in_process(text: str, name: str, options: list[str]) -> tuple[bytes | None, str, str | None]:
    """Compile ``text`` with the NVRTC C API in this process: (cubin, log, None), or (None,
    log, what failed). The log comes on success too (ptxas's report, with ``-Xptxas=-v``)."""
    from cuda.bindings import nvrtc

    # The source and name are held until the program is destroyed: cudarc's binding of this
    # C API says the program may keep pointers to them (cuda-python's own use, temporary
    # header arrays, suggests NVRTC copies).
    src, prog_name = text.encode(), name.encode()
    err, prog = nvrtc.nvrtcCreateProgram(src, prog_name, 0, [], [])
    if int(err) != 0:
        return None, "", f"nvrtcCreateProgram: {err}"
    try:
        encoded = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        # NVRTC writes into the buffers given: mutable ones. (``b" " * n`` is the interned b" "
        # itself for n == 1, an empty log: NVRTC's NUL then made every b" " in the process
        # b"\x00", and PyTorch's import failed on a schema that had lost its spaces.)
        _, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        log_buf = bytearray(log_size)
        nvrtc.nvrtcGetProgramLog(prog, log_buf)
        log = log_buf.decode(errors="replace").rstrip("\x00 \n")
        if int(err) != 0:
            return None, log, log or str(err)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        if size == 0:
            arch = next((o for o in options if o.startswith("-arch=")), "the arch")
            return None, log, f"NVRTC produced no cubin for {arch[6:]} (is the arch real?)\n{log}"
        cubin = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        if int(err) != 0:
            return None, log, f"nvrtcGetCUBIN: {err}"
        return bytes(cubin), log, None
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
        del src, prog_name  # (only now)


# --------------------------------------------------------------------------- the worker's side
def _send(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: BinaryIO) -> Any:
    """The next message, or None where the other side has closed the pipe (or died)."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    if size > MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes: not one of ours")
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def nvrtc_version() -> tuple[int, int]:
    """The version of the NVRTC library this process loaded."""
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if int(err) != 0:
        raise RuntimeError(f"nvrtcVersion: {err}")
    return int(major), int(minor)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """A worker's loop: first the NVRTC version it loaded (an import that fails ends the worker
    before it says so: the parent then compiles itself), then (text, name, options) in,
    :func:`compile_in_process`'s answer out, until the parent closes the pipe."""
    _send(replies, ("hello", nvrtc_version()))
    while True:
        request = _receive(requests)
        if request is None:
            return
        try:
            answer = compile_in_process(*request)
        except Exception as exc:  # (a broken binding or library: said to the parent, not a dead worker)
            answer = (None, "", f"{type(exc).__name__}: {exc}")
        _send(replies, answer)


# --------------------------------------------------------------------------- the parent's side
class WorkerDied(Exception):
    """The worker ended before it answered (``returncode``: its exit status, -N for signal N)."""

    def __init__(self, returncode: int | None):
        super().__init__(f"the NVRTC worker ended (status {returncode})")
        self.returncode = returncode


class _Worker:
    """One worker process, started and heard from (or OSError: it cannot serve here)."""

    def __init__(self, boot: str, version: tuple[int, int] | None):
        if getattr(sys, "frozen", False) or not sys.executable:
            raise OSError("no Python interpreter to start an NVRTC worker with (a frozen or embedded one)")
        path = [p for p in sys.path if isinstance(p, str)]
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", boot, os.path.abspath(__file__), json.dumps(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], HELLO_SECONDS)
        hello = None
        if ready:
            try:
                hello = _receive(self.proc.stdout)
            except Exception:  # (not a message of ours)
                hello = None
        if not (isinstance(hello, tuple) and len(hello) == 2 and hello[0] == "hello"):
            self.proc.kill()
            self.close()
            raise OSError(f"the NVRTC worker did not start (status {self.proc.returncode})" if ready else
                          f"the NVRTC worker said nothing in {HELLO_SECONDS:.0f} s")
        if version is not None and tuple(hello[1]) != tuple(version):
            self.close()
            raise OSError(f"the NVRTC worker loaded NVRTC {hello[1]}, this process {version}")

    def compile(self, text: str, name: str, options: list[str]) -> tuple[bytes | None, str, str | None]:
        try:
            _send(self.proc.stdin, (text, name, options))
            answer = _receive(self.proc.stdout)
        except OSError:  # (a broken pipe among them: the worker is gone)
            answer = None
        except Exception as exc:  # (a reply that is not one: this worker cannot serve)
            self.proc.kill()
            self.close()
            raise OSError(f"the NVRTC worker's reply was garbled ({type(exc).__name__})") from exc
        if answer is None:
            self.close()
            raise WorkerDied(self.proc.returncode)
        return answer

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Close its pipes (a live worker's loop then ends) and reap it."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class WorkerPool:
    """Worker processes for :func:`compile_isolated`: one taken for each compile, a new one
    where none is idle, given back after (at most ``keep_idle`` kept), replaced where it died.
    ``boot``: the Python code a worker runs (given this file's path as ``sys.argv[1]``)."""

    def __init__(self, boot: str = BOOT, keep_idle: int = KEEP_IDLE, attempts: int = ATTEMPTS,
                 version: tuple[int, int] | None = None):
        self.boot, self.keep_idle, self.attempts = boot, keep_idle, attempts
        self.version = version  # (the NVRTC a worker must have loaded; None: any)
        self.pid = os.getpid()
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.started = 0   # workers started
        self.died = 0      # workers that ended before answering

    def compile(self, text: str, name: str, options: list[str]) -> tuple[bytes | None, str, str | None]:
        """:func:`compile_in_process`'s answer, from a worker; where ``attempts`` workers in a
        row died on this program: (None, "", what happened). OSError where a worker cannot start
        here, or garbles its reply."""
        statuses = []
        for _ in range(self.attempts):
            worker = self._take()
            try:
                answer = worker.compile(text, name, options)
            except WorkerDied as died:  # (NVRTC crashed on this program, most likely: again, in a new worker)
                with self._lock:
                    self.died += 1
                statuses.append(died.returncode)
                continue
            self._give_back(worker)
            return answer
        return None, "", (f"NVRTC's worker process died compiling {name}, {self.attempts} times "
                          f"(exit statuses {statuses}; -11 is a segmentation fault); "
                          f"{ENV_IN_PROCESS}=1 compiles in this process instead")

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.close()  # (ended while idle: a signal to its session, the OOM killer)
            self.started += 1
        return _Worker(self.boot, self.version)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < self.keep_idle:
                self._idle.append(worker)
                return
        worker.close()

    def close(self) -> None:
        """End the idle workers (a compile running now keeps its own)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()

    def forget_after_fork(self) -> None:
        """In a forked child: let go of the parent's workers (their pipes are the parent's; a
        reply read here would be the parent's), without waiting for them."""
        for worker in self._idle:
            for pipe in (worker.proc.stdin, worker.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        self._idle = []


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()
_unavailable: str | None = None  # why a worker cannot serve here (then compiles run in-process)


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    if _pool is not None:
        _pool.forget_after_fork()
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def compile_isolated(text: str, name: str, options: list[str]) -> tuple[bytes | None, str, str | None]:
    """:func:`compile_in_process`'s answer, computed in a worker process (in this process
    under ``FULLPIPE_NVRTC_IN_PROCESS=1``, or where no worker can serve: said once, as a
    warning)."""
    global _pool, _unavailable
    if os.environ.get(ENV_IN_PROCESS, "").strip().lower() not in ("", "0", "false", "no", "off") or _unavailable:
        return compile_in_process(text, name, options)
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():  # (a child forked outside os.fork: its own workers)
            _pool = WorkerPool(version=nvrtc_version())
            atexit.register(_pool.close)
        pool = _pool
    try:
        return pool.compile(text, name, options)
    except OSError as exc:  # (no interpreter to start, none allowed, another NVRTC, a garbled reply)
        _unavailable = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"fullpipe compiles kernels in this process from now on ({_unavailable}): a crash inside "
                      "NVRTC would end it", RuntimeWarning, stacklevel=3)
        return compile_in_process(text, name, options)
