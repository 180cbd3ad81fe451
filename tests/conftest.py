"""Shared fixtures. GPU tests are marked `gpu` and skip cleanly without a GPU."""

from __future__ import annotations

import functools
import threading

import pytest


@functools.lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    try:
        from fullpipe.cuda.device import Device

        Device(0)
        return None
    except Exception as exc:  # no driver, no device, broken install
        return f"no usable GPU: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"


# Tests that compile every package source in a child process: run last, when the run's
# cache already holds those builds (the precompile thread and the other tests made them),
# so that CI's two cores do not compile them a second time on the critical path.
_RUN_LAST = ("test_compile_all_kernels_reports_resources_and_caches",)


def pytest_collection_modifyitems(config, items):
    last = [item for item in items if item.name in _RUN_LAST]
    if last:
        items[:] = [item for item in items if item.name not in _RUN_LAST] + last
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def cubin_cache(tmp_path_factory, request):
    """One cubin cache for the whole test run, empty at its start: every kernel compiles
    once per run (honest), and only once (fast). Child processes (the CLI tests) inherit it.
    When the run holds the kernel compile tests, a second thread fills it ahead of them."""
    path = tmp_path_factory.mktemp("cubin-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FULLPIPE_CACHE_DIR", str(path))
        stop = threading.Event()
        worker = threading.Thread(target=_precompile, args=(stop,), name="precompile")
        if any(item.path.name in _COMPILE_TEST_FILES for item in request.session.items):
            worker.start()
        try:
            yield path
        finally:
            # Never leave the thread inside NVRTC while the interpreter shuts down: that
            # crashed the process at exit (segfault, "realloc(): invalid old size") after
            # short runs had passed. It stops after the compile in progress.
            stop.set()
            if worker.is_alive():
                worker.join()


# The test files that compile the kernel builds _precompile_jobs() lists.
_COMPILE_TEST_FILES = {"test_cli.py", "test_compiler.py", "test_flash_attention.py", "test_flash_attention_hopper.py",
                       "test_hopper_gemm.py",
                       "test_kernels_api.py", "test_kernels_level2_extra.py", "test_kernels_sass.py"}


def _precompile_jobs() -> list:
    """Every kernel build the CPU tests compile for sm_90a, in the reverse of the order the
    test files reach them."""
    from fullpipe.cuda import compiler
    from fullpipe.kernels import builds
    from fullpipe.kernels import flash_attention as fa
    from fullpipe.kernels import flash_attention_hopper as fah
    from fullpipe.kernels import hopper_gemm as hg

    arch = "sm_90a"
    jobs = [lambda b=b: compiler.compile_package_kernel(b.source, arch=arch, defines=dict(b.defines))
            for b in builds.shipped_builds()]
    jobs += [lambda b=b: hg.module("persistent", arch, build=b) for b in hg.SWEEP_BUILDS]
    jobs += [lambda v=v: hg.module(v, arch) for v in hg.VARIANTS]
    jobs += [lambda t=t: compiler.compile_package_kernel(fa.SOURCE, arch=arch, defines=dict(fa.defines(t)))
             for t in fa.candidate_builds()]
    jobs += [lambda b=b: fah.module(arch, b) for b in fah.SWEEP_BUILDS]
    # `fullpipe compile`'s builds (each source, its own defaults): its test runs last
    jobs = [lambda p=p: compiler.compile_file(p, arch=arch) for p in compiler.package_sources()] + jobs
    return jobs[::-1]


def _precompile(stop: threading.Event) -> None:
    """Fill the run's cubin cache on a second thread while the tests run: NVRTC releases
    the GIL, so CI's two cores compile at once (the suite is dominated by kernel
    compiles). A test that needs a kernel first compiles it itself; the cache's writes
    are atomic, so the two never see half a cubin. Failures are left for the tests."""
    try:
        jobs = _precompile_jobs()
    except Exception:  # noqa: BLE001 - an import error shows up in the tests themselves
        return
    for job in jobs:
        if stop.is_set():
            return
        try:
            job()
        except Exception:  # noqa: BLE001
            pass


@pytest.fixture
def fresh_cubin_cache(tmp_path, monkeypatch):
    """An empty cache of the test's own, for tests of the cache itself."""
    path = tmp_path / "cubin-cache"
    monkeypatch.setenv("FULLPIPE_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def device():
    from fullpipe.cuda.device import Device

    return Device(0)


@pytest.fixture(scope="session")
def pool(device):
    """A device memory pool owned by the tests (never the device's default pool)."""
    from cuda.core import DeviceMemoryResource, DeviceMemoryResourceOptions

    return DeviceMemoryResource(device.core, DeviceMemoryResourceOptions())


@pytest.fixture
def stream(device):
    from fullpipe.cuda.streams import create_stream

    s = create_stream(device)
    yield s
    s.sync()
