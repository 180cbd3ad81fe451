"""CPU tests of the Hopper flash attention kernel: every build compiles through NVRTC to
an sm_90a cubin without spills or local memory, with register reallocation honoured;
its SASS holds the technique (HGMMA of the right shapes, from registers for P V, TMA
loads, USETMAXREG both ways, mbarrier waits, the ping-pong named barriers only in the
ping-pong build); the plan's tensor maps, grid and shared memory; backend choice."""

from __future__ import annotations

import re

import pytest

from fullpipe.cuda import sass
from fullpipe.kernels import flash_attention as fa
from fullpipe.kernels import flash_attention_hopper as fah

ARCH = "sm_90a"


def _per_kernel(build) -> dict[str, str]:
    parts = re.split(r"\.section\s+\.text\.", sass.disassemble(fah.module(ARCH, build).cubin))
    return {part.split(",", 1)[0].split()[0].strip(): part for part in parts[1:]}


@pytest.mark.parametrize("build", fah.SWEEP_BUILDS, ids=lambda b: b.label)
def test_every_build_compiles_without_spills(build):
    mod = fah.module(ARCH, build)
    assert mod.cubin[:4] == b"\x7fELF"
    assert set(mod.resources) == set(fah.KERNELS)
    assert "C7508" not in mod.log, mod.log  # setmaxnreg ignored
    assert "serialized" not in mod.log.lower(), mod.log  # wgmma serialized by ptxas
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0, f"{build.label} {r.name} spills or uses local memory: {r}"
        threads = build.threads(64 if "_d64_" in r.name else 128)
        assert r.registers * threads <= 65536, r  # the register file at entry (setmaxnreg moves it later)


