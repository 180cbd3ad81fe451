"""Requests of a prefill batch: checked on the host before any GPU work, then packed.

A request is a 1-D host array of token ids (a NumPy array, or a torch CPU tensor).
:func:`check_requests` sorts a batch into the requests that can be served and a
:class:`RequestError` for each one that cannot, naming its index and what is wrong:

- not a 1-D host integer array (a float array, a GPU tensor, a nested list ...);
- empty (nothing to prefill);
- longer than ``max_context``, the context the KV cache was sized for;
- a token id outside ``0 .. vocab - 1``.

One bad request never fails the batch: the others go on. Only a batch with no
servable request at all raises (:class:`NoValidRequests`, which carries the errors).

:func:`pack` lays the valid requests one after another, the variable-length layout of
fullpipe's attention: the token ids concatenated (int32), ``cu_seqlens`` (the
cumulative offsets, ``[requests + 1]``), ``max_seqlen``, and each request's exact token
count; nothing is padded to the longest request.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from .config import StackConfig


@dataclasses.dataclass(frozen=True)
class RequestError:
    """Why request ``index`` (its position in the batch as given) cannot be served."""

    index: int
    reason: str

    def __str__(self) -> str:
        return f"request {self.index}: {self.reason}"


class NoValidRequests(ValueError):
    """Every request of a batch was refused; ``errors`` says why for each."""

    def __init__(self, errors: list[RequestError]):
        self.errors = errors
        lines = "; ".join(str(e) for e in errors) or "the batch is empty"
        super().__init__(f"no request of the batch can be served: {lines}")


@dataclasses.dataclass(frozen=True)
class CheckedRequest:
    index: int  # position in the batch as given
    tokens: np.ndarray  # int32, 1-D


def _as_host_ints(request: Any) -> tuple[np.ndarray | None, str | None]:
    """The request as a 1-D NumPy integer array, or (None, what is wrong)."""
    if type(request).__module__.split(".")[0] == "torch":
        if getattr(request, "is_cuda", False) or str(getattr(request, "device", "cpu")) != "cpu":
            return None, f"is a tensor on {request.device}; pass token ids as a host array (tensor.cpu())"
        request = request.detach().numpy()
    if hasattr(request, "__cuda_array_interface__"):
        return None, "is a device array; pass token ids as a host array"
    if not isinstance(request, np.ndarray):
        return None, f"must be a NumPy array or torch CPU tensor of token ids, got {type(request).__name__}"
    if request.dtype.kind not in "iu":
        return None, f"token ids must be integers, got dtype {request.dtype}"
    if request.ndim != 1:
        return None, f"must be 1-D (one token id per position), got shape {request.shape}"
    return request, None


def check_requests(requests: Sequence[Any], config: StackConfig) -> tuple[list[CheckedRequest], list[RequestError]]:
    """(servable requests in batch order, one error per refused request). Raises
    :class:`NoValidRequests` only when no request can be served."""
    valid: list[CheckedRequest] = []
    errors: list[RequestError] = []
    for i, request in enumerate(requests):
        arr, problem = _as_host_ints(request)
        if arr is not None:
            if arr.size == 0:
                problem = "is empty: a prompt needs at least one token"
            elif arr.size > config.max_context:
                problem = (f"has {arr.size} tokens, more than the context the KV cache was sized for "
                           f"(max_context={config.max_context})")
            else:
                lo, hi = int(arr.min()), int(arr.max())
                if lo < 0 or hi >= config.vocab:
                    bad = int(np.flatnonzero((arr < 0) | (arr >= config.vocab))[0])
                    problem = (f"token id {int(arr[bad])} at position {bad} is outside the vocabulary "
                               f"0 .. {config.vocab - 1}")
        if problem is not None:
            errors.append(RequestError(i, problem))
        else:
            valid.append(CheckedRequest(i, arr.astype(np.int32)))
    if not valid:
        raise NoValidRequests(errors)
    return valid, errors


@dataclasses.dataclass(frozen=True)
class PackedBatch:
    """Valid requests laid out for one varlen launch (host arrays)."""

    tokens: np.ndarray  # int32 [total_tokens]: the requests' ids one after another
    cu_seqlens: np.ndarray  # int32 [requests + 1]: request r is tokens cu_seqlens[r] .. cu_seqlens[r+1]
    max_seqlen: int
    indices: tuple[int, ...]  # each packed request's position in the batch as given

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.cu_seqlens)

    @property
    def requests(self) -> int:
        return len(self.indices)

    @property
    def total_tokens(self) -> int:
        return int(self.cu_seqlens[-1])

    @property
    def positions(self) -> np.ndarray:
        """Each token's position inside its own request (0 at every request's start)."""
        starts = np.repeat(self.cu_seqlens[:-1], self.lengths)
        return (np.arange(self.total_tokens, dtype=np.int64) - starts).astype(np.int32)

    @property
    def last_token(self) -> np.ndarray:
        """The packed index of each request's last token (whose logits prefill returns)."""
        return (self.cu_seqlens[1:] - 1).astype(np.int64)


def pack(valid: Sequence[CheckedRequest]) -> PackedBatch:
    if not valid:
        raise ValueError("nothing to pack: no valid request")
    lengths = np.array([r.tokens.size for r in valid], dtype=np.int64)
    cu = np.zeros(len(valid) + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu[1:])
    if cu[-1] >= 2**31:
        raise ValueError(f"{int(cu[-1])} tokens in one batch do not fit 32-bit offsets: split the batch")
    tokens = np.concatenate([r.tokens for r in valid]).astype(np.int32)
    return PackedBatch(tokens, cu.astype(np.int32), int(lengths.max()), tuple(r.index for r in valid))


def check_and_pack(requests: Sequence[Any], config: StackConfig) -> tuple[PackedBatch, list[RequestError]]:
    valid, errors = check_requests(requests, config)
    return pack(valid), errors
