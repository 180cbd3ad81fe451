"""The compute threads' hand-off (pipeline/compute_threads.py), on the CPU: results come
back in the order the calls were sent whatever order they finish in, an exception comes
back at its own call, and runs in different threads share the workers without mixing
their results. (The executor's use of them: tests/test_pipeline_fakecuda.py; PyTorch's
modes carried over: tests/gpu/test_pipeline_torch.py.)"""

from __future__ import annotations

import random
import threading
import time

import pytest

from fullpipe.pipeline import compute_threads as ct


def _slow_square(k: int) -> int:
    time.sleep(random.random() * 2e-3)  # later calls often finish first
    return k * k


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_results_come_back_in_sending_order(threads):
    calls = ct.ComputeCalls(threads, ct.InContext(lambda: None))
    got = []
    for k in range(40):
        calls.send(_slow_square, k)
        if calls.outstanding > threads - 1:
            got.append(calls.take())
    while calls.outstanding:
        got.append(calls.take())
    assert got == [k * k for k in range(40)]


def test_an_exception_comes_back_at_its_call_and_drain_waits_for_the_rest():
    def f(k):
        time.sleep(1e-3 if k == 3 else 0)
        if k in (3, 5):
            raise ValueError(f"call {k}")
        return k

    calls = ct.ComputeCalls(2, ct.InContext(lambda: None))
    for k in range(8):
        calls.send(f, k)
    assert [calls.take() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="call 3") as info:
        calls.take()
    calls.drain()  # 4..7, the error of 5 dropped
    assert calls.outstanding == 0
    # marked as a call's (a long list whose threads' run failed so runs again on one thread)
    assert ct.raised_by_a_call(info.value) and not ct.raised_by_a_call(ValueError("fullpipe's own"))


def test_runs_in_two_threads_share_the_workers_without_mixing_results():
    workers = ct.ComputeWorkers()
    out: dict[int, list] = {}

    def run(tag: int) -> None:
        calls = ct.ComputeCalls(2, ct.InContext(lambda: None), workers)
        got = []
        for k in range(100):
            calls.send(lambda v: (tag, v), k)
            if calls.outstanding > 1:
                got.append(calls.take())
        while calls.outstanding:
            got.append(calls.take())
        out[tag] = got

    ts = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert workers.threads == 2  # made once, shared
    for tag in range(4):
        assert out[tag] == [(tag, k) for k in range(100)]


def test_each_call_runs_after_make_current_on_its_worker():
    seen = []

    def make_current():
        seen.append(threading.current_thread().name)

    calls = ct.ComputeCalls(2, ct.InContext(make_current))
    for k in range(4):
        calls.send(lambda v: threading.current_thread().name, k)
    names = [calls.take() for _ in range(4)]
    assert sorted(seen) == sorted(names) and names[0] != names[1] and names[0] == names[2]