@pytest.mark.parametrize("build", fah.SWEEP_BUILDS, ids=lambda b: b.label)
def test_sass_shows_the_technique(build):
    kernels = _per_kernel(build)
    assert set(kernels) == set(fah.KERNELS)
    for name, text in kernels.items():
        d = 64 if "_d64_" in name else 128
        keys = build.keys(d)
        hgmma = re.findall(r"HGMMA\.(\d+x\d+x\d+)\.F32(\.BF16)?\S*\s+([^;]*);", text)
        shapes = {s for s, _, _ in hgmma}
        # Q K^T: 64 x BN (keys) x 16; P V: 64 x D x 16.
        assert shapes == {f"64x{keys}x16", f"64x{d}x16"}, (name, shapes)
        assert all(bool(bf) == ("_bf16" in name) for _, bf, _ in hgmma), f"{name}: input type"
        # Q K^T reads both operands from shared memory (A: a descriptor); P V takes A from
        # registers and B (V) transposed, MN-major: "R.., R.., gdesc[..].tnspB".
        ss = re.findall(rf"HGMMA\.64x{keys}x16\.F32\S*\s+R\d+,\s*gdesc\[", text)
        rs = re.findall(rf"HGMMA\.64x{d}x16\.F32\S*\s+R\d+,\s*R\d+,\s*gdesc\[UR\d+\]\.tnspB", text)
        assert len(ss) + len(rs) == len(hgmma), (name, len(ss), len(rs), len(hgmma))
        assert ss and len(ss) % (d // 16) == 0 and rs and len(rs) % (keys // 16) == 0, (name, len(ss), len(rs))
        for op in ("UTMALDG", "USETMAXREG", "SYNCS"):
            assert op in text, f"{name}: no {op}"
        assert re.search(r"USETMAXREG\.DEALLOC\S*\s+0x18\b", text), name  # the producer keeps 24
        # The consumers take what the producer gave up: 240 each of 2, 160 each of 3.
        want = {2: 240, 3: 160}[build.consumers(d)]
        assert re.search(rf"USETMAXREG\.TRY_ALLOC\S*\s+UP\d+,\s*{want:#x}\b", text), (name, want)
        assert "LDGSTS" not in text and "HMMA" not in text.replace("HGMMA", ""), f"{name}: mma.sync path"
        # The TMA-store epilogue (UTMASTG) only where the build asks for it.
        assert ("UTMASTG" in text) == build.tma_store(d), name
        # The ping-pong hand-off: bar.arrive on the other warpgroup's barrier.
        assert ("BAR.ARV" in text) == (build.schedule(d) == "pingpong"), name


def test_schedules_issue_the_next_scores_with_the_products():
    """serial waits for every wgmma group (DEPBAR.LE 0 only); overlap and ping-pong keep
    one group (P V) running while the softmax works (a wait on <= 1)."""
    for build in fah.SWEEP_BUILDS:
        for name, text in _per_kernel(build).items():
            waits = set(re.findall(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*(0x[0-9a-f]+)", text))
            if build.schedule(64 if "_d64_" in name else 128) == "serial":
                assert waits == {"0x0"}, (build.label, name, waits)
            else:
                assert "0x1" in waits, (build.label, name, waits)


def test_plan_maps_match_the_kernels_boxes():
    shape = fa.plan((4, 4096, 16, 128), (4, 4096, 4, 128), (4, 4096, 4, 128), "float16", causal=True)
    p = fah.plan(shape, q_ptr=1 << 20, k_ptr=2 << 20, v_ptr=3 << 20)
    mq, mk, mv, mo = p.maps
    assert p.kernel == "flash_attention_hopper_d128_f16_causal"
    assert p.grid == (16 * 4 * (4096 // 128), 1, 1) and p.block == 384  # d128: two consumer warpgroups of 64 rows
    assert p.q_tiles == 4096 // 128
    assert mq.global_dims == (16 * 128, 4 * 4096) and mq.box_dims == (64, 128)
    assert mk.global_dims == (4 * 128, 4 * 4096) and mk.box_dims == (64, fah.BLOCK_N)
    assert mv.global_dims == mk.global_dims and mv.global_address == 3 << 20
    # o: the output, written by the TMA-store epilogue in boxes of one warpgroup's 64 rows
    assert mo.global_dims == mq.global_dims and mo.box_dims == (64, 64) and mo.swizzle == "128B"
    assert mq.global_strides == (16 * 128 * 2,) and mq.swizzle == "128B" and mq.oob_fill == "zero"
    # The transaction bytes the kernel arms per tile are the boxes that fill it.
    assert (128 // 64) * mk.box_bytes == fah.BLOCK_N * 128 * 2
    assert p.shared_mem <= fah.MAX_BLOCK_SHARED


def test_three_consumer_plan_has_192_row_blocks():
    build = fah.Build(consumers_d64=3, persistent=False)
    shape = fa.plan((2, 1000, 8, 64), (2, 1000, 8, 64), (2, 1000, 8, 64), "float16", causal=True)
    p = fah.plan(shape, q_ptr=1 << 20, k_ptr=2 << 20, v_ptr=3 << 20, build=build)
    assert p.block == 512 and p.q_tiles == -(-1000 // 192) and p.grid == (8 * 2 * p.q_tiles, 1, 1)
    assert p.maps[0].box_dims == (64, 192) and p.maps[1].box_dims == (64, fah.BLOCK_N)
    # The Q tile grows by a third: 192 rows x 64 columns x 2 bytes more than 128 rows.
    assert p.shared_mem - fah.plan(shape, build=fah.Build(consumers_d64=2, persistent=False)).shared_mem == 64 * 64 * 2
    # Head dim 128 is untouched by the d64 option.
    p128 = fah.plan(fa.plan((1, 256, 2, 128), (1, 256, 2, 128), (1, 256, 2, 128), "float16"), build=build)
    assert p128.block == 384 and p128.maps[0].box_dims == (64, 128)


def test_176_key_tiles_change_the_k_and_v_boxes_only():
    shape = fa.plan((1, 1000, 4, 128), (1, 1000, 2, 128), (1, 1000, 2, 128), "bfloat16")
    p = fah.plan(shape, build=fah.Build(keys_d128=176, persistent=False))
    assert [m.box_dims for m in p.maps] == [(64, 128), (64, 176), (64, 176), (64, 64)] and p.block == 384
    assert p.shared_mem == fah.shared_mem_bytes(128, 2, 2, 176) <= fah.MAX_BLOCK_SHARED
    with pytest.raises(ValueError, match="do not fit"):  # with a persistent block's own output stage
        fah.Build(keys_d128=176)
    with pytest.raises(ValueError, match="key tiles"):
        fah.Build(keys_d128=192)
    with pytest.raises(ValueError, match="do not fit"):
        fah.Build(keys_d128=176, stages_d128=3)


def test_varlen_plan_and_shared_memory():
    p = fah.plan(fa.plan((1000, 8, 64), (1000, 2, 64), (1000, 2, 64), "bfloat16", varlen=True, batch=3,
                         max_seqlen=517), build=fah.Build(persistent=False))
    assert p.q_tiles == -(-517 // fah.DEFAULT_BUILD.block_m(64)) and p.shape.seq_len == 0
    assert p.grid == (8 * 3 * p.q_tiles, 1, 1)  # a block per query tile
    persistent = fah.plan(p.shape, build=fah.Build(persistent=True), sm_count=16)
    assert persistent.grid == (16, 1, 1)  # a block per SM walks the tiles
    assert persistent.shared_mem - p.shared_mem == 192 * 64 * 2  # its own output stage
    causal = fa.plan((1000, 8, 64), (1000, 2, 64), (1000, 2, 64), "bfloat16", varlen=True, batch=3, max_seqlen=517,
                     causal=True)
    # Causal tiles differ in length: a block per tile even for a persistent build.
    assert fah.plan(causal, build=fah.Build(persistent=True), sm_count=16).grid == (8 * 3 * p.q_tiles, 1, 1)
    assert p.maps[0].global_dims == (8 * 64, 1000)
    for build in fah.SWEEP_BUILDS:
        for d in fa.HEAD_DIMS:
            assert fah.shared_mem_bytes(d, build.stages(d), build.consumers(d), build.keys(d)) <= fah.MAX_BLOCK_SHARED
    with pytest.raises(ValueError, match="consumer warpgroups"):
        fah.Build(consumers_d64=4)
    with pytest.raises(ValueError, match="do not fit"):
        fah.Build(stages_d128=4)
    with pytest.raises(ValueError, match="schedule"):
        fah.Build(schedule_d128="triple")
    assert len({b.label for b in fah.SWEEP_BUILDS}) == len(fah.SWEEP_BUILDS)


def test_plan_rejects_what_tma_cannot_take():
    shape = fa.plan((1, 64, 4, 64), (1, 64, 4, 64), (1, 64, 4, 64), "float16")
    with pytest.raises(ValueError, match="16-byte aligned"):
        fah.plan(shape, k_ptr=8)
    assert fah.HEAD_DIMS == fa.HEAD_DIMS and set(fah.DTYPE_SUFFIX.items()) == set(fa.DTYPES.items())


def test_backend_choice():
    assert fa.choose_backend("sm_80", 128, False) == "mma_sync"
    assert fa.choose_backend("sm_90", 128, False) == "mma_sync"  # no wgmma without the a target
    for d in fa.HEAD_DIMS:
        for causal in (False, True):
            want = "hopper" if (d, causal) in fah.FASTER_THAN_MMA_SYNC else "mma_sync"
            assert fa.choose_backend("sm_90a", d, causal) == want
            assert fa.choose_backend("sm_90a", d, causal, "mma_sync") == "mma_sync"
            assert fa.choose_backend("sm_90a", d, causal, "hopper") == "hopper"
    with pytest.raises(ValueError, match="sm_90a"):
        fa.choose_backend("sm_89", 64, False, "hopper")
    with pytest.raises(ValueError, match="backend must be"):
        fa.choose_backend("sm_90a", 64, False, "cudnn")
