"""Flash attention forward: ``softmax(scale * Q K^T [causal]) V`` without the S x S matrix.

    o = fullpipe.kernels.attention(q, k, v, causal=True)                      # dense
    o = fullpipe.kernels.attention(q, k, v, cu_seqlens=offsets, max_seqlen=m) # packed varlen

Layouts (token-major, the layout of FlashAttention's ``flash_attn_func`` /
``flash_attn_varlen_func`` and of LLM servers' packed batches):

- dense: q ``[B, S, Hq, D]``, k and v ``[B, S, Hkv, D]``;
- variable length: q ``[total_tokens, Hq, D]``, k and v ``[total_tokens, Hkv, D]``, the
  sequences packed one after another; ``cu_seqlens`` (int32, ``[B + 1]``, on the GPU)
  holds their cumulative offsets: sequence b is tokens ``cu_seqlens[b] ..
  cu_seqlens[b+1]``, so a batch of prompts of different lengths runs in one launch.

The output has q's shape, dtype and kind (torch -> torch, cupy -> cupy, otherwise a
fullpipe DeviceArray), or is ``out``. (PyTorch's ``scaled_dot_product_attention``
takes ``[B, H, S, D]``: ``q.transpose(1, 2)`` of the dense layout is that view.)

Supported: float16 and bfloat16 (fp32 accumulation), head dims 64 and 128, causal or
not, grouped K/V heads (``Hq % Hkv == 0``; query head h reads K/V head
``h // (Hq // Hkv)``), any sequence length >= 1. Self-attention only: keys and values
come from the query's own sequence (same S / same cu_seqlens). Inputs must be
C-contiguous and 16-byte aligned. ``scale`` defaults to ``1 / sqrt(D)``.

Streams: the kernel is enqueued on ``stream`` (a cuda.core Stream or anything with
``__cuda_stream__``); when None, on the current stream of the inputs' library (torch
or CuPy), as their own operators would. fullpipe DeviceArrays need an explicit stream.

``cu_seqlens`` is trusted like FlashAttention trusts it: offsets must start at 0, never
decrease, end at ``total_tokens``, and ``max_seqlen`` must be >= the longest sequence
(tokens of longer sequences would get no output). Without ``max_seqlen`` the offsets
are copied to the host once (a synchronization), checked, and the maximum taken.

Kernels: flash_attention.cu (the FlashAttention-2 structure on mma.sync; the
online softmax is fullpipe/online_softmax.cuh, mirrored in NumPy by
:func:`online_softmax_reference`) and, on Hopper (sm_90a), flash_attention_hopper.cu
(TMA + wgmma, warp-specialized: flash_attention_hopper.py); ``backend=`` picks one
(:func:`choose_backend`).

    python -m fullpipe.kernels.flash_attention --selftest   # small checked runs (sanitizers)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from ..cuda import compiler
from ..cuda.launch import launch
from ._operands import Operand, arch_and_sm_count, current_stream_handle, empty_like_kind, operand

SOURCE = "kernels/flash_attention.cu"
HEAD_DIMS = (64, 128)
DTYPES = {"float16": "f16", "bfloat16": "bf16"}
LOG2E = 1.4426950408889634
MAX_GRID_YZ = 65535


@dataclasses.dataclass(frozen=True)
class Tiling:
    """One compile-time tiling of flash_attention.cu for one head dim: ``warps`` warps of
    ``warp_rows`` query rows each (16, or 32 as two 16-row blocks sharing every K/V
    fragment load; block tile ``warp_rows * warps`` rows), K/V tiles of ``block_n`` keys;
    ``q_in_smem``: Q fragments re-read from shared memory at every k-step instead of held
    in registers; ``one_barrier``: the copy schedule with one barrier per K/V tile (both
    copies a whole tile ahead) instead of two (V behind Q K^T, the next K behind P V);
    ``group_by_head``: the grid is (query tiles, B, Hq) instead of (Hq, B, query tiles), so
    that blocks launched together are the query tiles of one head and sequence and share
    its K/V tiles in L2 (FlashAttention-2's order); ``kv_stages``: buffers per K and V ring,
    2, or 1 (split schedule only: FlashAttention-2's, which frees the registers that
    address the ring stage)."""

    warps: int = 4
    block_n: int = 64
    warp_rows: int = 16
    q_in_smem: bool = False
    one_barrier: bool = False
    group_by_head: bool = False
    kv_stages: int = 2

    def __post_init__(self):
        if self.kv_stages not in (1, 2) or (self.kv_stages == 1 and self.one_barrier):
            raise ValueError(f"kv_stages must be 2, or 1 with the split schedule (one_barrier=False), got {self}")

    @property
    def block_m(self) -> int:
        return self.warp_rows * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def shared_mem(self, head_dim: int) -> int:
        """sizeof(SharedStorage): the Q tile plus a ring of kv_stages K tiles and one of V."""
        return (self.block_m + 2 * self.kv_stages * self.block_n) * head_dim * 2

    @property
    def name(self) -> str:
        return (f"w{self.warps}_n{self.block_n}" + (f"_r{self.warp_rows}" if self.warp_rows != 16 else "")
                + ("_qs" if self.q_in_smem else "") + ("_1b" if self.one_barrier else "")
                + ("_gh" if self.group_by_head else "") + ("_s1" if self.kv_stages == 1 else ""))

    @property
    def template_args(self) -> str:
        """The Geometry template arguments after the head dim (the -D macro's value)."""
        b = lambda x: "true" if x else "false"
        return (f"{self.warps},{self.block_n},{self.warp_rows},{b(self.q_in_smem)},{b(self.one_barrier)},"
                f"{b(self.group_by_head)},{self.kv_stages}")

    def grid(self, heads_q: int, batch: int, tiles: int) -> tuple[int, int, int]:
        return (tiles, batch, heads_q) if self.group_by_head else (heads_q, batch, tiles)


# THE table of defaults: the tiling each (head dim, causal) kernel is built with (the
# -D macros of flash_attention.cu). The fastest candidates at B=4, S=4096 on an H200
# (fp16) measured so far; scripts/attention-sweep prints the line to change when one of
# the candidates below beats them.
DEFAULT_TILINGS: dict[tuple[int, bool], Tiling] = {
    (64, False): Tiling(4, 64, 32, group_by_head=True, kv_stages=1),
    (64, True): Tiling(4, 64, 32, kv_stages=1),
    (128, False): Tiling(4, 32, 32, q_in_smem=True, one_barrier=True, group_by_head=True),
    (128, True): Tiling(4, 32, 32, q_in_smem=True, one_barrier=True),
}
# The candidates scripts/attention-sweep and scripts/attention-check time against each
# other, causal and not. Entry i of both lists is built together (one module per i).
# FlashAttention-2 tiles d128 as 128 x 64 over 4 warps (Q re-read from shared memory,
# one K and one V buffer) and d64 as 128 x 128; here those exact tiles would spill a few
# bytes (255 registers), so the 32-row-warp candidates are their nearest neighbours
# without spills: 128 x 32 at d128, 128 x 64 at d64.
CANDIDATE_TILINGS: dict[int, tuple[Tiling, ...]] = {
    64: (Tiling(4, 128), Tiling(4, 64), Tiling(4, 128, group_by_head=True), Tiling(4, 64, group_by_head=True),
         Tiling(4, 128, group_by_head=True, kv_stages=1), Tiling(4, 64, 32, group_by_head=True, kv_stages=1),
         Tiling(4, 128, one_barrier=True, group_by_head=True), Tiling(4, 64, 32, kv_stages=1)),
    128: (Tiling(4, 64), Tiling(4, 64, one_barrier=True), Tiling(4, 64, group_by_head=True),
          Tiling(4, 64, group_by_head=True, kv_stages=1), Tiling(4, 64, kv_stages=1),
          Tiling(4, 32, 32, q_in_smem=True, one_barrier=True, group_by_head=True),
          Tiling(4, 64, one_barrier=True, group_by_head=True), Tiling(4, 32, 32, q_in_smem=True, one_barrier=True)),
}


def defines(tilings: dict[tuple[int, bool], Tiling] | None = None) -> tuple[tuple[str, str], ...]:
    """The -D macros for the default tilings, with ``tilings`` overriding some."""
    t = {**DEFAULT_TILINGS, **(tilings or {})}
    return tuple((f"ATTN_D{d}" + ("_CAUSAL" if causal else "") + "_TILING", tiling.template_args)
                 for (d, causal), tiling in sorted(t.items()))


def kernel_name(head_dim: int, dtype: str, causal: bool) -> str:
    return f"flash_attention_d{head_dim}_{DTYPES[dtype]}" + ("_causal" if causal else "")


KERNELS = tuple(kernel_name(d, dt, c) for d in HEAD_DIMS for dt in DTYPES for c in (False, True))


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """Everything about one launch except the pointers: testable without a GPU."""

    kernel: str
    grid: tuple[int, int, int]  # (Hq, B, query tiles), or (query tiles, B, Hq) with Tiling.group_by_head
    block: int
    shared_mem: int
    defines: tuple[tuple[str, str], ...]
    batch: int
    seq_len: int  # tokens per sequence (dense), 0 with cu_seqlens
    max_seqlen: int
    tokens: int
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: str
    causal: bool
    scale: float

    @property
    def scale_log2(self) -> float:
        return self.scale * LOG2E


def plan(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...], dtype: str, *,
         causal: bool = False, varlen: bool = False, batch: int | None = None, max_seqlen: int | None = None,
         scale: float | None = None, tiling: Tiling | None = None) -> AttentionPlan:
    """Check shapes and options and choose the launch, or raise ValueError/TypeError
    saying what to fix. ``varlen``: packed ``[T, H, D]`` inputs with ``batch``
    sequences of at most ``max_seqlen`` tokens."""
    if dtype not in DTYPES:
        raise TypeError(f"attention takes float16 or bfloat16 inputs, got {dtype}: convert them (x.half() / "
                        "x.bfloat16())")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    rank = 3 if varlen else 4
    layout = "[total_tokens, H, D] (packed, with cu_seqlens)" if varlen else "[B, S, H, D]"
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) != rank:
            hint = "" if varlen else " (packed [total_tokens, H, D] inputs need cu_seqlens=)"
            raise ValueError(f"{name} must be {layout}, got shape {tuple(shape)}{hint}")
        if any(int(s) < 1 for s in shape):
            raise ValueError(f"{name} has an empty dimension {tuple(shape)}: nothing to attend to")
    if tuple(k_shape) != tuple(v_shape):
        raise ValueError(f"k and v must have the same shape, got {tuple(k_shape)} and {tuple(v_shape)}")
    head_dim = int(q_shape[-1])
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported: the kernels are built for {HEAD_DIMS}")
    if int(k_shape[-1]) != head_dim:
        raise ValueError(f"q and k must have the same head dim, got {head_dim} and {k_shape[-1]}")
    if tuple(q_shape[:-2]) != tuple(k_shape[:-2]):
        what = "total_tokens" if varlen else "B and S"
        raise ValueError(f"q and k/v must have the same {what} (self-attention), got {tuple(q_shape)} and "
                         f"{tuple(k_shape)}")
    heads_q, heads_kv = int(q_shape[-2]), int(k_shape[-2])
    if heads_q % heads_kv:
        raise ValueError(f"query heads ({heads_q}) must be a multiple of key/value heads ({heads_kv}) "
                         "for grouped-query attention")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not (
            math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if varlen:
        tokens = int(q_shape[0])
        if batch is None or batch < 1:
            raise ValueError("cu_seqlens must hold at least 2 offsets (one sequence)")
        if max_seqlen is None or isinstance(max_seqlen, bool) or not isinstance(max_seqlen, (int, np.integer)) \
                or not 1 <= max_seqlen <= tokens:
            raise ValueError(f"max_seqlen must be an int in 1 .. total_tokens ({tokens}), got {max_seqlen!r}")
        seq_len, max_len = 0, int(max_seqlen)
    else:
        if max_seqlen is not None:
            raise ValueError("max_seqlen goes with cu_seqlens (packed inputs); dense inputs have S = q.shape[1]")
        batch, seq_len = int(q_shape[0]), int(q_shape[1])
        tokens, max_len = batch * seq_len, seq_len
    if tokens >= 2**31:
        raise ValueError(f"{tokens} tokens do not fit the kernel's 32-bit token offsets")
    t = tiling or DEFAULT_TILINGS[head_dim, bool(causal)]
    tiles = -(-max_len // t.block_m)
    grid = t.grid(heads_q, batch, tiles)
    if max(grid[1:]) > MAX_GRID_YZ:
        what = "query heads" if t.group_by_head else "query tiles"
        raise ValueError(f"batch {batch} or {what} {grid[2]} exceed the grid limit {MAX_GRID_YZ}")
    tilings = {(head_dim, bool(causal)): t}
    return AttentionPlan(kernel_name(head_dim, dtype, bool(causal)), grid, t.threads,
                         t.shared_mem(head_dim), defines(tilings), batch, seq_len, max_len, tokens, heads_q,
                         heads_kv, head_dim, dtype, bool(causal), float(scale))


def flops(p: AttentionPlan, seq_lens: list[int] | None = None) -> float:
    """FLOPs of the two matrix products (the FlashAttention convention): 4 * S^2 * D per
    head and sequence, halved when causal. ``seq_lens``: the real lengths of a varlen batch."""
    lens = seq_lens if seq_lens is not None else [p.seq_len] * p.batch
    f = sum(4.0 * s * s * p.head_dim * p.heads_q for s in lens)
    return f / 2 if p.causal else f


# --------------------------------------------------------------------------- NumPy mirror
def online_softmax_reference(scores: np.ndarray, values: np.ndarray, block_n: int, scale: float = 1.0,
                             ) -> np.ndarray:
    """``softmax(scale * scores) @ values`` computed the way the kernel does, in float32:
    key tiles of ``block_n``, a running max ``m`` and sum ``l`` per row in log2 units,
    the accumulator rescaled by ``alpha`` when the max grows, one division at the end.
    ``scores`` (rows x keys) may hold ``-inf`` for masked keys; a row that is masked in
    every tile so far keeps ``m = -inf`` and subtracts 0 (as the kernel does)."""
    s = np.asarray(scores, dtype=np.float32)
    vals = np.asarray(values, dtype=np.float32)
    rows, keys = s.shape
    scale_log2 = np.float32(scale * LOG2E)
    m = np.full(rows, -np.inf, np.float32)
    l = np.zeros(rows, np.float32)
    o = np.zeros((rows, vals.shape[1]), np.float32)
    with np.errstate(invalid="raise", over="raise"):
        for k0 in range(0, keys, block_n):
            tile = s[:, k0:k0 + block_n]
            m_new = np.maximum(m, tile.max(axis=1) * scale_log2)             # m_new = max(m, rowmax(S))
            m_sub = np.where(m_new == -np.inf, np.float32(0), m_new)
            p = np.exp2(tile * scale_log2 - m_sub[:, None])                   # P = exp2(S - m_new)
            alpha = np.exp2(m - m_sub)                                        # alpha = exp2(m - m_new)
            l = alpha * l + p.sum(axis=1)                                     # l = alpha l + rowsum(P)
            o = alpha[:, None] * o + p @ vals[k0:k0 + block_n]                # O = alpha O + P V
            m = m_new
    inv = np.where(l > 0, 1 / np.where(l > 0, l, 1), 0).astype(np.float32)
    return o * inv[:, None]


# --------------------------------------------------------------------------- launch
@functools.lru_cache(maxsize=None)
def _module(arch: str, defs: tuple[tuple[str, str], ...]):
    return compiler.compile_package_kernel(SOURCE, arch=arch, defines=dict(defs))


def module_for(p: AttentionPlan, arch: str):
    """The compiled module of a plan (usable without a GPU: pass ``arch``)."""
    return _module(arch, p.defines)


def _stream_for(stream: Any, ref: Operand):
    from ..cuda.streams import as_core_stream, stream_from_handle

    if stream is not None:
        return as_core_stream(stream)
    handle = current_stream_handle(ref)
    if handle is None:
        raise TypeError("stream is required for fullpipe/other device arrays (torch and cupy inputs default to "
                        "their library's current stream)")
    return stream_from_handle(handle)


def _read_offsets(cu: Any, C: Operand) -> np.ndarray:
    if C.kind == "torch":
        return cu.detach().cpu().numpy()
    if C.kind == "cupy":
        return cu.get()
    raise TypeError("max_seqlen is required when cu_seqlens is not a torch/cupy array")


BACKENDS = ("auto", "hopper", "mma_sync")


def choose_backend(arch: str, head_dim: int, causal: bool, backend: str = "auto") -> str:
    """Which kernel runs: ``"hopper"`` (flash_attention_hopper.cu: TMA + wgmma, warp-
    specialized; sm_90a only) or ``"mma_sync"`` (flash_attention.cu, any sm_80+ GPU).
    ``"auto"`` picks the Hopper kernel on sm_90a for the (head dim, causal) cases where
    it was measured faster (flash_attention_hopper.FASTER_THAN_MMA_SYNC)."""
    from . import flash_attention_hopper as fah

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "hopper" and not fah.supported(arch):
        raise ValueError(f"the Hopper attention kernel needs an sm_90a GPU (H100/H200); this one is {arch}: "
                         "use backend='mma_sync' or 'auto'")
    if backend == "auto":
        fast = fah.supported(arch) and (head_dim, bool(causal)) in fah.FASTER_THAN_MMA_SYNC
        return "hopper" if fast else "mma_sync"
    return backend


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, cu_seqlens: Any = None, max_seqlen: int | None = None,
              scale: float | None = None, out: Any = None, stream: Any = None, backend: str = "auto",
              _tiling: Tiling | None = None, _hopper_build: Any = None) -> Any:
    """Flash attention forward; returns ``out`` (see the module docstring for layouts).

    ``backend``: ``"auto"`` (default; :func:`choose_backend`), ``"hopper"`` or
    ``"mma_sync"`` to force one kernel. ``_tiling`` / ``_hopper_build`` (benchmarks
    only) build the mma.sync kernel with another :class:`Tiling` / the Hopper kernel with
    another flash_attention_hopper.Build."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    Q, K, V = operand(q, "q"), operand(k, "k"), operand(v, "v")
    if not (Q.dtype == K.dtype == V.dtype):
        raise TypeError(f"q, k and v must have the same dtype, got {Q.dtype}, {K.dtype} and {V.dtype}")
    if not (Q.device_index == K.device_index == V.device_index):
        raise ValueError("q, k and v must be on the same GPU")
    varlen = cu_seqlens is not None
    batch = None
    C = None
    if varlen:
        C = operand(cu_seqlens, "cu_seqlens")
        if C.dtype != "int32" or len(C.shape) != 1:
            raise TypeError(f"cu_seqlens must be a 1-D int32 device array [B + 1], got {C.shape} {C.dtype}")
        if C.device_index != Q.device_index:
            raise ValueError("cu_seqlens must be on the same GPU as q")
        batch = C.shape[0] - 1
        if max_seqlen is None and len(Q.shape) == 3:
            offs = _read_offsets(cu_seqlens, C).astype(np.int64)
            if offs[0] != 0 or np.any(np.diff(offs) < 0) or offs[-1] != Q.shape[0]:
                raise ValueError(f"cu_seqlens must start at 0, never decrease and end at total_tokens "
                                 f"({Q.shape[0]}), got {offs[:8].tolist()}{' ...' if len(offs) > 8 else ''}")
            max_seqlen = int(np.diff(offs).max()) if len(offs) > 1 else 0
    p = plan(Q.shape, K.shape, V.shape, Q.dtype, causal=causal, varlen=varlen, batch=batch, max_seqlen=max_seqlen,
             scale=scale, tiling=_tiling)
    s = _stream_for(stream, Q)
    if out is None:
        out, O = empty_like_kind(Q, Q.shape, Q.dtype, s)
    else:
        O = operand(out, "out")
        if O.shape != Q.shape or O.dtype != Q.dtype:
            raise ValueError(f"out must be a {Q.shape} {Q.dtype} array like q, got {O.shape} {O.dtype}")
        if O.device_index != Q.device_index:
            raise ValueError("out must be on the same GPU as q")
    if any(x.ptr % 16 for x in (Q, K, V, O)):
        raise ValueError("q, k, v and out must be 16-byte aligned (a sliced view may not be): copy them")

    arch, sm_count = arch_and_sm_count(Q.device_index)
    if _tiling is not None and backend == "auto":
        backend = "mma_sync"  # a tiling is an option of the mma.sync kernel
    if choose_backend(arch, p.head_dim, p.causal, backend) == "hopper":
        from . import flash_attention_hopper as fah

        hp = fah.plan(p, q_ptr=Q.ptr, k_ptr=K.ptr, v_ptr=V.ptr, o_ptr=O.ptr, build=_hopper_build, sm_count=sm_count)
        fah.launch_plan(hp, O.ptr, C.ptr if C is not None else 0, stream=s, device_index=Q.device_index, arch=arch)
        return out
    kernel = module_for(p, arch).kernel(p.kernel)
    launch(s, kernel, p.grid, p.block, np.uint64(Q.ptr), np.uint64(K.ptr), np.uint64(V.ptr), np.uint64(O.ptr),
           np.uint64(C.ptr if C is not None else 0), np.int32(p.seq_len), np.int32(p.heads_q), np.int32(p.heads_kv),
           np.float32(p.scale_log2), shared_mem=p.shared_mem, device_index=Q.device_index)
    return out


# --------------------------------------------------------------------------- self-test
def _selftest(argv: list[str] | None = None) -> int:
    """Small checked runs of every kernel (for compute-sanitizer); exit 1 on a wrong result.
    ``--candidate I`` (repeatable): also with entry I of CANDIDATE_TILINGS."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.kernels.flash_attention")
    ap.add_argument("--selftest", action="store_true", required=True)
    ap.add_argument("--candidate", type=int, action="append", default=[])
    args = ap.parse_args(argv)
    bad = 0
    for d in HEAD_DIMS:
        for causal in (False, True):
            for tiling in [None] + [CANDIDATE_TILINGS[d][i] for i in args.candidate]:
                bad += _selftest_one(d, causal, tiling)
    return 1 if bad else 0


