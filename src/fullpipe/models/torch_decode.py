"""Greedy decode in plain PyTorch: the peers of fullpipe's :class:`~.decode.Decoder`.

    peer = TorchDecoder(config, weights, prompts, capacity=max(lengths) + steps, cache="dynamic")
    first = peer.first_tokens                   # argmax of each prompt's last logits
    logits = peer.step(tokens)                  # one token per sequence -> [sequences, vocab]

The same stack as :mod:`.reference` (``torch.matmul``, SDPA, the PyTorch elementwise
functions, the same weights), batched over the sequences, one query token each:

- ``cache="dynamic"``: each layer's K and V are ``[sequences, kv_heads, L, head_dim]``,
  grown by ``torch.cat`` every step (Hugging Face's ``DynamicCache``); prompts of
  different lengths are padded on the right and masked. This is the "PyTorch eager" peer.
- ``cache="static"``: ``[sequences, kv_heads, capacity, head_dim]`` allocated once and
  written in place at each sequence's position, with a mask of the filled slots: the
  form CUDA graphs and ``torch.compile(mode="reduce-overhead")`` need (``compile=True``
  compiles :meth:`step` so; ``graph()`` captures it by hand: PyTorch kernels, one CUDA
  graph per step, the decode's "level 1 only" row).

The prompts' K and V come from the reference's per-request forward
(:func:`.reference.forward_request`), which also returns them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .config import StackConfig
from .elementwise import rms_norm
from .reference import forward_request, run_layers

CACHES = ("dynamic", "static")


class TorchDecoder:
    def __init__(self, config: StackConfig, weights: dict[str, Any], prompts: Sequence[Any], *,
                 capacity: int, cache: str = "dynamic", compile: bool = False, dtype: Any = None):
        """``prompts``: valid host arrays of token ids (checked by the caller). ``capacity``:
        the most tokens a sequence may reach (prompt + generated); the static cache is
        allocated for it. ``dtype``: the compute dtype (default the config's)."""
        import torch

        if cache not in CACHES:
            raise ValueError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
        if compile and cache != "static":
            raise ValueError("compile=True needs cache='static' (torch.compile's CUDA graphs need fixed shapes)")
        c = config
        self.config, self.cache = c, cache
        dt = dtype or getattr(torch, c.dtype)
        self.W = {name: w.to(dt) for name, w in weights.items()}
        self.device = self.W["embedding"].device
        lengths = [int(np.asarray(p).size) for p in prompts]
        if max(lengths) >= capacity:
            raise ValueError(f"capacity ({capacity}) must exceed the longest prompt ({max(lengths)})")
        self.sequences, self.capacity = len(lengths), capacity
        self._longest = max(lengths)  # tokens of the longest sequence, tracked on the host
        B, hkv, d = self.sequences, c.kv_heads, c.head_dim
        width = capacity if cache == "static" else max(lengths)
        self.k = [torch.zeros((B, hkv, width, d), dtype=dt, device=self.device) for _ in range(c.layers)]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.filled = torch.zeros((B, width), dtype=torch.bool, device=self.device)  # slots holding a token
        logits = []
        for b, prompt in enumerate(prompts):
            ids = torch.as_tensor(np.asarray(prompt, dtype=np.int64), device=self.device)
            lg, kv = forward_request(c, self.W, ids)
            logits.append(lg)
            n = ids.numel()
            for i, (k, v) in enumerate(kv):
                self.k[i][b, :, :n] = k.transpose(0, 1)
                self.v[i][b, :, :n] = v.transpose(0, 1)
            self.filled[b, :n] = True
        self.prefill_logits = torch.cat(logits)
        self.first_tokens = self.prefill_logits.argmax(dim=-1)
        self.positions = torch.tensor(lengths, dtype=torch.int64, device=self.device)  # of the next token
        self._after_prefill = (self.positions.clone(), width)
        self._rows = torch.arange(B, device=self.device)
        self._slots = torch.arange(capacity, device=self.device)
        if cache == "static":
            for t in self.k + self.v + [self.positions]:
                torch._dynamo.mark_static_address(t)
        self.compiled = compile
        self._step = torch.compile(self._static_step, mode="reduce-overhead", fullgraph=True) if compile \
            else (self._static_step if cache == "static" else self._dynamic_step)

    def restart(self) -> None:
        """Back to the state right after the prefill, on the same tensors (a compiled step
        and a captured graph stay valid): the positions go back; the static cache's slots
        after the prompts are simply written again, the dynamic cache is cut back."""
        positions, width = self._after_prefill
        self.positions.copy_(positions)
        self._longest = int(positions.max())
        if self.cache == "dynamic":
            self.k = [k[:, :, :width] for k in self.k]
            self.v = [v[:, :, :width] for v in self.v]
            self.filled = self.filled[:, :width]

    def step(self, tokens: Any) -> Any:
        """Logits ``[sequences, vocab]`` after feeding ``tokens`` (int64 ``[sequences]`` on
        the device, one per sequence, at each sequence's next position); the cache and the
        positions advance by one."""
        import torch

        if self._longest >= self.capacity:
            raise ValueError(f"a sequence would pass the cache's capacity of {self.capacity} tokens")
        self._longest += 1
        if self.compiled:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's logits are not read again
        return self._step(tokens, self.positions)

    def graph(self, tokens: Any) -> Any:
        """Capture :meth:`step` on the static cache into a CUDA graph reading ``tokens``
        (a static int64 ``[sequences]`` tensor the caller refills); returns (graph,
        logits): each ``graph.replay()`` is one step, the positions advance inside it."""
        import torch

        if self.cache != "static":
            raise ValueError("a CUDA graph needs cache='static'")
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm up cuBLAS and the allocator outside the capture
            self._static_step(tokens, self.positions.clone(), advance=False)
        torch.cuda.current_stream(self.device).wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            logits = self._static_step(tokens, self.positions)
        return g, logits

    # ------------------------------------------------------------------ the two steps
    def _layers(self, x: Any, positions: Any, attend: Any) -> Any:
        x = run_layers(self.config, self.W, x, positions, attend)
        return rms_norm(x, self.W["final_norm"], self.config.norm_eps) @ self.W["lm_head"]

    def _sdpa(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        import torch

        rep = self.config.heads // self.config.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = torch.nn.functional.scaled_dot_product_attention(q[:, :, None, :], k, v, attn_mask=mask[:, None, None, :])
        return o[:, :, 0, :]

    def _static_step(self, tokens: Any, positions: Any, advance: bool = True) -> Any:
        x = self.W["embedding"][tokens]
        mask = self._slots[None, :] <= positions[:, None]  # [B, capacity]

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            self.k[i][self._rows, :, positions] = k
            self.v[i][self._rows, :, positions] = v
            return self._sdpa(q, self.k[i], self.v[i], mask)

        logits = self._layers(x, positions, attend)
        if advance:
            positions.add_(1)
        return logits

    def _dynamic_step(self, tokens: Any, positions: Any) -> Any:
        import torch

        x = self.W["embedding"][tokens]
        self.filled = torch.cat([self.filled, self.filled.new_ones((self.sequences, 1))], dim=1)

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            self.k[i] = torch.cat([self.k[i], k[:, :, None, :]], dim=2)
            self.v[i] = torch.cat([self.v[i], v[:, :, None, :]], dim=2)
            return self._sdpa(q, self.k[i], self.v[i], self.filled)

        logits = self._layers(x, positions, attend)
        positions.add_(1)
        return logits
