"""CPU tests of ensure_current (cuda/device.py): which context a thread gets, and that
the driver is asked once per thread and device, never per operation. The driver and
cuda.core's Device are replaced by a fake that keeps a current context per thread,
as the real driver does."""

from __future__ import annotations

import threading
import types

import pytest

import cuda.core
import fullpipe.cuda.device as fdevice
import fullpipe.cuda.driver as fdriver
from fullpipe.cuda.device import device_index, ensure_current, ensure_current_for_stream, forget_current


class FakeContexts:
    """Primary contexts 1000+i for device i; the current one per thread; a call log."""

    def __init__(self):
        self.tls = threading.local()
        self.calls: list[tuple[str, int]] = []  # (call, thread ident)
        self.streams = {0x5000: 1000, 0x5001: 1001}  # stream handle -> its context

    def _log(self, name):
        self.calls.append((name, threading.get_ident()))

    def current(self) -> int:
        return getattr(self.tls, "ctx", 0)

    # what cuda.bindings' driver module offers, in its (err, value...) shape
    def cuInit(self, flags):
        self._log("cuInit")
        return (0,)

    def cuCtxGetCurrent(self):
        self._log("cuCtxGetCurrent")
        return 0, self.current()

    def cuCtxGetDevice(self):
        self._log("cuCtxGetDevice")
        return (0, self.current() - 1000) if self.current() else (201,)  # CUDA_ERROR_INVALID_CONTEXT

    def cuStreamGetCtx(self, stream):
        self._log("cuStreamGetCtx")
        return 0, self.streams[int(stream)]

    def cuCtxPushCurrent(self, ctx):
        self.tls.saved = getattr(self.tls, "saved", []) + [self.current()]
        self.tls.ctx = int(ctx)
        return (0,)

    def cuCtxPopCurrent(self):
        popped = self.current()
        self.tls.ctx = self.tls.saved.pop()
        return 0, popped

    def cuGetErrorName(self, err):
        return 0, b"CUDA_ERROR_INVALID_CONTEXT"

    def cuGetErrorString(self, err):
        return 0, b"invalid device context"

    def set_current_primary(self, index: int):
        self._log(f"set_current({index})")
        self.tls.ctx = 1000 + index

    def count(self, name, thread=None):
        return sum(1 for c, t in self.calls if c == name and (thread is None or t == thread))


@pytest.fixture
def ctxs(monkeypatch):
    fake = FakeContexts()
    monkeypatch.setattr(fdriver, "driver", lambda: fake)
    monkeypatch.setattr(fdriver, "uses_real_driver", lambda: True)

    class FakeCoreDevice:
        def __init__(self, index=0):
            self.device_id = index

        def set_current(self):
            fake.set_current_primary(self.device_id)

    monkeypatch.setattr(cuda.core, "Device", FakeCoreDevice)
    forget_current()
    yield fake
    forget_current()


def in_thread(fn):
    """Run fn in a new thread (a thread with no context); return its result or raise."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_a_new_thread_gets_the_device_once_then_never_asks_again(ctxs):
    def work():
        for _ in range(1000):
            ensure_current(1)
        return ctxs.current(), threading.get_ident()

    ctx, tid = in_thread(work)
    assert ctx == 1001
    assert ctxs.count("set_current(1)", tid) == 1
    assert len([c for c in ctxs.calls if c[1] == tid]) == 1  # no other driver call at all


def test_every_thread_makes_its_own_context_current(ctxs):
    seen = []
    lock = threading.Lock()

    def work():
        ensure_current(0)
        ensure_current(0)
        with lock:
            seen.append(ctxs.current())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1000] * 8
    assert ctxs.count("set_current(0)") == 8


def test_switching_devices_asks_again_and_force_rechecks(ctxs):
    def work():
        for d in (0, 1, 1, 0, 0):
            ensure_current(d)
        ensure_current(0, force=True)
        return ctxs.current()

    assert in_thread(work) == 1000
    assert ctxs.count("set_current(0)") == 3 and ctxs.count("set_current(1)") == 1


def test_none_keeps_a_context_someone_else_made_current(ctxs):
    def work():
        ctxs.tls.ctx = 1001  # e.g. PyTorch made device 1 current in this thread
        ensure_current()
        ensure_current()
        return ctxs.current()

    assert in_thread(work) == 1001
    assert not any(c.startswith("set_current") for c, _ in ctxs.calls)
    assert ctxs.count("cuCtxGetCurrent") == 1


def test_none_without_any_context_means_device_0(ctxs):
    assert in_thread(lambda: (ensure_current(), ctxs.current())[1]) == 1000


def test_a_stream_brings_its_own_device(ctxs):
    def work():
        ensure_current_for_stream(types.SimpleNamespace(handle=0x5001))
        ensure_current_for_stream(0x5001)  # recorded: no more driver calls
        return ctxs.current()

    assert in_thread(work) == 1001
    assert ctxs.count("cuStreamGetCtx") == 1 and ctxs.count("set_current(1)") == 1


def test_default_stream_handles_fall_back_to_device_0(ctxs):
    assert in_thread(lambda: (ensure_current_for_stream(2), ctxs.current())[1]) == 1000
    assert ctxs.count("cuStreamGetCtx") == 0


def test_inside_a_host_function_the_slow_path_refuses(ctxs):
    def work():
        with fdriver.host_function_scope():
            ensure_current(0)

    with pytest.raises(RuntimeError, match="host function"):
        in_thread(work)


def test_device_index_accepts_the_device_kinds_and_rejects_others():
    assert device_index(3) == 3
    assert device_index(types.SimpleNamespace(index=2)) == 2  # fullpipe.Device
    assert device_index(types.SimpleNamespace(device_id=1)) == 1  # cuda.core.Device
    assert device_index(types.SimpleNamespace(core=types.SimpleNamespace(device_id=4))) == 4
    for bad in (None, "0", True, object(), types.SimpleNamespace(index="0")):
        with pytest.raises(TypeError, match="expected a device"):
            device_index(bad)


def test_a_stand_in_driver_records_nothing(monkeypatch):
    monkeypatch.setattr(fdriver, "driver", lambda: types.SimpleNamespace())  # the executor's CPU tests
    forget_current()
    ensure_current(0)
    ensure_current()
    assert fdevice.thread_context.device is None