def _selftest_one(d: int, causal: bool, tiling: Tiling | None) -> int:
    import torch

    bad = 0
    for dt in (torch.float16, torch.bfloat16):
        g = torch.Generator(device="cuda").manual_seed(d + causal)
        # varlen: lengths 1, 70, 33 (partial tiles, a 1-token sequence), 4 query heads over 2 K/V heads
        lens = [1, 70, 33]
        cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
        T = sum(lens)
        q = torch.randn(T, 4, d, device="cuda", generator=g).to(dt)
        k = torch.randn(T, 2, d, device="cuda", generator=g).to(dt)
        v = torch.randn(T, 2, d, device="cuda", generator=g).to(dt)
        o = torch.full_like(q, float("nan"))
        attention(q, k, v, causal=causal, cu_seqlens=cu, max_seqlen=max(lens), out=o, _tiling=tiling)
        torch.cuda.synchronize()
        errs = []
        for b, n in enumerate(lens):
            sl = slice(int(cu[b]), int(cu[b + 1]))
            ref = torch.nn.functional.scaled_dot_product_attention(
                q[sl].float().transpose(0, 1), k[sl].float().repeat_interleave(2, 1).transpose(0, 1),
                v[sl].float().repeat_interleave(2, 1).transpose(0, 1), is_causal=causal).transpose(0, 1)
            errs.append(float((o[sl].float() - ref).norm() / ref.norm()))
        err = max(errs)
        ok = err < 1e-2 and not torch.isnan(o).any()
        bad += not ok
        name = (tiling or DEFAULT_TILINGS[d, causal]).name
        print(f"{'ok ' if ok else 'BAD'} d{d} {dt} causal={causal} {name} varlen {lens} rel err {err:.2e}", flush=True)
    return bad


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())


def candidate_builds() -> list[dict]:
    """The default tilings, then each candidate pair (entry i of CANDIDATE_TILINGS[64] and
    [128], for causal and non-causal kernels alike): one module each, as the CPU tests and
    the tiling sweep compile them."""
    return [dict(DEFAULT_TILINGS)] + [
        {(64, c): t64 for c in (False, True)} | {(128, c): t128 for c in (False, True)}
        for t64, t128 in zip(CANDIDATE_TILINGS[64], CANDIDATE_TILINGS[128])
    ]
