"""The role-stamped build of the warp-specialized Hopper GEMM (kernels/role_stamps) without a
GPU: the build reads the global timer where the default build does not, and neither spills;
the stamp record's layout turns into the roles' intervals."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fullpipe.cuda import compiler, sass
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import role_stamps as rs


@pytest.mark.parametrize("stamped", [False, True])
def test_only_the_stamped_build_reads_the_clock(stamped):
    m = compiler.compile_package_kernel(hg.SOURCES["ws"], arch="sm_90a", defines={"ROLE_STAMPS": 1} if stamped else {})
    text = sass.disassemble(m.cubin)
    reads = len(re.findall(r"SR_GLOBALTIMER", text))
    assert (reads > 0) == stamped
    for name, r in m.resources.items():
        assert r.spill_store_bytes == r.stack_frame_bytes == 0, f"{name}: {r}"
    # the roles are the same: register hand-off and TMA loads in both builds
    assert "USETMAXREG" in text and "UTMALDG" in text


def test_the_record_layout_becomes_intervals():
    slices = 2
    w = rs.words_per_block(slices)
    assert w == 3 + 2 * 2 + 2 * (3 * 2 + 2)
    raw = np.zeros((2, w), dtype=np.uint64)
    # block 0 starts at 1000 on SM 7; producer: slice 0 waits 1000..1010, slice 1 1010..1500
    raw[0, :3] = [1000, 3000, 7]
    raw[0, 3:7] = [1000, 1010, 1010, 1500]
    # consumer 0: slice 0 waits 1000..1200, computes 1200..1700; slice 1 waits 1700..1710, computes 1710..2500;
    # epilogue 2500..2900; consumer 1 the same, 100 ns later
    c0 = [1000, 1200, 1700, 1700, 1710, 2500, 2500, 2900]
    raw[0, 7:15] = c0
    raw[0, 15:23] = [t + 100 for t in c0]
    raw[1, :3] = [1100, 2000, 9]
    blocks = rs.parse(raw.ravel(), slices, 2)
    b = blocks[0]
    assert (b.sm, b.span) == (7, (0, 2000))
    assert b.producer_wait == [(0, 10), (10, 500)]
    assert b.consumer_wait[0] == [(0, 200), (700, 710)] and b.consumer_mma[0] == [(200, 700), (710, 1500)]
    assert b.consumer_mma[1] == [(300, 800), (810, 1600)] and b.epilogue == [(1500, 1900), (1600, 2000)]
    # some wgmma in flight from 200 (consumer 0's first) to 1600 (consumer 1's last), without a gap
    assert b.busy_fraction() == pytest.approx(1400 / 2000)
    assert blocks[1].sm == 9 and blocks[1].span == (100, 1000)
