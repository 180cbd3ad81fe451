"""The decoder stack split over two GPUs (StagedStack): same logits as one GPU, every
scratch byte back in its pool, failures clean. Needs 2 GPUs with peer access."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SMALL = dict(layers=4, width=512, heads=4, kv_heads=2, head_dim=128, ffn_width=1536, vocab=4096, max_context=512)


@pytest.fixture(scope="module")
def two_gpus():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    if not torch.cuda.can_device_access_peer(0, 1):
        pytest.skip("GPUs 0 and 1 have no peer path")


def _requests(config, n, seed=0, longest=300):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, config.vocab, int(k)) for k in rng.integers(1, longest, n)]


def _rel(a, b):
    a, b = a.float().cpu(), b.float().cpu()
    return float(((a - b).norm(dim=1) / b.norm(dim=1)).max())


@pytest.mark.parametrize("mode, threads", [("copy", False), ("copy", True), ("pull", False)])
def test_two_stages_give_the_logits_of_one_gpu_and_return_every_byte(two_gpus, mode, threads):
    import torch

    from fullpipe.models import StackConfig, StagedStack, init_weights

    c = StackConfig(**SMALL)
    w = init_weights(c, seed=5, device="cuda:0")
    reqs = _requests(c, 14)
    reqs.insert(3, np.array([c.vocab + 5]))  # refused, the others go on
    one = StagedStack(c, w, devices=[0])
    two = StagedStack(c, w, devices=[0, 1], mode=mode, threads=threads, split=[range(0, 1), range(1, 4)])  # uneven
    r1 = one.prefill(reqs, microbatch_tokens=600)
    r2 = two.prefill(reqs, microbatch_tokens=600)
    one.synchronize()
    two.synchronize()
    assert r2.microbatches == r1.microbatches >= 4
    assert r2.indices == r1.indices and [e.index for e in r2.errors] == [3]
    assert r2.logits.device == torch.device("cuda", 1)
    assert torch.isfinite(r2.logits.float()).all()
    err = _rel(r2.logits, r1.logits)
    assert err < 1e-3, f"two GPUs differ from one: max rel err {err:.2e}"
    assert two.boundaries[0].copies == r2.microbatches
    for st in one.stages + two.stages:
        assert st.pool.stats().used_bytes == 0


@pytest.mark.parametrize("threads", [False, True])
def test_a_failure_in_the_second_stage_returns_all_scratch(two_gpus, threads):
    from fullpipe.models import StackConfig, StagedStack, init_weights

    c = StackConfig(**SMALL)
    w = init_weights(c, seed=5, device="cuda:0")
    two = StagedStack(c, w, devices=[0, 1], threads=threads)
    calls = {"n": 0}
    real = two.stages[1].stack._matmul

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 9:  # in micro-batch 1 of stage 1, with micro-batches in flight on stage 0
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    two.stages[1].stack._matmul = failing
    with pytest.raises(RuntimeError, match="injected"):
        two.prefill(_requests(c, 12, seed=1), microbatch_tokens=400)
    two.synchronize()
    for st in two.stages:
        assert st.pool.stats().used_bytes == 0
    two.stages[1].stack._matmul = real
    r = two.prefill(_requests(c, 12, seed=1), microbatch_tokens=400)  # still usable after
    two.synchronize()
    assert r.logits.shape[0] == 12
