"""The two levels together: a decoder-only transformer stack (LLM-style) built from
fullpipe's kernels, serving variable-length requests.

- config.py      :class:`StackConfig`, its checks and derived sizes
- requests.py    checking a batch of requests before any GPU work; packing the valid ones
- memory.py      the prefill scratch plan and the KV-cache plan (pure functions)
- weights.py     random weights from a seed (PyTorch tensors)
- elementwise.py RMSNorm, RoPE, SwiGLU in PyTorch (fullpipe has no kernels for them)
- decoder.py     :class:`DecoderStack`: prefill on fullpipe's attention and Hopper GEMM (or a slice of its layers)
- stages.py      :class:`StagedStack`: the stack split over the GPUs of one host, fill-drain micro-batches
- pipelined.py   :class:`PipelinedPrefill`: prefill micro-batches through the level-1 StreamPipeline
- kv_cache.py    :class:`PagedKVCache`: the KV cache in pages from the pool, a page table on the GPU
- decode.py      :class:`Decoder`: greedy decode, CUDA-graph steps, layer groups on streams
- reference.py   :func:`reference_prefill`: the same stack in plain PyTorch, per request
- torch_decode.py :class:`TorchDecoder`: decode in plain PyTorch (the peers: eager, static cache, torch.compile)

PyTorch is needed for weights, the stack and the reference, not to import this package.
"""

from .config import StackConfig
from .decode import DecodeResult, Decoder, DecodeSession
from .decoder import DecoderStack, MatmulChoice, PrefillResult, SliceRun, choose_matmul, slice_weight_names
from .memory import KVCachePlan, ScratchPlan, kv_cache_plan, packed_scratch_bytes, padded_scratch_bytes, scratch_plan
from .kv_cache import PagedKVCache
from .pipelined import PipelinedPrefill, PipelinedResult
from .reference import reference_prefill
from .requests import NoValidRequests, PackedBatch, RequestError, check_and_pack, check_requests, pack
from .stages import (StackStageFactory, StagedResult, StagedStack, pack_microbatches, plan_microbatches,
                     stage_split)
from .torch_decode import TorchDecoder
from .weights import init_weights

__all__ = ["DecodeResult", "DecodeSession", "Decoder", "PagedKVCache", "PipelinedPrefill", "PipelinedResult",
           "TorchDecoder", "DecoderStack", "KVCachePlan", "MatmulChoice", "NoValidRequests", "PackedBatch", "PrefillResult",
           "RequestError", "ScratchPlan", "StackConfig", "check_and_pack", "check_requests", "choose_matmul",
           "init_weights", "kv_cache_plan", "pack", "packed_scratch_bytes", "padded_scratch_bytes",
           "pack_microbatches", "plan_microbatches", "reference_prefill", "scratch_plan", "slice_weight_names", "stage_split",
           "SliceRun", "StackStageFactory", "StagedResult", "StagedStack"]
