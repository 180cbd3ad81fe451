"""CPU tests of the fused elementwise kernels (kernels/elementwise.cu and .py): they
compile to sm_90a through NVRTC, every kernel the front launches exists, the SASS moves
data in 16-byte global loads and stores with no spills, and the fronts refuse bad
arguments with a ValueError naming the problem (checked before the device, so CPU
tensors reach every check)."""

from __future__ import annotations

import re

import pytest

from fullpipe.cuda import compiler, sass
from fullpipe.kernels import elementwise as ew

ARCH = "sm_90a"


@pytest.fixture(scope="module")
def module():
    return compiler.compile_package_kernel(ew.SOURCE, arch=ARCH)


@pytest.fixture(scope="module")
def per_kernel_sass(module):
    text = sass.disassemble(module.cubin)
    out = {}
    for part in re.split(r"\.section\s+\.text\.", text)[1:]:
        out[part.split(",", 1)[0].strip()] = part
    return out


# sincosf's reduction for large arguments (Payne-Hanek, |angle| > 105615 rad, which
# positions below that never reach) keeps its 7-word table slice in local memory:
# rope_qkv's only local memory, seen in its SASS as STL of 7 words read back by index.
SINCOSF_SLOW_PATH_FRAME = 32


def test_the_module_exports_what_the_front_launches(module):
    assert module.cubin[:4] == b"\x7fELF"
    assert set(module.resources) == set(ew.kernel_names())


def test_no_spills_and_no_local_memory_but_sincosf(module):
    for name, r in module.resources.items():
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, f"{name} spills: {r}"
        if name.startswith("rope_qkv"):
            assert r.stack_frame_bytes <= SINCOSF_SLOW_PATH_FRAME, f"{name}: {r}"
        else:
            assert r.stack_frame_bytes == 0, f"{name} uses local memory: {r}"


def test_data_moves_in_16_byte_global_accesses(per_kernel_sass):
    for name in ew.kernel_names():
        text = per_kernel_sass[name]
        loads = re.findall(r"\bLDG\.E(?:\.[A-Z0-9_]+)*", text)
        stores = re.findall(r"\bSTG\.E(?:\.[A-Z0-9_]+)*", text)
        assert any(".128" in op for op in loads), f"{name}: no 128-bit global load in {sorted(set(loads))}"
        assert stores and all(".128" in op for op in stores), f"{name}: stores {sorted(set(stores))}"
        # the only narrower load is rope's one int32 position per work item
        narrow = [op for op in loads if ".128" not in op]
        if name.startswith("rope_qkv"):
            assert set(narrow) <= {"LDG.E.CONSTANT", "LDG.E"}, f"{name}: {sorted(set(narrow))}"
        else:
            assert not narrow, f"{name}: narrow loads {sorted(set(narrow))}"


def test_norm_builds_cover_every_width_up_to_the_limit():
    assert ew.norm_slots(8) == 1 and ew.norm_slots(256) == 1 and ew.norm_slots(264) == 2
    assert ew.norm_slots(2048) == 8 and ew.norm_slots(ew.MAX_NORM_WIDTH) == 16
    with pytest.raises(ValueError, match="widest row"):
        ew.norm_slots(ew.MAX_NORM_WIDTH + 8)


# --------------------------------------------------------------------------- argument checks
torch = pytest.importorskip("torch")
bf16 = torch.bfloat16


def _z(*shape, dtype=bf16):
    return torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("call, match", [
    (lambda: ew.rms_norm(_z(4, 64, 2), _z(64), 1e-5, _z(4, 64)), "2-D"),
    (lambda: ew.rms_norm(_z(4, 64, dtype=torch.float32), _z(64), 1e-5, _z(4, 64)), "bfloat16 or float16"),
    (lambda: ew.rms_norm(_z(4, 60), _z(60), 1e-5, _z(4, 60)), "multiple of 8"),
    (lambda: ew.rms_norm(_z(4, 8192), _z(8192), 1e-5, _z(4, 8192)), "multiple of 8 from 8 to 4096"),
    (lambda: ew.rms_norm(_z(4, 64), _z(32), 1e-5, _z(4, 64)), r"weight must be a \(64,\) bfloat16"),
    (lambda: ew.rms_norm(_z(4, 64), _z(64, dtype=torch.float16), 1e-5, _z(4, 64)), "weight must be"),
    (lambda: ew.rms_norm(_z(4, 64), _z(64), 1e-5, _z(4, 72)), r"out must be a \(4, 64\)"),
    (lambda: ew.rms_norm(_z(4, 64).t().contiguous().t(), _z(4), 1e-5, _z(64, 4)), "not contiguous"),
    (lambda: ew.rms_norm(_z(4 * 64 + 1)[1:].view(4, 64), _z(64), 1e-5, _z(4, 64)), "x must be 16-byte aligned"),
    (lambda: ew.rms_norm(_z(4, 64), _z(64), 1e-5, _z(4, 64)), "on the CPU"),
    (lambda: ew.residual_rms_norm(_z(4, 64), _z(3, 64), _z(64), 1e-5, _z(4, 64)), r"proj must be a \(4, 64\)"),
    (lambda: ew.residual_rms_norm(_z(4, 64), _z(4, 64), _z(64), 1e-5, _z(4, 64)), "on the CPU"),
    (lambda: ew.swiglu(_z(4, 24), _z(4, 12)), "F a positive multiple of 8"),
    (lambda: ew.swiglu(_z(4, 32), _z(4, 32)), r"out must be a \(4, 16\)"),
    (lambda: ew.swiglu(_z(4, 32), _z(4, 16)), "on the CPU"),
])
def test_fronts_refuse_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _rope(tokens=3, hq=4, hkv=2, d=64, **over):
    args = dict(qkv=_z(tokens, (hq + 2 * hkv) * d), positions=_z(tokens, dtype=torch.int32),
                q_out=_z(tokens, hq, d), k_out=_z(tokens, hkv, d), v_out=_z(tokens, hkv, d),
                heads=hq, kv_heads=hkv, head_dim=d, base=10000.0)
    args.update(over)
    return lambda: ew.rope_qkv(**args)


@pytest.mark.parametrize("call, match", [
    (_rope(head_dim=40), "head_dim must be a multiple of 16"),
    (_rope(d=256), "up to 128"),
    (_rope(heads=0), "positive ints"),
    (_rope(base=0.0), "base must be > 0"),
    (_rope(qkv=_z(3, 511)), r"qkv must be \[tokens, \(heads \+ 2 kv_heads\) \* head_dim\] = \[tokens, 512\]"),
    (_rope(positions=_z(3, dtype=torch.int64)), r"positions must be a \(3,\) int32"),
    (_rope(positions=_z(4, dtype=torch.int32)), r"positions must be a \(3,\) int32"),
    (_rope(q_out=_z(3, 2, 64)), r"q_out must be a \(3, 4, 64\)"),
    (_rope(k_out=_z(3, 4, 64)), r"k_out must be a \(3, 2, 64\)"),
    (_rope(v_out=_z(3, 2, 64, dtype=torch.float16)), "v_out must be"),
    (_rope(), "on the CPU"),
])
def test_rope_refuses_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
