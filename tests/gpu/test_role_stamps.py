"""GPU test of the role-stamped warp-specialized GEMM (kernels/role_stamps): its product is
right, and its stamps show the hand-offs in the order the mbarriers force: a slice lands
after the producer issued its loads; a consumer's wgmma of a slice retires after the slice
landed; the producer reuses a slot only after both consumers released it."""

from __future__ import annotations

import pytest

from ._torch import needs_torch, torch

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)


def test_role_stamps_follow_the_ring_protocol():
    from fullpipe.kernels import hopper_gemm as hg
    from fullpipe.kernels.role_stamps import STAMP_BLOCKS, gemm_role_stamps

    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        pytest.skip("the Hopper GEMM needs sm_90a")
    g = torch.Generator(device="cuda").manual_seed(0)
    m, n, k = 1000, 2048, 2048 + 40  # an edge in M and K
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = (torch.randn(k, n, device="cuda", generator=g) / 45).to(torch.bfloat16)
    out, blocks = gemm_role_stamps(a, b)
    want = a.float() @ b.float()
    assert float((out.float() - want).norm() / want.norm()) < 1e-2
    assert len(blocks) == STAMP_BLOCKS
    slices = -(-k // hg.BK)
    for r in blocks:
        lo, hi = r.span
        assert 0 <= lo < hi
        issued = [e for _, e in r.producer_wait]
        assert issued == sorted(issued) and len(issued) == slices
        for c in range(2):
            for kt, ((w0, landed), (l2, retired)) in enumerate(zip(r.consumer_wait[c], r.consumer_mma[c])):
                assert w0 <= landed == l2 <= retired <= hi
                assert landed >= issued[kt] - 64  # a slice lands after its TMA issue (32 ns timer steps)
                if kt >= hg.STAGES:  # the slot was free only after both consumers retired slice kt - STAGES
                    freed = max(r.consumer_mma[x][kt - hg.STAGES][1] for x in range(2))
                    assert issued[kt] >= freed - 64
            e0, e1 = r.epilogue[c]
            assert r.consumer_mma[c][-1][1] <= e0 <= e1 <= hi
        assert 0 < r.busy_fraction() <= 1
