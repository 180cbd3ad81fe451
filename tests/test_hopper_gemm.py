"""CPU tests of the Hopper GEMM ladder: every rung compiles to an sm_90a cubin without
spills and its SASS holds the instructions of its technique; the tensor-map arguments
and launch plans computed in Python are right, and bad inputs fail with clear errors."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fullpipe.cuda import sass
from fullpipe.kernels import gemm_tuning
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm as sk

ARCH = "sm_90a"


def _opcodes(variant: str, multicast: bool = True, build=None) -> dict[str, dict[str, int]]:
    """Per kernel: base opcodes and full mnemonics (``UTMALDG.2D.MULTICAST``...)."""
    text = sass.disassemble(hg.module(variant, ARCH, multicast, build=build).cubin)
    out = {}
    for part in re.split(r"\.section\s+\.text\.", text)[1:]:
        name = part.split(",", 1)[0].strip()
        counts = dict(sass.opcode_counts(part))
        for m in re.finditer(r"\b((?:UTMALDG|UTMASTG|HGMMA|USETMAXREG|SYNCS|LDGSTS|STSM|STG|LDG|ATOMG)"
                             r"(?:\.[A-Za-z0-9_]+)+)", part):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        out[name] = counts
    return out


def _has(counts: dict[str, int], prefix: str) -> int:
    return sum(v for k, v in counts.items() if k == prefix or k.startswith(prefix + "."))


@pytest.mark.parametrize("variant", hg.VARIANTS)
def test_rung_compiles_without_spills(variant):
    mod = hg.module(variant, ARCH)
    assert mod.cubin[:4] == b"\x7fELF"
    assert set(mod.resources) == {f"gemm_hopper_{variant}_{t}" for t in ("bf16", "f16")}
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0, f"{r.name} spills or uses local memory: {r}"


# The instructions each rung is about (present) and those of the rungs it replaces (absent).
TECHNIQUE = {
    "wgmma": ({"HGMMA", "LDGSTS"}, {"UTMALDG", "USETMAXREG"}),
    "tma": ({"HGMMA", "UTMALDG", "SYNCS"}, {"LDGSTS", "USETMAXREG"}),
    "ws": ({"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG"}, {"LDGSTS", "UTMASTG"}),
    "persistent": ({"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "UTMASTG", "UCGABAR_ARV", "UCGABAR_WAIT"},
                   {"LDGSTS"}),
}


def _stream_k_only_global_stores(counts: dict[str, int], where: str, tile_n: int = 256) -> None:
    """The persistent rung writes C only by TMA stores: its global stores are stream-K's
    (a warpgroup's partial sums, its tile_n / 2 accumulators per thread as tile_n / 8
    coalesced 128-bit stores at L2, the flag raised after them, and the flag lowered by
    the warpgroup that waited for it); they are read back at L2 as 8 128-bit loads per
    epilogue piece (tile_n / 64 of them) for each of the partials loaded at once (2 at
    tile_n 256, 4 at 192, 128 and 64: 16, 32, 32 and 32 loads in flight); the ticket is an atomic
    increment that wraps to 0 at the last cluster's (the workspace left as found)."""
    vectors = tile_n // 8
    stores = {k: v for k, v in counts.items() if k.startswith("STG.")}
    assert stores == {"STG.E.128.STRONG.GPU": vectors, "STG.E.STRONG.GPU": 2}, f"{where}: {stores}"
    loads = 8 * (tile_n // 64) * (2 if tile_n == 256 else 4)
    assert counts.get("LDG.E.128.STRONG.GPU") == loads, f"{where}: partial sums not read back as {loads} x 128 bits"
    assert counts.get("ATOMG.E.INC.STRONG.GPU") == 1 and counts.get("ATOMG") == 1, \
        f"{where}: the ticket is not one wrapping increment: {sorted(k for k in counts if k.startswith('ATOM'))}"


@pytest.mark.parametrize("variant", hg.VARIANTS)
def test_rung_sass_shows_its_technique(variant):
    present, absent = TECHNIQUE[variant]
    for kernel, counts in _opcodes(variant).items():
        for op in present:
            assert _has(counts, op), f"{kernel}: no {op} in SASS"
        for op in absent:
            assert not _has(counts, op), f"{kernel}: unexpected {op} in SASS"
        # The MMAs are the 64x256x16 warpgroup ones, fp32 accumulate (4 per K slice).
        assert any(k.startswith("HGMMA.64x256x16.F32") for k in counts), f"{kernel}: {sorted(counts)}"
        if variant == "persistent":
            _stream_k_only_global_stores(counts, kernel)


def test_persistent_multicasts_b_and_the_comparison_build_does_not():
    def multicast_loads(counts):
        return sum(v for k, v in counts.items() if k.startswith("UTMALDG") and "MULTICAST" in k)

    for kernel, counts in _opcodes("persistent", multicast=True).items():
        assert multicast_loads(counts) > 0, kernel
    for kernel, counts in _opcodes("persistent", multicast=False).items():
        assert multicast_loads(counts) == 0 and _has(counts, "UTMALDG"), kernel


def test_no_wgmma_is_serialized():
    """ptxas serializes every wgmma of a kernel (C7515) when anything else may write an
    accumulator register inside a pipeline stage: the asynchronous MMAs then wait for
    each other. Each rung and each build of the persistent one keeps them in flight
    (stream-K's partial sums are added as the tile is stored, not into the accumulators)."""
    mods = [(v, hg.module(v, ARCH)) for v in hg.VARIANTS]
    mods += [(b.label, hg.module("persistent", ARCH, build=b)) for b in hg.SWEEP_BUILDS]
    for label, mod in mods:
        assert "C7515" not in mod.log, f"{label}: {mod.log}"


def test_register_reallocation_is_honoured():
    """setmaxnreg takes effect only with a register cap at entry: the compiler warns
    (C7508) and drops it otherwise; the log has no such warning and SASS has both the
    decrease (producer) and the increase (consumers)."""
    for variant in ("ws", "persistent"):
        mod = hg.module(variant, ARCH)
        assert "C7508" not in mod.log and "setmaxnreg" not in mod.log.lower(), mod.log
        for r in mod.resources.values():
            assert r.registers <= 168, r  # 384 threads x 168 = the whole register file at entry


# --------------------------------------------------------------------------- tensor maps
def test_tensor_map_args_for_a_row_major_matrix():
    t = hg.tensor_map_args("a", 0x10000, rows=1000, cols=392, dtype="bfloat16", box_rows=128, box_cols=64)
    assert t.rank == 2
    assert t.global_dims == (392, 1000)  # innermost first
    assert t.global_strides == (392 * 2,)  # bytes, rank - 1 entries
    assert t.box_dims == (64, 128)
    assert t.element_strides == (1, 1)
    assert t.swizzle == "128B" and t.interleave == "none" and t.oob_fill == "zero"
    assert t.box_bytes == 64 * 128 * 2


def test_plan_maps_match_the_kernels_boxes():
    p = hg.plan("persistent", 4096, 2048, 1024, "float16", 1 << 20, 2 << 20, 3 << 20, max_clusters=66)
    a, b, c = p.maps
    assert (a.global_dims, a.box_dims) == ((1024, 4096), (hg.BK, hg.BM))
    assert (b.global_dims, b.box_dims) == ((2048, 1024), (hg.CHUNK_N, hg.BK))
    assert (c.global_dims, c.box_dims) == ((2048, 4096), (hg.OUT_N, hg.OUT_ROWS))
    # One slice = the A box + the four B boxes: what the full barrier expects (SLICE_BYTES,
    # away from the edges).
    assert a.box_bytes + (hg.BN // hg.CHUNK_N) * b.box_bytes == hg.SLICE_BYTES
    # The edge boxes (the kernel's EdgeMaps, in its order): the same matrices, 64, 32, 16 and
    # 8 rows of the same width, each a whole number of 1 KiB swizzle atoms, so that one lands
    # in the slot exactly where those rows of the whole box would.
    a_edges, b_edges = p.edge_maps
    for whole, edges in ((a, a_edges), (b, b_edges)):
        assert [e.box_dims for e in edges] == [(whole.box_dims[0], rows) for rows in (64, 32, 16, 8)]
        for e in edges:
            assert (e.global_address, e.global_dims, e.global_strides) == (whole.global_address, whole.global_dims,
                                                                           whole.global_strides)
            assert e.swizzle == "128B" and e.box_bytes % 1024 == 0
    assert p.cluster == 2 and p.grid == 132 and p.grid % p.cluster == 0
    assert p.shared_mem <= hg.MAX_BLOCK_SHARED


def test_persistent_grid_is_never_more_than_the_work():
    p = hg.plan("persistent", 300, 512, 64, "bfloat16", max_clusters=66, sk_tiles=0)
    assert p.grid == 2 * hg.cluster_tiles(300, 512) == 2 * 2 * 2
    assert p.workspace_bytes == 0


def test_stream_k_where_whole_tiles_leave_clusters_idle():
    """Whole tiles where their waves keep the clusters busy (8192^3: 1024 tiles on 66
    clusters, the last wave 0.52 full); below one wave each tile cut into equal runs, as
    many as fit (a power of two, at most 8, 16 slices or more each), tiles of 40 slices or more; the last wave and the
    one before it where two waves or more end in a nearly empty one (at most a third of
    the clusters), the tiles left whole a whole number of waves; nothing at one wave and a
    part. The shapes' measured gains are in stream_k's docstring."""
    assert hg.stream_k(1024, 66, 128) == (0, 66)
    assert hg.stream_k(132, 66, 128) == (0, 66)  # exactly two waves
    assert hg.stream_k(144, 66, 48) == (66 + 12, 66)  # 3072^3: the last wave 12 of 66
    assert hg.stream_k(400, 66, 80) == (66 + 4, 66)  # 5120^3
    assert hg.stream_k(344, 66, 64) == (66 + 14, 66)  # 2048 x 11008 x 4096
    assert hg.stream_k(544, 66, 65) == (66 + 16, 66)  # 4224 x 8128 x 4160: 8 waves, then 16 tiles
    assert hg.stream_k(172, 66, 64) == (0, 66)  # 1024 x 11008 x 4096: the last wave 40 of 66, stream-K 0.88x
    assert hg.stream_k(160, 66, 64) == (0, 66)  # 2560 x 4096 x 4096: 28 of 66, 0.96x
    assert hg.stream_k(576, 66, 96) == (0, 66)  # 6144^3: 48 of 66, 0.9x
    assert hg.stream_k(184, 66, 32) == (0, 66)  # 5886 x 2048 x 2048: 52 of 66, stream-K lost there
    assert hg.stream_k(100, 66, 160) == (0, 66)  # 2560 x 2560 x 10240: 1.5 waves
    # one wave and a bit, clusters of two blocks (session 43, p286)
    assert hg.stream_k(68, 66, 174, 2) == (68, 66)  # 776 x 4112 x 11096: one wave and 2 tiles, all dealt out
    assert hg.stream_k(68, 66, 174) == (0, 66)  # ... not for one-block clusters (not measured there)
    assert hg.stream_k(88, 66, 22, 2) == (88, 66)  # one wave and 22 tiles (a third of the clusters)
    assert hg.stream_k(99, 66, 22, 2) == (99, 66)  # ... and 33 (half: 0.36-0.50 ran 1.02-1.25x, p309)
    assert hg.stream_k(100, 66, 22, 2) == (0, 66)  # ... and 34: more than half
    assert hg.stream_k(87, 66, 12, 2) == (0, 66)  # 682 x 7264 x 760: runs of 15.8 slices, stream-K 0.81x
    assert hg.stream_k(88, 66, 16, 2) == (88, 66)  # runs of 21, tiles of 16 slices (372 x 11248 x 1000: 0.99x)
    # tiles of fewer than 16 slices are never dealt out past one wave (session 50, p322 / p323: 0.74-0.82x)
    assert hg.stream_k(88, 66, 12, 2) == (0, 66)  # runs of 16, but of 12-slice tiles
    assert hg.stream_k(96, 66, 12, 2) == (0, 66)  # 8192 x 768 x 768 (GPT-2's c_proj at 8192 tokens): 0.74x
    assert hg.stream_k(300, 132, 12) == (0, 132)  # 6304 x 768 x 768 in 128 x 128 tiles: the last wave 36 of 132
    assert hg.stream_k(144, 66, 48, 2) == hg.stream_k(144, 66, 48)  # two waves and more: as for any cluster
    assert hg.stream_k(32, 66, 64) == (32, 64)  # 512 x 4096 x 4096: two runs a tile
    assert hg.stream_k(4, 66, 256) == (4, 32)  # 512 x 512 x 16384: at most 8 runs
    assert hg.stream_k(16, 66, 16) == (0, 16)  # 1024^3: runs of 8 slices would be too short
    # below one wave, tiles of fewer than 40 slices stay whole (session 52, p340 / p344: split 0.87x)
    assert hg.stream_k(64, 132, 32) == (0, 64)  # 200 x 1008 x 2048 in 64 x 64 tiles: two runs of 16 would fit
    assert hg.stream_k(64, 132, 39) == (0, 64)
    assert hg.stream_k(64, 132, 40) == (64, 128)  # ... from 40 slices, two runs of 20
    assert hg.stream_k(32, 132, 64) == (32, 128)  # 129 x 1001 x 4096 in 128 x 64 tiles: four runs of 16 (0.74x)
    assert hg.stream_k(9, 66, 128) == (9, 36)  # 768 x 768 x 8192: 4 runs, not 7.3
    assert hg.stream_k(40, 66, 64) == (0, 40)  # two runs a tile do not fit
    assert hg.stream_k(36, 66, 116, 2) == (36, 66)  # 570 x 3048 x 7408: every cluster, runs of 63 slices
    assert hg.stream_k(36, 66, 91, 2) == (0, 36)  # ... runs of 49.6: whole tiles (0.88x under 50, p310)
    assert hg.stream_k(44, 66, 76, 2) == (44, 66)  # two thirds of a wave, runs of 50.7 slices
    assert hg.stream_k(45, 66, 200, 2) == (0, 45)  # more than two thirds of a wave: whole tiles
    assert hg.stream_k(36, 66, 116) == (0, 36)  # one-block clusters: not measured there
    assert hg.stream_k(1, 1, 64) == (0, 1)  # one cluster: nothing to share
    # The kernel counts stream-K slices x clusters in 32 bits: beyond that, whole tiles.
    assert hg.stream_k(32, 66, 2**20) == (0, 32)


def test_stream_k_plan_uses_every_cluster_and_a_workspace_per_warpgroup():
    p = hg.plan("persistent", 3072, 3072, 3072, "bfloat16", max_clusters=66)
    assert p.sk_tiles == 78 and p.clusters == 66 and p.grid == 132
    warpgroups = 132 * hg.CONSUMERS
    # the ticket, then the flags' fixed region (whatever the launch: a kept workspace serves every build)
    assert p.workspace_zeroed == hg.WORKSPACE_HEADER + 4 * hg.WORKSPACE_FLAGS >= hg.WORKSPACE_HEADER + 4 * warpgroups
    assert p.workspace_bytes == p.workspace_zeroed + warpgroups * 64 * 256 * 4
    with pytest.raises(ValueError, match="whole number of waves"):
        hg.plan("persistent", 3072, 3072, 3072, "bfloat16", max_clusters=66, sk_tiles=10)
    # a GPU of more warpgroups than the workspace has flags: refused, not written past them
    with pytest.raises(ValueError, match="flags"):
        hg.plan("persistent", 16384, 16384, 1024, "bfloat16", max_clusters=2100, sk_tiles=4096 - 2100)
    # fewer K slices to deal out than clusters: some would have no run, and a tile's finisher would wait for
    # their flags forever
    with pytest.raises(ValueError, match="without a run"):
        hg.plan("persistent", 256, 256, 128, "bfloat16", max_clusters=66, sk_tiles=1)


class _Allocs:
    """hopper_gemm._workspace and its driver calls, recorded (no GPU)."""

    def __init__(self, monkeypatch):
        self.made, self.zeroed, self.next = [], [], 1 << 20
        monkeypatch.setattr(hg, "_workspace", self.workspace)
        monkeypatch.setattr(hg.drv, "call", self.call)

    def workspace(self, ref, nbytes, handle, on_current=False):
        ptr, self.next = self.next, self.next + nbytes
        self.made.append((nbytes, handle))
        return object(), ptr

    def call(self, name, *args):
        assert name == "cuMemsetD32Async"
        self.zeroed.append((args[0], args[2], args[3]))  # (address, words, stream)


def test_kept_workspaces_are_made_once_per_stream_grown_and_given_up_least_recent_first(monkeypatch):
    allocs = _Allocs(monkeypatch)
    kept = hg.KeptWorkspaces(limit=2)
    ref = _Ref(0)

    def get(nbytes, handle, device=ref):
        array, ptr = kept.get(device, nbytes, handle)
        assert array is not None  # (the caller holds it through its launch)
        return ptr

    a1 = get(1000, 11)
    assert get(800, 11) == a1 and len(allocs.made) == 1  # smaller: the same one, not zeroed again
    assert allocs.zeroed == [(a1, (hg.WORKSPACE_HEADER + 4 * hg.WORKSPACE_FLAGS) // 4, 11)]
    a2 = get(5000, 11)  # larger: a new one, zeroed on its stream
    assert a2 != a1 and allocs.made[-1] == (5000, 11) and allocs.zeroed[-1][::2] == (a2, 11)
    b = get(1000, 22)
    assert b not in (a1, a2) and kept.held_bytes() == 6000
    get(100, 11)  # stream 11 used last: stream 22's goes when a third comes
    get(100, 33)
    assert kept.held_bytes() == 5000 + 100
    assert get(100, 11) == a2 and len(allocs.made) == 4
    assert get(100, 11, device=_Ref(1)) != a2  # another device: its own
    kept.clear()
    assert kept.held_bytes() == 0


def test_the_per_thread_default_stream_keeps_no_workspace(monkeypatch):
    """Its launches from two threads are not ordered: each gets a workspace of its own."""
    hg._per_thread_default_stream.cache_clear()
    monkeypatch.delenv("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", raising=False)
    assert hg.KeptWorkspaces.keeps(0) and hg.KeptWorkspaces.keeps(123) and not hg.KeptWorkspaces.keeps(2)
    hg._per_thread_default_stream.cache_clear()
    monkeypatch.setenv("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "1")  # (stream 0 is then per thread too)
    assert not hg.KeptWorkspaces.keeps(0) and hg.KeptWorkspaces.keeps(123)
    hg._per_thread_default_stream.cache_clear()


class _Ref:
    def __init__(self, device_index):
        self.device_index = device_index


@pytest.mark.parametrize("variant", hg.VARIANTS)
def test_every_rung_fits_in_shared_memory(variant):
    assert hg.shared_mem_bytes(variant) <= hg.MAX_BLOCK_SHARED


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(address=0x10008), "16-byte aligned"),
        (dict(cols=100), "multiple of 8"),
        (dict(box_cols=128), "inner side must be <= 128"),
        (dict(box_rows=512), "1..256"),
        (dict(rows=0), "empty"),
        (dict(dtype="float32"), "bfloat16 or float16"),
    ],
)
def test_tensor_map_args_reject_what_tma_cannot_do(kwargs, match):
    args = dict(name="b", address=0x10000, rows=64, cols=256, dtype="bfloat16", box_rows=64, box_cols=64)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        hg.tensor_map_args(**args)


@pytest.mark.parametrize(
    "shape, match",
    [((64, 100, 64), "N must be a multiple of 8 for a row-major b.*w.T"), ((64, 64, 36), "K must be a multiple of 8"),
     ((0, 64, 64), ">= 1")],
)
def test_plan_names_the_shape_constraint(shape, match):
    with pytest.raises(ValueError, match=match):
        hg.plan("ws", *shape, "bfloat16")


def test_an_n_not_a_multiple_of_8_is_taken_from_w_t_with_c_rows_padded():
    """GPT-2's 50257-word head: w (N x K) has rows of K, so TMA reads it; only C's rows
    are not whole 16-byte units, so the plan writes C into rows padded to 50264 (the TMA
    store clips at N). Unpadded C, or a row-major b of 50257 columns, is refused, saying why."""
    build = dataclasses.replace(hg.PERSISTENT, b_k_major=True)
    p = hg.plan("persistent", 200, 50257, 768, "bfloat16", 1 << 20, 2 << 20, 3 << 20, max_clusters=66, build=build,
                c_pitch=50264)
    c = p.maps[2]
    assert (c.global_dims, c.global_strides) == ((50257, 200), (50264 * 2,))
    assert p.maps[1].global_dims == (768, 50257)  # (w's rows: N of them, K long)
    with pytest.raises(ValueError, match="out has 50257 columns.*multiple of 8"):
        hg.plan("persistent", 200, 50257, 768, "bfloat16", max_clusters=66, build=build)
    with pytest.raises(ValueError, match="cannot hold"):
        hg.plan("persistent", 200, 50257, 768, "bfloat16", max_clusters=66, build=build, c_pitch=50256)
    with pytest.raises(ValueError, match="row-major b.*w.T"):
        hg.plan("persistent", 200, 50257, 768, "bfloat16", max_clusters=66)
    with pytest.raises(ValueError, match="K must be a multiple of 8"):
        hg.check_shapes(200, 64, 770, b_transposed=True)
    sp = sk.plan(8, 50257, 768, "bfloat16", b_transposed=True)  # (the skinny kernel stores C element by element)
    assert sp.tiles == -(-50257 // sp.tile_n)
    with pytest.raises(ValueError, match="row-major b"):
        sk.plan(8, 50257, 768, "bfloat16")


def test_an_out_of_padded_rows_is_told_from_its_strides():
    """The persistent rung writes an out whose rows lie further apart than N in place (the
    (M, N) view of padded rows it returns for N not a multiple of 8); told by the strides."""
    import numpy as np

    padded = np.empty((4, 16), np.float16)
    assert hg._is_pitched(padded[:, :10]) and not hg._is_pitched(padded) and not hg._is_pitched(None)
    assert hg._is_pitched(padded[::2])  # (every other row: rows of contiguous elements, 32 apart)
    assert not hg._is_pitched(padded.T) and not hg._is_pitched(padded[:, ::2]) and not hg._is_pitched(np.empty(8))


def test_plan_rejects_unaligned_pointers_and_unknown_variants():
    with pytest.raises(ValueError, match="out must be 16-byte aligned"):
        hg.plan("wgmma", 64, 64, 64, "bfloat16", 0, 0, 8)
    with pytest.raises(ValueError, match="unknown variant"):
        hg.plan("cutlass", 64, 64, 64, "bfloat16")


def test_launch_config_carries_the_cluster():
    cfg = hg._launch_config(132, 384, hg.shared_mem_bytes("persistent"), None, 2)
    assert cfg.numAttrs == 1 and cfg.attrs[0].value.clusterDim.x == 2
    assert (cfg.gridDimX, cfg.blockDimX) == (132, 384)


def test_launch_config_carries_the_dependent_launch_beside_the_cluster():
    from cuda.bindings import driver as d

    cfg = hg._launch_config(132, 384, hg.shared_mem_bytes("persistent"), None, 2, dependent=True)
    ids = [a.id for a in cfg.attrs[: cfg.numAttrs]]
    assert ids == [d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                   d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]
    assert cfg.attrs[1].value.programmaticStreamSerializationAllowed == 1
    cfg = hg._launch_config(66, 384, hg.shared_mem_bytes("persistent"), None, None, dependent=True)
    assert cfg.numAttrs == 1 and cfg.attrs[0].id == ids[1]


@pytest.mark.parametrize("build", [hg.PERSISTENT, hg.PERSISTENT_ONE_ROW, hg.PERSISTENT_NARROW, hg.PERSISTENT_SMALL,
                                   hg.PERSISTENT_M64_N128, hg.PERSISTENT_M64_N64], ids=lambda b: b.label)
def test_dependent_launch_waits_for_the_prior_grid_before_any_global_access(build):
    """Launched as a dependent, the kernel may run beside the one before it: griddepcontrol.wait
    (ACQBULK) must come before its first TMA load or store and its first global or generic
    load, store or atomic (a generic one may reach global memory), and it lets the next
    kernel launch (griddepcontrol.launch_dependents, PREEXIT). Before the wait only the
    setup may run: parameters, tensor-map prefetch, barrier init, fences."""
    text = sass.disassemble(hg.module("persistent", ARCH, build=build).cubin)
    for part in re.split(r"\.section\s+\.text\.", text)[1:]:
        name = part.split(",", 1)[0].strip()
        lines = [line for line in part.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line)]
        at = {}
        for i, line in enumerate(lines):
            op = re.search(r"\b(ACQBULK|PREEXIT|UTMALDG|UTMASTG|LDG|STG|ATOMG|RED|LD|ST|ATOM)(?=[.\s])", line)
            if op:
                at.setdefault(op.group(1), i)
        assert "ACQBULK" in at and "PREEXIT" in at, name
        first_global = min(i for op, i in at.items() if op not in ("ACQBULK", "PREEXIT"))
        assert at["ACQBULK"] < first_global, f"{name}: global memory touched before griddepcontrol.wait"


# --------------------------------------------------------------------------- persistent build options
def _multicast_loads(counts: dict[str, int]) -> tuple[int, int]:
    """(plain, multicast) TMA loads in a kernel's SASS."""
    plain = sum(v for k, v in counts.items() if k.startswith("UTMALDG.") and "MULTICAST" not in k)
    multi = sum(v for k, v in counts.items() if k.startswith("UTMALDG.") and "MULTICAST" in k)
    return plain, multi


@pytest.mark.parametrize("build", hg.SWEEP_BUILDS, ids=lambda b: b.label)
def test_every_sweep_build_compiles_to_the_persistent_technique(build):
    mod = hg.module("persistent", ARCH, build=build)
    assert "C7508" not in mod.log, mod.log
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0, f"{build.label} {r.name} spills: {r}"
        assert r.registers * build.threads <= 65536, r  # one block fits an SM's register file
    present, absent = TECHNIQUE["persistent"]
    if build.consumers == 1:  # one consumer warpgroup has registers enough: none are moved
        present, absent = present - {"USETMAXREG"}, absent | {"USETMAXREG"}
    for kernel, counts in _opcodes("persistent", build=build).items():
        for op in present:
            assert _has(counts, op), f"{build.label} {kernel}: no {op} in SASS"
        for op in absent:
            assert not _has(counts, op), f"{build.label} {kernel}: unexpected {op} in SASS"
        # The MMAs are as wide as the build's tile: m64n256k16, m64n128k16 or m64n64k16.
        mma = f"HGMMA.64x{build.tile_n}x16.F32"
        assert any(k.startswith(mma) for k in counts), f"{build.label} {kernel}: no {mma}: {sorted(counts)}"
        _stream_k_only_global_stores(counts, f"{build.label} {kernel}", build.tile_n)
        # The stmatrix epilogue writes its pieces with STSM, the other with 32-bit STS.
        assert bool(_has(counts, "STSM")) == build.stmatrix, f"{build.label} {kernel}: STSM {_has(counts, 'STSM')}"
        plain, multi = _multicast_loads(counts)
        # Which operands are multicast shows in the loads: blocks along M share B, blocks
        # along N share A; in a 2 x 2 cluster every load is a multicast one, in a 2 x 1 or
        # 1 x 2 the other operand is loaded plain. One block a cluster shares nothing.
        if build.cluster == 1:
            assert multi == 0 and plain > 0, f"{build.label} {kernel}: {plain} plain, {multi} multicast loads"
            continue
        assert multi > 0, f"{build.label} {kernel}: nothing is multicast"
        if build.cluster_m > 1 and build.cluster_n > 1:
            assert plain == 0, f"{build.label} {kernel}: {plain} plain loads, A and B should be multicast"
        else:
            assert plain > 0, f"{build.label} {kernel}: the unshared operand should be a plain load"


def _hgmma_operands(build) -> set[str]:
    """The operand text of every HGMMA of the persistent build (``gdesc[UR..].tnspB``...)."""
    text = sass.disassemble(hg.module("persistent", ARCH, build=build).cubin)
    return {re.sub(r"UR\d+", "UR", m) for m in re.findall(r"HGMMA\.\S+ R\d+, (\S+),", text)}


@pytest.mark.parametrize("base", [hg.PERSISTENT, hg.PERSISTENT_NARROW, hg.PERSISTENT_SMALL, hg.PERSISTENT_ONE_ROW],
                         ids=lambda b: b.label)
def test_b_given_transposed_is_read_k_major_with_no_transpose_in_the_mma(base):
    """B as ``w.T`` of a row-major (N, K) weight: the same kernel but for B's boxes
    (64 of w's rows by 64 of K) and wgmma's B operand read K-major: no ``.tnspB`` on
    any HGMMA, where the row-major build transposes every one."""
    build = dataclasses.replace(base, b_k_major=True)
    mod = hg.module("persistent", ARCH, build=build)
    assert "C7508" not in mod.log and "C7515" not in mod.log, mod.log
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0 and r.registers <= 168, r
    assert _hgmma_operands(base) == {"gdesc[UR].tnspB"}
    assert _hgmma_operands(build) == {"gdesc[UR]"}
    for kernel, counts in _opcodes("persistent", build=build).items():
        assert _has(counts, "UTMALDG") and _has(counts, "USETMAXREG"), kernel
        # the same kinds of TMA loads (W's boxes are multicast where B's are; more of them:
        # W's last rows past N are cut into smaller boxes, B's K-rows never are)
        plain, multi = _multicast_loads(counts)
        base_plain, base_multi = _multicast_loads(_opcodes("persistent", build=base)[kernel])
        assert (plain > 0, multi > 0) == (base_plain > 0, base_multi > 0), kernel
        assert plain >= base_plain and multi >= base_multi, kernel
    # the plan maps w (N x K) in boxes of 64 rows by 64 along K: the bytes of a row-major B chunk
    p = hg.plan("persistent", 4096, 2048, 1024, "float16", 1 << 20, 2 << 20, 3 << 20, max_clusters=66, build=build)
    b = p.maps[1]
    assert (b.global_dims, b.box_dims, b.global_strides) == ((1024, 2048), (hg.BK, hg.CHUNK_N), (1024 * 2,))
    # and cuts W's last rows (past N) with boxes of fewer of them
    assert [e.box_dims for e in p.edge_maps[1]] == [(hg.BK, rows) for rows in (64, 32, 16, 8)]
    assert b.box_bytes == hg.BK * hg.CHUNK_N * 2 and b.swizzle == "128B"
    assert build.label.endswith("-bT") and build.defines()["B_K_MAJOR"] == 1


def test_products_of_one_tile_row_run_one_block_a_cluster():
    """At most 128 rows (a decode step's requests): one block a cluster, so no block runs
    a main loop on rows past the end; the build compiles to the same technique, each
    block loading its own B (nothing to share), with stream-K's stores, no spills."""
    assert hg.default_build(8, 32000, 2048, 132) == hg.unswapped_build(128, 32000, 2048, 132) == hg.PERSISTENT_ONE_ROW
    assert hg.unswapped_build(129, 32000, 2048, 132) == hg.PERSISTENT
    assert hg.default_build(128, 32000, 2048, 132).swap_ab  # (65 rows on: the transposed product, test_hopper_gemm_swap)
    b = hg.PERSISTENT_ONE_ROW
    assert b.cluster == 1
    p = hg.plan("persistent", 8, 32000, 2048, "bfloat16", max_clusters=132, build=b)
    assert p.cluster == 1 and p.grid == 125  # 125 tiles of 128 x 256 on 132 SMs: one wave
    mod = hg.module("persistent", ARCH, build=b)
    assert "C7515" not in mod.log, mod.log
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0 and r.registers <= 168, r
    present, _ = TECHNIQUE["persistent"]
    for kernel, counts in _opcodes("persistent", build=b).items():
        for op in present:
            assert _has(counts, op), f"{kernel}: no {op} in SASS"
        plain, multi = _multicast_loads(counts)
        assert plain > 0 and multi == 0, f"{kernel}: {plain} plain, {multi} multicast loads"
        _stream_k_only_global_stores(counts, kernel)


@pytest.mark.parametrize("m, n, k, sms, build", [
    (1536, 1536, 4096, 132, "PERSISTENT"),           # 36 cluster tiles of 256 x 256 for 66 clusters
    (8192, 8192, 4096, 132, "PERSISTENT"),
    (1024, 1024, 4096, 32, "PERSISTENT"),            # 16 of 16 on a small GPU
    (8, 32000, 4096, 132, "PERSISTENT_ONE_ROW"),     # 125 tiles of 128 x 256 for 132 one-block clusters
    (512, 4096, 4096, 132, "PERSISTENT_NARROW"),     # 32 of 66; 128 tiles of 128 x 128 for 132 SMs
    (1024, 2048, 4096, 132, "PERSISTENT_NARROW"),    # 32 of 66; 128 of 128 x 128
    (128, 11008, 4096, 132, "PERSISTENT_NARROW"),    # 43 of 132; 86 of 128 x 128
    (1536, 1536, 4096, 264, "PERSISTENT_NARROW"),    # 36 of 132 on a GPU twice as wide; 144 of 128 x 128
    (1024, 1024, 4096, 132, "PERSISTENT_M64_N128"),  # 16 of 66; 64 of 128 x 128; 128 of 64 x 128
    (256, 4096, 4096, 132, "PERSISTENT_M64_N128"),   # 16 of 66; 64 of 128 x 128; 128 of 64 x 128
    (96, 8192, 4096, 132, "PERSISTENT_SMALL"),       # 65-128 rows: 128 x 64 (one tile row), 128 of them
    (128, 4096, 4096, 132, "PERSISTENT_M64_N64"),    # 32 of 128 x 128, 64 of 128 x 64: 128 of 64 x 64
    (64, 4096, 4096, 132, "PERSISTENT_M64_N64"),     # 32 of 64 x 128: 64 of 64 x 64
    (1024, 1024, 4096, 264, "PERSISTENT_M64_N64"),   # 128 of 64 x 128 for 264 SMs: 256 of 64 x 64
    # an odd number of 64-row blocks: 64 x 128 in 128 x 128's place where they fit one wave
    (192, 4096, 4096, 132, "PERSISTENT_M64_N128"),   # 96 of 64 x 128 (128 x 128: 64, a third of them padding)
    (320, 2048, 4096, 132, "PERSISTENT_M64_N128"),   # 80 of 64 x 128
    (1088, 1024, 4096, 132, "PERSISTENT_NARROW"),    # 136 of 64 x 128 > one wave: 72 of 128 x 128
    # long K (>= 128 slices), more than one tile row: 128 x 128 tiles with stream-K
    (1024, 1024, 12288, 132, "PERSISTENT_NARROW"),   # 192 slices x 64 tiles of 128 x 128: 93 a SM
    (1024, 512, 12288, 132, "PERSISTENT_NARROW"),    # 192 x 32: 46.5 a SM
    (768, 768, 8192, 132, "PERSISTENT_NARROW"),      # 128 x 36: 34.9 a SM
    (1024, 1024, 12296, 264, "PERSISTENT_NARROW"),   # 193 x 64: 46.8 a SM of a GPU twice as wide
    (1024, 1024, 8128, 132, "PERSISTENT_M64_N128"),  # 127 slices: short of the long K
    (512, 512, 16384, 132, "PERSISTENT_M64_N128"),   # 256 x 16: 31 a SM; long K: not 64 x 64
    (512, 512, 32768, 132, "PERSISTENT_NARROW"),     # 512 x 16: 62 a SM
    (1024, 512, 12288, 264, "PERSISTENT_M64_N128"),  # 23 a SM of a GPU twice as wide; not 64 x 64
    (128, 4096, 65536, 132, "PERSISTENT_SMALL"),     # one tile row: the 128 x 64 tiles throughout
    (128, 1024, 8192, 132, "PERSISTENT_SMALL"),      # long K above 64 rows: not 64 x 64
    (64, 1024, 8192, 132, "PERSISTENT_M64_N64"),     # at most 64 rows: 64 x 64 at any K
    (192, 2048, 16384, 132, "PERSISTENT_M64_N128"),  # long K, an odd number of 64-row blocks: 64 x 128
    # and not 128 x 256 tiles at long K: 128 of 128 x 128 fill the SMs (32 cluster tiles for 66)
    (1024, 2048, 16384, 132, "PERSISTENT_NARROW"),
    # rows off the 32-byte sectors (K, or a row-major B's N, not a multiple of 16), from 64 slices on
    # above one tile row: 128 x 256 tiles where they fill a third of the clusters, else 128 x 128
    # where those number 20 or more (15 % of the SMs)
    (1024, 2040, 16384, 132, "PERSISTENT"),          # N off: 32 cluster tiles of 256 x 256 for 66 clusters
    (1024, 2048, 16392, 132, "PERSISTENT"),          # K off
    (1216, 1272, 10240, 132, "PERSISTENT"),          # 25 of 66 (p313: 1.43x the 128 x 128 tiles)
    (512, 2808, 8192, 132, "PERSISTENT"),            # 22: a third of the clusters
    (512, 2552, 8192, 132, "PERSISTENT_NARROW"),     # 20 cluster tiles: 80 tiles of 128 x 128
    (2560, 120, 8200, 132, "PERSISTENT_NARROW"),     # 20 tiles of 128 x 128
    (2432, 120, 8200, 132, "PERSISTENT_M64_N128"),   # 19: as on the sectors
    (1024, 504, 16384, 132, "PERSISTENT_NARROW"),    # 32 tiles of 128 x 128, not 64-row tiles
    (512, 504, 16384, 132, "PERSISTENT_M64_N128"),   # 16 of them: fewer than 20, as on the sectors
    (1024, 1024, 4040, 132, "PERSISTENT_NARROW"),    # K off at 64 slices
    (1024, 1024, 4024, 132, "PERSISTENT_M64_N128"),  # ... at 63: short of it
    (128, 4096, 65544, 132, "PERSISTENT_SMALL"),     # one tile row: as before
    # tiles too short for stream-K (under 16 slices) on the sectors: 128 x 128 where its waves end sooner
    # (counted whole, at NARROW_RATE) than the 128 x 256 cluster tiles'
    (8192, 768, 768, 132, "PERSISTENT_NARROW"),      # 96 cluster tiles: 2 waves of 66 (4 of 128 x 128) vs 3 of 132
    (2048, 3072, 768, 132, "PERSISTENT_NARROW"),     # the same counts
    (8192, 3072, 768, 132, "PERSISTENT"),            # 384: 6 waves (12; the last 54 of 66) vs 12 of 128 x 128 (14.1 at 0.85)
    (8192, 760, 768, 132, "PERSISTENT"),             # N off the sectors (a row-major b): as before
    (8192, 768, 1024, 132, "PERSISTENT"),            # 16 slices: the 128 x 256 tiles' stream-K evens their waves
    # one row of 2 x 1 clusters (129-256 rows), from 96 slices on, 128 x 256 tiles from 18 % of the clusters (12 of 66)
    (200, 4096, 14336, 132, "PERSISTENT"),           # Llama-3-8B's down projection at 200 tokens: 16 cluster tiles
    (200, 4096, 6144, 132, "PERSISTENT"),            # 96 slices
    (200, 4096, 6080, 132, "PERSISTENT_M64_N128"),   # 95 slices: as before
    (200, 3072, 8192, 132, "PERSISTENT"),            # 12 cluster tiles
    (200, 2816, 8192, 132, "PERSISTENT_NARROW_PAIR"),  # 11: 128 x 128 as before, in pairs sharing B
    (256, 4096, 8192, 132, "PERSISTENT"),            # the row's last
    (257, 4096, 8192, 132, "PERSISTENT_NARROW"),     # two cluster rows: as before
    # one row of clusters where the above gives 128 x 128 tiles: in clusters of 2 sharing B
    (200, 6144, 4096, 132, "PERSISTENT_NARROW_PAIR"),  # Llama-3-8B's qkv at 200 tokens (p334: 1.19x)
    (232, 6752, 5600, 132, "PERSISTENT_NARROW_PAIR"),
    (130, 8096, 5696, 132, "PERSISTENT_NARROW_PAIR"),
    (128, 11008, 4096, 132, "PERSISTENT_NARROW"),      # one tile row: one block a cluster, as before
    (200, 2040, 8192, 132, "PERSISTENT"),            # rows off the sectors (N, row-major b): from 12 % (8 tiles)
    (200, 2048, 8200, 132, "PERSISTENT"),            # ... (K)
    (200, 2048, 8192, 132, "PERSISTENT_M64_N128"),   # 8 tiles on the sectors: as before
    (200, 1792, 8200, 132, "PERSISTENT_NARROW_PAIR"),  # 7 tiles off them: 128 x 128 in pairs
])
def test_the_default_build_by_how_much_of_the_gpu_its_tiles_fill(m, n, k, sms, build):
    """128 x 256 tiles where they fill more than half of the GPU's clusters (one block a
    cluster for at most 128 rows); else the largest of 128 x 128 (64 x 128 for an odd number
    of 64-row blocks, if one wave), 64 x 128 (128 x 64 at 65-128 rows) and 64 x 64 whose
    tiles fill more than half of the SMs, the larger ones at long K; the smaller tiles one
    block a cluster."""
    chosen = hg.unswapped_build(m, n, k, sms)  # (default_build's, where the transposed product does not take it)
    assert chosen == getattr(hg, build), (m, n, k, sms, chosen.label)
    p = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=sms // chosen.cluster, build=chosen)
    assert p.grid <= sms and p.shared_mem <= hg.MAX_BLOCK_SHARED
    assert p.workspace_bytes == (0 if not p.sk_tiles else
                                 p.workspace_zeroed + p.grid * chosen.consumers * 64 * chosen.tile_n * 4)
    if build == "PERSISTENT_NARROW" and 2 * hg.cluster_tiles(m, n, chosen) <= sms:
        assert p.sk_tiles > 0, "128 x 128 tiles that leave half the SMs idle run stream-K"


def test_rows_off_the_sectors_are_read_as_b_lies():
    """A row of B as it lies is N elements long, or K for b = w.T: an odd N (off the 32-byte
    sectors) turns the long-K choice to 128 x 256 tiles for a row-major b, not for w.T."""
    assert not hg.rows_on_sectors(2040, 16384) and hg.rows_on_sectors(2040, 16384, b_transposed=True)
    assert not hg.rows_on_sectors(2048, 16392, b_transposed=True)  # A's rows (and w's) are K long
    assert hg.default_build(1024, 2040, 16384, 132) == hg.PERSISTENT
    assert hg.default_build(1024, 2040, 16384, 132, b_transposed=True) == hg.PERSISTENT_NARROW


def test_two_by_two_without_multicast_loads_everything_itself():
    build = hg.PersistentBuild(cluster_n=2, multicast=False)
    for kernel, counts in _opcodes("persistent", build=build).items():
        plain, multi = _multicast_loads(counts)
        assert multi == 0 and plain > 0, kernel


@pytest.mark.parametrize("build", [hg.PersistentBuild(), hg.PersistentBuild(cluster_n=2),
                                   hg.PersistentBuild(cluster_m=4), hg.PersistentBuild(cluster_n=2, multicast=False)],
                         ids=lambda b: b.label)
def test_plan_follows_the_build(build):
    p = hg.plan("persistent", 8192, 8192, 8192, "bfloat16", 1 << 20, 2 << 20, 3 << 20, max_clusters=132 // build.cluster,
                build=build)
    a, b, _ = p.maps
    assert p.cluster == build.cluster and p.grid % p.cluster == 0
    assert p.grid == 132 // build.cluster * build.cluster
    # The bytes one block's full barrier expects: every A part (its own and its row
    # peers') and every B box land in it.
    parts_a = build.cluster_n if build.multicast else 1
    assert parts_a * a.box_bytes + (hg.BN // hg.CHUNK_N) * b.box_bytes == hg.SLICE_BYTES
    assert a.box_dims == (hg.BK, hg.BM // parts_a)


def test_cluster_tiles_cover_the_matrix_for_each_cluster_shape():
    assert hg.cluster_tiles(8192, 8192, hg.PersistentBuild()) == 32 * 32
    assert hg.cluster_tiles(8192, 8192, hg.PersistentBuild(cluster_n=2)) == 32 * 16
    assert hg.cluster_tiles(300, 520, hg.PersistentBuild(cluster_m=4)) == 1 * 3


def test_build_options_are_checked_and_the_default_is_in_the_sweep():
    with pytest.raises(ValueError, match="cluster_m"):
        hg.PersistentBuild(cluster_m=3)
    with pytest.raises(ValueError, match="tile_order"):
        hg.PersistentBuild(tile_order="zigzag")
    assert hg.PERSISTENT in hg.SWEEP_BUILDS
    assert len({b.label for b in hg.SWEEP_BUILDS}) == len(hg.SWEEP_BUILDS)


# --------------------------------------------------------------------------- 128 x 192 tiles (session 59)
@pytest.mark.parametrize("build", [hg.PERSISTENT_192, hg.as_laid_out(hg.PERSISTENT_192, True), hg.PERSISTENT_192_PAIR],
                         ids=lambda b: b.label)
def test_192_wide_tiles_compile_to_m64n192_mmas_with_b_read_as_it_lies(build):
    """128 x 192 tiles: m64n192k16 MMAs, no spills, registers moved to the consumers; a row-major
    b's slice read MN-major (.tnspB), w's K-major; the pair multicasts W's slice (two boxes of 96
    of its rows, one a block) and loads A plain; C written by TMA stores, stream-K's partial sums
    the only global stores."""
    mod = hg.module("persistent", ARCH, build=build)
    assert "C7508" not in mod.log and "C7515" not in mod.log, mod.log
    for r in mod.resources.values():
        assert not r.spills and r.stack_frame_bytes == 0 and r.registers <= 168, r
    assert _hgmma_operands(build) == ({"gdesc[UR]"} if build.b_k_major else {"gdesc[UR].tnspB"})
    present, _ = TECHNIQUE["persistent"]
    for kernel, counts in _opcodes("persistent", build=build).items():
        for op in present:
            assert _has(counts, op), f"{build.label} {kernel}: no {op} in SASS"
        assert any(k.startswith("HGMMA.64x192x16.F32") for k in counts), f"{kernel}: {sorted(counts)}"
        assert not any(k.startswith("HGMMA.64x256") for k in counts), kernel
        _stream_k_only_global_stores(counts, f"{build.label} {kernel}", 192)
        plain, multi = _multicast_loads(counts)
        assert plain > 0 and (multi > 0) == (build.cluster == 2), f"{build.label} {kernel}: {plain}, {multi}"
    if build.cluster == 2:  # (W's 192 rows a slice, 96 a block: boxes of 96 rows, cut at N's edge in 64 ... 8)
        p = hg.plan("persistent", 4096, 6144, 4096, "bfloat16", 1 << 20, 2 << 20, 3 << 20, max_clusters=66, build=build)
        assert p.maps[1].box_dims == (hg.BK, 96) and build.b_box_rows == 96
        assert [e.box_dims for e in p.edge_maps[1]] == [(hg.BK, rows) for rows in (64, 32, 16, 8)]
    with pytest.raises(ValueError, match="cannot share"):  # (a row-major b's 64-column chunks: 3 a slice)
        hg.PersistentBuild(tile_n=192)


@pytest.mark.parametrize("m, n, k, expected", [
    (512, 6144, 4096, "192"),        # 128 blocks of 128 x 192, one wave; 48 pairs of 128 x 256 fill 0.73 (p400: 1.19x)
    (1024, 6144, 4096, "192"),       # 256 blocks, 2 waves, in place of 96 pair tiles dealt out (p400: 1.19x)
    (640, 4096, 14336, "swap4"),     # 128 tiles: four of 160 rows by 32 blocks of W, as cuBLAS (p404: 1.04x the 192-wide)
    (1207, 5248, 6016, "swap6"),     # six tiles of 208 rows by 41 blocks of W: 246 of 264 places (p404: 1.23x)
    (300, 28672, 4096, None),        # 80-wide tiles end 1.06x sooner at 0.86, but 0.8 is their rate (NARROW_SWAP_RATES)
    (1024, 4096, 4096, None),        # 64 pairs of 128 x 256 fill a wave already
    (195, 11968, 10176, None),       # below 256 rows (p401: 0.90x)
    (4096, 4096, 4096, None),        # 256 pair tiles, 3.9 waves
    (4096, 28672, 4096, None),       # 76 of 1792 pair tiles dealt out: 27.4 waves of 128 x 256, 37 of 128 x 192
])
def test_the_rule_takes_the_build_whose_whole_waves_end_sooner(m, n, k, expected, monkeypatch):
    """The rule's last step (_fills_sooner): 128 x 192 tiles or the transposed product in more tiles
    of the product's rows (128-row blocks of W, one block a cluster), with whole tiles, where the
    wave model says they end 1.05x sooner than the rule's build; the same for a row-major b."""
    for b_transposed in (True, False):
        chosen = hg.default_build(m, n, k, 132, b_transposed)
        with monkeypatch.context() as patch:  # (the rule without its last step)
            patch.setattr(hg, "_fills_sooner", lambda *a: None)
            before = hg.default_build(m, n, k, 132, b_transposed)
        if expected is None:
            assert chosen == before, (b_transposed, chosen.label)
            continue
        want = (hg.PERSISTENT_192 if expected == "192"
                else hg.swap_build(m, hg.BM, 1, int(expected[4:])))
        assert chosen == hg.as_laid_out(want, b_transposed), (b_transposed, chosen.label)
        # whole tiles, ending FILL_GAIN sooner by the wave model than what the rule had
        assert hg.stream_k(hg.cluster_tiles(m, n, chosen), 132 // chosen.cluster, k // 64, chosen.cluster)[0] == 0
        assert hg._wave_time(m, n, k, 132, chosen) * hg.FILL_GAIN <= hg._wave_time(m, n, k, 132, before)
    # the tuner measures the 192-wide tiles: one block a cluster for either layout, pairs for w.T
    for b_transposed, builds in ((True, {hg.PERSISTENT_192, hg.PERSISTENT_192_PAIR}), (False, {hg.PERSISTENT_192})):
        measured = {p.build for p in gemm_tuning.candidates(m, n, k, 132, b_transposed) if p.build is not None}
        assert {hg.as_laid_out(b, b_transposed) for b in builds} <= measured
