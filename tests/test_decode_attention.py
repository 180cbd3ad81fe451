"""Decode attention over the paged KV cache (kernels/decode_attention) without a GPU: every
build compiles to sm_90a without spills or local memory, moves K and V in 16-byte global
loads, the split plan's rule, and the fronts' argument checks (which run before any launch)."""

from __future__ import annotations

import re

import pytest

from fullpipe.cuda import compiler, sass
from fullpipe.kernels import decode_attention as da

ARCH = "sm_90a"


@pytest.fixture(scope="module")
def module():
    return compiler.compile_package_kernel(da.SOURCE, arch=ARCH)


@pytest.fixture(scope="module")
def per_kernel_sass(module):
    text = sass.disassemble(module.cubin)
    return {part.split(",", 1)[0].strip(): part for part in re.split(r"\.section\s+\.text\.", text)[1:]}


def test_every_build_the_front_launches_is_there_without_spills(module):
    assert set(module.resources) == set(da.kernel_names())
    for name, r in module.resources.items():
        assert r.spill_store_bytes == r.spill_load_bytes == r.stack_frame_bytes == 0, f"{name}: {r}"
        if "split" in name:  # 128 threads; at most 255 registers, at least 2 blocks per SM
            assert r.registers * da.SPLIT_THREADS * 2 <= 65536, f"{name}: {r.registers} registers"


def test_k_and_v_move_in_16_byte_loads(per_kernel_sass):
    for name in da.kernel_names():
        text = per_kernel_sass[name]
        loads = re.findall(r"\bLDG\.E(?:\.[A-Z0-9_]+)*", text)
        if name.startswith("decode_split"):
            # K and V rows: 2 x UNROLL 128-bit loads per lane and iteration
            assert sum(".128" in op for op in loads) >= 8, f"{name}: {loads}"
            assert "MUFU.EX2" in text  # the softmax in base 2
        if name.startswith("kv_write"):
            stores = re.findall(r"\bSTG\.E(?:\.[A-Z0-9_]+)*", text)
            assert stores and all(".128" in op for op in stores), f"{name}: {stores}"
            # besides K and V (128-bit, in pairs): the token's sequence and slot (32-bit), its page (64-bit)
            wide = [op for op in loads if ".128" in op]
            assert wide and len(wide) % 2 == 0, f"{name}: {loads}"
            assert {op.replace(".CONSTANT", "") for op in loads if ".128" not in op} <= {"LDG.E", "LDG.E.64"}


def test_the_split_plan():
    # 8 sequences x 16 K/V heads on 132 SMs: 8 blocks per SM want 9 splits of 456 tokens at 4096,
    # rounded up to whole pages: 8 splits of 512
    assert da.plan_decode(8, 16, 16, 4096, 64, 132) == (512, 8)
    # one sequence of one K/V head: as many splits as the minimum split size allows
    assert da.plan_decode(1, 8, 1, 4096, 64, 132) == (128, 32)
    # short contexts: one split of whole pages
    assert da.plan_decode(8, 16, 16, 100, 64, 132) == (128, 1)
    for b, h, kvh, n, p, sms in [(1, 32, 8, 2000, 16, 132), (3, 4, 2, 777, 256, 78), (8, 16, 16, 4096, 128, 132)]:
        split, splits = da.plan_decode(b, h, kvh, n, p, sms)
        assert split % p == 0 and split >= da.MIN_SPLIT_TOKENS
        assert splits * split >= n > (splits - 1) * split  # every token in exactly one split
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        da.plan_decode(1, 6, 4, 100, 64, 132)
    with pytest.raises(ValueError, match="sm_count"):
        da.plan_decode(1, 4, 4, 100, 64, 0)


def test_workspace_bytes_by_hand():
    # fp32 o [2, 4, 3, 128] then fp32 (m, l) [2, 4, 3, 2]
    assert da.decode_workspace_bytes(2, 4, 128, 3) == 4 * 2 * 4 * 3 * 128 + 4 * 2 * 4 * 3 * 2


def test_group_builds():
    assert [da.group_build(h, 4) for h in (4, 8, 12, 16, 32)] == [1, 2, 4, 4, 8]
    with pytest.raises(ValueError, match="at most 8"):
        da.group_build(36, 2)


# --------------------------------------------------------------------------- argument checks
torch = pytest.importorskip("torch")
bf16 = torch.bfloat16


def _args(batch=2, heads=4, kv=2, d=128, pages=3, p=64):
    return dict(q=torch.zeros(batch, heads, d, dtype=bf16), out=torch.zeros(batch, heads, d, dtype=bf16),
                page_table=torch.zeros(batch, pages, dtype=torch.int64), seq_lens=torch.ones(batch, dtype=torch.int32),
                layer=0, layers=2, page_tokens=p, kv_heads=kv, split_tokens=128,
                partial=torch.zeros(da.decode_workspace_bytes(batch, heads, d, 2), dtype=torch.uint8))


@pytest.mark.parametrize("change, word", [
    (dict(q=torch.zeros(2, 4, 96, dtype=bf16)), "q must be"),
    (dict(q=torch.zeros(2, 4, 128, dtype=torch.float32)), "q must be"),
    (dict(kv_heads=3), "kv_heads"),
    (dict(split_tokens=100), "split_tokens"),
    (dict(out=torch.zeros(2, 4, 64, dtype=bf16)), "out must match q"),
    (dict(seq_lens=torch.ones(2, dtype=torch.int64)), "seq_lens"),
    (dict(page_table=torch.zeros(3, 3, dtype=torch.int64)), "page_table"),
    (dict(partial=torch.zeros(100, dtype=torch.uint8)), "partial"),
    (dict(layer=2), "layer"),
    (dict(page_tokens=48, split_tokens=96), "page_tokens"),
])
def test_decode_attention_refuses_bad_arguments_by_name(change, word):
    args = _args()
    args.update(change)
    with pytest.raises(ValueError, match=word):
        da.decode_attention(args.pop("q"), args.pop("out"), args.pop("page_table"), args.pop("seq_lens"),
                            args.pop("layer"), args.pop("layers"), args.pop("page_tokens"), **args)


def test_cpu_tensors_are_refused_before_any_launch():
    args = _args()
    with pytest.raises(ValueError, match="on the CPU"):
        da.decode_attention(args.pop("q"), args.pop("out"), args.pop("page_table"), args.pop("seq_lens"),
                            args.pop("layer"), args.pop("layers"), args.pop("page_tokens"), **args)
    k = torch.zeros(3, 2, 64, dtype=bf16)
    ids = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError, match="on the CPU"):
        da.kv_write(k, k, torch.zeros(2, 4, dtype=torch.int64), ids, ids, 0, 1, 64)
    with pytest.raises(ValueError, match="v must match k"):
        da.kv_write(k, torch.zeros(3, 2, 128, dtype=bf16), torch.zeros(2, 4, dtype=torch.int64), ids, ids, 0, 1, 64)
