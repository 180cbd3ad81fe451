"""Fixtures shared by the GPU pipeline tests (test_pipeline.py, test_pipeline_graphs.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def mix(device):
    """The pipeline's test compute: a few rounds of integer mixing per element."""
    from fullpipe.pipeline.workload import MixKernel

    return MixKernel(device, rounds=3)


@pytest.fixture
def own_pool(device):
    """A stream-ordered pool of the test's own, closed afterwards."""
    from fullpipe.cuda.pool import DevicePool

    p = DevicePool(device, release_threshold="max")
    yield p
    p.close()
