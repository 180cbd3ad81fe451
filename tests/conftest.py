"""Shared fixtures. GPU tests are marked `gpu` and skip cleanly without a GPU."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

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
    When the run holds the kernel compile tests, a child process (tests/_precompile.py)
    fills it ahead of them."""
    path = tmp_path_factory.mktemp("cubin-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FULLPIPE_CACHE_DIR", str(path))
        worker = None
        if any(item.path.name in _COMPILE_TEST_FILES for item in request.session.items):
            # A process, not a thread: two NVRTC compiles at once in one process gave a
            # wrong ptxas result once (gemm_double_buffer_s2 with 128 registers and a spill,
            # 123 and none alone), and a thread left inside NVRTC at exit crashed the run.
            root = Path(__file__).resolve().parents[1]
            worker = subprocess.Popen([sys.executable, "-m", "tests._precompile"], cwd=root,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield path
        finally:
            if worker is not None:
                worker.terminate()  # cache writes are atomic: a half-done compile leaves nothing
                try:
                    worker.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()


# The test files that compile the kernel builds tests/_precompile.py lists.
_COMPILE_TEST_FILES = {"test_cli.py", "test_compiler.py", "test_flash_attention.py", "test_flash_attention_hopper.py",
                       "test_hopper_gemm.py",
                       "test_kernels_api.py", "test_kernels_level2_extra.py", "test_kernels_sass.py"}


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


@pytest.fixture
def ring_staging(monkeypatch):
    """Small pageable batches through the staging ring, not in bulk (pipeline/bulk.py):
    for the tests of the ring itself, whose batches are small to keep them fast."""
    from fullpipe.pipeline import bulk

    monkeypatch.setattr(bulk, "BULK_MAX_BYTES", 0)
