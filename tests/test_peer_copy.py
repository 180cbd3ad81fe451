"""kernels/peer_copy: the SM copy compiles to sm_90a with 128-bit global loads and stores,
each thread's loads issued before its stores; the host plan covers every byte exactly once
with both sides aligned to the word width, whatever the pointers and size."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fullpipe.cuda import compiler, sass
from fullpipe.kernels import peer_copy as P

ARCH = "sm_90a"


@pytest.fixture(scope="module")
def sass_by_kernel() -> dict[str, str]:
    mod = compiler.compile_package_kernel(P.SOURCE, arch=ARCH)
    assert mod.cubin[:4] == b"\x7fELF"
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0, r
    text = sass.disassemble(mod.cubin)
    parts = re.split(r"\.section\s+\.text\.", text)[1:]
    return {p.split(",", 1)[0].strip(): p for p in parts}


def test_every_word_width_and_the_hold_are_compiled(sass_by_kernel):
    assert set(sass_by_kernel) == {P.kernel_name(w) for w in P.WIDTHS} | {P.HOLD_KERNEL}


def test_the_16_byte_kernel_moves_128_bit_words_loads_before_stores(sass_by_kernel):
    body = sass_by_kernel[P.kernel_name(16)]
    ops = re.findall(r"\b((?:LDG|STG)\.E(?:\.[A-Z0-9_]+)*)", body)
    loads = [i for i, op in enumerate(ops) if op.startswith("LDG.E") and op.endswith(".128")]
    stores = [i for i, op in enumerate(ops) if op.startswith("STG.E") and op.endswith(".128")]
    assert len(loads) == P.UNROLL and len(stores) == P.UNROLL, ops
    assert max(loads) < min(stores), "each thread issues all its loads before its first store"


def test_the_narrow_kernels_use_their_width(sass_by_kernel):
    assert re.search(r"\bLDG\.E\.64\b", sass_by_kernel[P.kernel_name(8)])
    assert re.search(r"\bSTG\.E\.U16\b", sass_by_kernel[P.kernel_name(2)])


def _check(dst: int, src: int, n: int, sm_count: int = 132, blocks: int = 6) -> P.CopyPlan:
    p = P.plan(dst, src, n, sm_count=sm_count, blocks_per_sm=blocks)
    assert p.head + p.words * p.width + p.tail == n == p.nbytes
    assert 0 <= p.head < p.width or p.width == 1 and p.head == 0
    assert 0 <= p.tail < p.width
    if p.words:
        assert (dst + p.head) % p.width == 0 and (src + p.head) % p.width == 0
    wider = [w for w in P.WIDTHS if w > p.width]
    assert all((dst - src) % w for w in wider), "the widest common width is taken"
    assert 1 <= p.grid <= sm_count * blocks
    assert p.grid * P.THREADS >= max(p.head, p.tail), "the first threads reach every head and tail byte"
    return p


@pytest.mark.parametrize("dst,src,n,width,head,tail", [
    (0x7f0000000000, 0x7e0000000000, 256 << 20, 16, 0, 0),     # aligned buffers, 256 MiB
    (0x7f0000000003, 0x7e0000000003, 1000, 16, 13, 11),        # equal offsets: head to dst's boundary
    (0x7f0000000008, 0x7e0000000000, 100, 8, 0, 4),            # 8 apart: 8-byte words
    (0x7f0000000001, 0x7e0000000002, 17, 1, 0, 0),             # odd distance: bytes
    (0x7f0000000003, 0x7e0000000003, 5, 16, 5, 0),             # shorter than the head
    (0x7f0000000000, 0x7e0000000000, 0, 16, 0, 0),
])
def test_plan_cases(dst, src, n, width, head, tail):
    p = _check(dst, src, n)
    assert (p.width, p.head, p.tail) == (width, head, tail)


def test_plan_covers_every_byte_once_at_random():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        base = 0x7f0000000000
        dst, src = base + int(rng.integers(0, 4096)), base - (1 << 32) + int(rng.integers(0, 4096))
        n = int(rng.choice([rng.integers(0, 64), rng.integers(0, 1 << 24)]))
        p = _check(dst, src, n, sm_count=int(rng.integers(1, 200)), blocks=int(rng.integers(1, 9)))
        covered = np.zeros(min(n, 64) + 1, np.int32)  # the edges, byte by byte, at small sizes
        if n <= 64:
            covered[:p.head] += 1
            covered[p.head:p.head + p.words * p.width] += 1
            covered[n - p.tail:n] += 1 if p.tail else 0
            assert (covered[:n] == 1).all()


def test_grid_fills_the_sms_and_no_more():
    big = P.plan(0x1000, 0x2000, 256 << 20, sm_count=132, blocks_per_sm=6)
    assert big.grid == 132 * 6
    small = P.plan(0x1000, 0x2000, 16 * P.THREADS * P.UNROLL * 3, sm_count=132, blocks_per_sm=6)
    assert small.grid == 3


@pytest.mark.parametrize("bad", [dict(nbytes=-1), dict(sm_count=0), dict(nbytes=1.5)])
def test_plan_refuses_bad_input(bad):
    args = dict(dst_ptr=0x1000, src_ptr=0x2000, nbytes=16, sm_count=132, blocks_per_sm=6) | bad
    with pytest.raises((ValueError, TypeError)):
        P.plan(args.pop("dst_ptr"), args.pop("src_ptr"), args.pop("nbytes"), **args)


def test_copy_sm_refuses_overlap_and_bad_pointers_before_any_gpu_work():
    with pytest.raises(ValueError, match="overlap"):
        P.copy_sm(0x1000, 0x1008, 64, object(), device=0)
    with pytest.raises(ValueError, match="pointer"):
        P.copy_sm(0, 0x1000, 64, object(), device=0)
    with pytest.raises(TypeError, match="stream"):
        P.copy_sm(0x1000, 0x2000, 64, None, device=0)
