"""GPU test of the two-level experiment's measurement (fullpipe.experiments.two_level) on a
small stack: every form (eager, eager under cudaMallocAsync in a child process, level 1
only, level 2 only, both) gives the eager logits within the experiment's bound; the
both-levels pool takes nothing more from the driver after the first prefill; the CUPTI
trace has the prefill's kernels; the memory held covers at least the largest micro-batch."""

from __future__ import annotations

import numpy as np
import pytest

from ._torch import needs_torch, torch  # noqa: F401

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)


def test_every_form_matches_eager_and_the_pool_is_steady(device):
    from fullpipe.experiments import two_level as T
    from fullpipe.models import StackConfig

    config = StackConfig(layers=2, width=512, heads=4, kv_heads=2, head_dim=128, ffn_width=1536, vocab=4096,
                         max_context=512)
    rng = np.random.default_rng(5)
    requests = [rng.integers(0, config.vocab, int(n)).astype(np.int32) for n in rng.integers(1, 301, 12)]
    m, notes = T.measure_prefill(config, requests, device_index=device.index, microbatch_tokens=512, repeat=1)
    assert "wrong" not in m, m.get("wrong")
    assert "async_skipped" not in m, m.get("async_skipped")
    assert set(m["tokens_per_s"]) == set(T.FORMS)
    assert all(e <= T.MAX_REL_ERR for e in m["max_rel_err_vs_eager"].values()), m["max_rel_err_vs_eager"]
    assert m["pool_reserved_growth_bytes"] == 0 and m["pool_reserved_high_growth_bytes"] == 0
    assert m["pool_allocations_per_prefill"] == m["memory_bounds"]["microbatches"]
    assert m["held_bytes"] >= m["memory_bounds"]["largest_microbatch"]
    assert "trace_error" not in m, m.get("trace_error")
    assert m["trace_kernels"] > 0 and 0 < m["sm_busy_fraction"] <= 1
    assert all(m["matmul_choices"][k] == "hopper" for k in ("wqkv", "wo", "w_gate_up", "w_down"))
