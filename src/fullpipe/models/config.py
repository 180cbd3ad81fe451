"""The shape of a decoder-only transformer stack, checked once, with its derived sizes.

    cfg = StackConfig()                       # 12 layers, width 2048, 16 heads of 128, SwiGLU
    cfg = StackConfig(layers=2, width=512, heads=4, kv_heads=4, ffn_width=1536, vocab=1024)

Every layer: RMSNorm -> Q, K, V projections -> RoPE -> causal attention (grouped K/V
heads: ``heads`` query heads share ``kv_heads`` K/V heads) -> output projection ->
residual -> RMSNorm -> SwiGLU FFN (``silu(x W_gate) * (x W_up)`` then ``W_down``) ->
residual. Then a final RMSNorm and the LM head (untied from the embedding).

Weights are stored ``[in, out]`` row-major, the (K, N) operand of ``x @ W`` that
fullpipe's Hopper GEMM takes; Q, K and V are one ``[width, (heads + 2 kv_heads) *
head_dim]`` matrix and the gate and up projections one ``[width, 2 ffn_width]`` matrix,
so each is one GEMM.
"""

from __future__ import annotations

import dataclasses

HEAD_DIMS = (64, 128)  # what fullpipe's attention kernels are built for
DTYPES = {"bfloat16": 2, "float16": 2}  # bytes per element


@dataclasses.dataclass(frozen=True)
class StackConfig:
    layers: int = 12
    width: int = 2048
    heads: int = 16
    kv_heads: int = 16
    head_dim: int = 128
    ffn_width: int = 5632  # SwiGLU's 8/3 * width, rounded up to a multiple of 256 (as Llama does)
    vocab: int = 32000
    max_context: int = 4096  # tokens per request the KV cache is sized for
    dtype: str = "bfloat16"
    norm_eps: float = 1e-5
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("layers", "width", "heads", "kv_heads", "head_dim", "ffn_width", "vocab", "max_context"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.head_dim not in HEAD_DIMS:
            raise ValueError(f"head_dim must be one of {HEAD_DIMS} (fullpipe's attention kernels), got {self.head_dim}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}) "
                             "for grouped-query attention")
        if self.heads * self.head_dim != self.width:
            raise ValueError(f"width ({self.width}) must equal heads * head_dim ({self.heads} * {self.head_dim} = "
                             f"{self.heads * self.head_dim})")
        for name in ("width", "ffn_width"):
            if getattr(self, name) % 8:
                raise ValueError(f"{name} must be a multiple of 8 (rows of 16 bytes, which the GEMM's TMA needs), "
                                 f"got {getattr(self, name)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name in ("norm_eps", "rope_base"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.rope_base <= 1:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base}")

    # ------------------------------------------------------------------ derived sizes
    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def qkv_width(self) -> int:
        """Columns of the fused Q, K, V projection."""
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def kv_width(self) -> int:
        """Columns of K (and of V) per token: kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight tensor by name (``layers.{i}.`` ones once per layer), ``[in, out]``."""
        shapes: dict[str, tuple[int, ...]] = {"embedding": (self.vocab, self.width)}
        for i in range(self.layers):
            p = f"layers.{i}."
            shapes[p + "attn_norm"] = (self.width,)
            shapes[p + "wqkv"] = (self.width, self.qkv_width)
            shapes[p + "wo"] = (self.heads * self.head_dim, self.width)
            shapes[p + "ffn_norm"] = (self.width,)
            shapes[p + "w_gate_up"] = (self.width, 2 * self.ffn_width)
            shapes[p + "w_down"] = (self.ffn_width, self.width)
        shapes["final_norm"] = (self.width,)
        shapes["lm_head"] = (self.width, self.vocab)
        return shapes

    @property
    def parameters(self) -> int:
        total = 0
        for shape in self.weight_shapes().values():
            n = 1
            for s in shape:
                n *= s
            total += n
        return total

    @property
    def parameter_bytes(self) -> int:
        return self.parameters * self.element_bytes

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        """One token's K and V in one layer."""
        return 2 * self.kv_width * self.element_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """One token's K and V in every layer: what the cache grows by per generated token."""
        return self.layers * self.kv_bytes_per_token_per_layer
