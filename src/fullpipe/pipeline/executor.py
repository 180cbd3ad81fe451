"""The level-1 stream pipeline: host batches through H2D -> compute -> D2H on N
non-blocking streams, so that both copy engines and the SMs work at once.

The host-driver pattern, for batch j on stream ``j % N``::

    buf = lane buffer of stream s            # one per lane and run, from the pool (lanes.py)
    H2D(buf.in <- host slot or pinned input, s)
    [release the input slot when the stream gets here: host function or event]
    compute(s, x, y)                         # user callable or a fullpipe kernel
    D2H(host slot or pinned output <- buf.out, s)
    [tell the drain thread the output slot is ready]

With ``copy_streams=True`` (a batch's steps on three streams) and in graph
captures, each batch instead allocates from the stream-ordered pool and frees in
stream order (protocol.py).

All of it is enqueued without waiting. The enqueue order interleaves batches: the
first half of batch j+1 .. j+prefetch (allocate, H2D) goes in before the second half
of batch j (compute, D2H, free), so the next copies are in flight while the host is
inside the compute call of batch j (a framework model's Python launches). A tensor
function's calls go a group at a time instead (one batch per stream: the group's
fronts, its calls back to back, then its back halves; _call_group says why).
Nothing inside the loop synchronizes a stream or the device; the only waits are
the CPU staging threads waiting for "slot free" flags raised by the GPU, and one
wait at the end. The sequence above is written once, in protocol.py, and used
as is by every mode: plain streams, copy_streams (other streams per step, joined
by events) and graph=True (graphs.py captures it once per shape and launches it
as one cuGraphLaunch per batch). See staging.py (the ring and its signals),
pageable.py (CPU threads for pageable arrays), tuning.py (chunk="auto"), stats.py
(what a run did).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import functools
import itertools
import math
import threading
import time
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..cuda import driver as drv
from ..cuda.device import ensure_current
from ..cuda.hotpath import HotPath, handle_int
from ..cuda.interop import HostKind, host_view, host_views, like_input
from ..cuda.memory import DeviceArray, free_collected, is_pinned
from ..cuda.pin_cache import WHOLE_MAX_RATIO, default_pin_cache
from ..cuda.timing import median
from ..cuda.pinned_pool import PinnedPoolFull, PinnedUsage, default_pinned_pool
from . import plan as P
from . import pageable
from .pageable import (HostCopier, InlineInputStager, InlineOutputDrainer, InputStager, OutputDrainer,
                       default_copy_threads, short_switch_interval)
from . import bulk as bulk_staging
from .bulk import BulkStaging, DeviceInputs
from .graphs import BatchGraphs, GraphRun
from .run_graphs import RunGraphs
from .lanes import LaneBuffers
from .stats import BatchTiming, PipelineStats, busy_from_timings
from ..trace import nvtx
from .staging import SlotRing, check_recycle, make_signal
from .protocol import DEVICE_ALIGN, DeferredFree, Protocol, Route, protocol_halves
from . import compute_threads as ct
from . import records
from .list_paths import PIPELINED, PLAIN, THREADS, ListPaths, list_key
from .plain import (LONG_LIST_MAX_BYTES, PLAIN_MAX_BYTES, SMALL_LIST_MAX_BATCHES, numpy_cannot_hold, out_mismatch,
                    plain_stats, run_plain, run_small, run_small_list, small_batches)
from . import imap as imap_windows
from .tensors import (NEW_SHAPE_COSTLY_S, ComputeSharesOutput, TensorCompute, TorchGraphs, compute_form,
                      make_framework, tensor_framework)
from .tuning import (HOST_STAGES, ChunkChoice, StageModel, choose_chunk, chunk_rows,
                     even_split_choice, even_split_rows, fit_stage, parse_chunk, probe_rows)


class PipelineWarning(UserWarning):
    """A run that will work but probably not as meant (e.g. fewer batches than streams)."""

STAGING_MODES = ("auto", "ring", "direct")

ComputeFn = Callable[[Any, DeviceArray, "DeviceArray | None"], Any]


class StreamPipeline:
    """Push host arrays through H2D -> compute -> D2H on ``streams`` non-blocking streams.

    >>> pipe = StreamPipeline(model, streams=3)       # a torch model: y = model(x)
    >>> y = pipe.run(x)                  # one array or tensor, cut into chunks along axis 0
    >>> ys = pipe.run_batches([a, b, c])  # a sequence of batches (sizes may differ)
    >>> print(pipe.stats)

    Inputs: NumPy arrays, torch CPU tensors (pinned or not) and buffer-protocol
    objects, C-contiguous; outputs come back as the kind of the input (a torch
    tensor for a torch input, else a NumPy array), pinned when the input is.

    The compute, in one of two forms (``form=``, see below):

    - a **tensor function** ``y = f(x)`` (a ``torch.nn.Module``, a function of torch
      tensors, or of CuPy arrays): ``f`` gets the batch as a CUDA tensor (a zero-copy
      view of fullpipe's device buffer) with the batch's stream current (``with
      torch.cuda.stream(...)``, made once per pipeline stream), and returns ``y`` with
      one row per input row; ``y`` is copied to the host straight from its own memory
      (no device copy). The output's row shape and dtype are those of the first
      batch's ``y``. A function that writes the same device memory in every call (an
      output buffer it returns again; torch.compile's CUDA graphs) is seen and then
      called serially, each output copied once on the device (a warning,
      ``stats.compute_serial``). See :mod:`fullpipe.pipeline.tensors`.
    - ``compute(stream, x, y)`` (the "stream" form): it gets the cuda.core ``Stream``
      (it has ``__cuda_stream__``) and :class:`~fullpipe.cuda.memory.DeviceArray`
      views of the batch's input and output (``__cuda_array_interface__``), must
      enqueue its work on that stream and write ``y`` (None with ``output=None``). The
      views are valid only for work enqueued during the call. ``compute=None`` copies
      the input back (``y`` is ``x``).

    Options:

    - ``form``: ``"auto"`` (default): a ``torch.nn.Module`` or a callable of exactly one
      positional argument is a tensor function, one of three is the stream form; a
      signature that cannot be read (``torch.sin``) or ``*args`` after at most one named
      parameter (a decorator's wrapper) is a tensor function too; anything else (two
      required arguments, named parameters that fit both, a required keyword) is refused
      with a TypeError asking for ``form=``. ``"torch"``/``"cupy"``: a tensor function of
      that library. ``"stream"``. With ``"auto"``, a tensor function's library is torch
      for a Module or a torch input, the function's own for ``torch.*``/``cupy.*``
      functions, else PyTorch when it is imported (CuPy imported by another library does
      not change that), else CuPy; pass ``form="cupy"`` for a CuPy function of your own
      while PyTorch is imported.
    - ``streams``: N >= 1 streams, batches round-robin over them.
    - ``prefetch``: how many later batches have their H2D enqueued before this batch's
      compute is called (default: ``streams - 1``, at most ``slots - 1`` for pageable
      input; 0 for ``synchronous`` and graph=True with the stream form). The host's
      time in the compute call (a model's Python) then overlaps the next copies. A
      tensor function's calls go one batch per stream (at most 4, at most ``prefetch``
      + 1 where it is set) back to back, after their group's H2Ds (``stats.call_group``).
    - ``copy_streams``: False (default): each batch's copies and compute go on its own
      stream. True: every H2D goes on one copy stream and every D2H on another, with
      compute round-robin over the N streams, joined by events (two records and two
      waits more per batch). A copy engine then sees its copies back to back in one
      queue instead of N streams' queues; on an H200 the CUPTI trace of the plain
      layout shows 8-17 us idle gaps between copies of different streams, and this
      layout reaches 0.96-0.99x the copy bound instead of 0.90-0.94x (overlap
      experiment). Stage times in the stats then include queueing behind the
      previous batch's copy or compute.
    - ``chunk``: for :meth:`run`: ``"auto"`` (default; tuned once per kind of work and
      reused, see :mod:`fullpipe.pipeline.tuning` and :meth:`retune`), a row count
      (an int, or ``"256 rows"``), or a size in bytes as a string (``"8MiB"``,
      ``"64 MB"``). An int is always rows; a run with fewer batches than streams
      warns (:class:`PipelineWarning`).
    - ``slots``: K pinned slots each way in the staging ring used for pageable arrays.
    - ``recycle``: how a slot comes back: ``"hostfn"`` (a native host function posts a
      semaphore), ``"pyhostfn"`` (a Python host function), ``"event"``.
    - ``staging``: ``"auto"`` (pinned arrays are copied directly; pageable ones through
      the ring, or, for a run of small batches (each at most 1 MiB, at most 64 MiB in
      all per side), in bulk: the whole input copied into one pinned block ahead of
      the batches that read it and the outputs copied out of one as their batches
      finish, with no slot or signal per batch: see :mod:`fullpipe.pipeline.bulk`; ``stats.staging`` says
      which), ``"ring"`` (always the ring), ``"direct"`` (hand every array to
      cuMemcpyAsync as is: pageable memory then blocks; a baseline for experiments).
    - ``pin_in_place``: True (default), with ``staging="auto"``: a pageable array of at
      least 64 MiB that :meth:`run` sees a second time (same memory: a loop over the
      same input or output buffer) is page-locked where it is (``cuMemHostRegister``,
      once) and from then on copied directly, with no staging memmove: the process-wide
      pin-down cache, :mod:`fullpipe.cuda.pin_cache` (it keeps the array's memory
      alive while registered and lets it go within about a second after nobody else
      holds it). ``stats.staging`` says "pinned in place"; ``stats.pinned["in_place"]``
      what it cost. The new outputs of such an input stay pageable (staged) until it has
      come back for ``PINNED_OUTPUTS_AFTER_RUNS`` (16) runs in place, and are pinned from
      the pinned pool after (the D2H straight in: 3-4x faster steady runs, for two outputs'
      worth of pinned memory; ``_Pins.pinned_outputs``). False: never.
    - ``pad_shapes``: run a tensor function's batch at a batch shape it has been called
      with: the batch's rows, then copies of them (in its lane's buffer after it, or a new
      tensor on its stream), and only its own rows of ``y`` come back. A framework model can
      pay seconds for each new batch shape (cuDNN plans: 3 s for a torchvision
      mobilenet_v3_large in fp16 on an H100; torch.compile recompiles). :meth:`run` cuts its
      input into chunks of equal rows and a shorter last one, a shape of its own (another for
      each length of input): padded, it runs at the chunk's rows. In :meth:`run_batches` and
      :meth:`imap` a batch of a new shape runs at the fewest rows of a seen shape with the
      same row shape, at most twice its own. Padding needs each output row to depend only on
      its own input row, as cutting the input into chunks does anyway. ``"auto"`` (default):
      only where a new shape costs the compute at least ``NEW_SHAPE_COSTLY_S`` (0.25 s; what
      chunk="auto"'s probes measured, or the calls so far: a shape's first call over its
      second; where no shape has come twice and new shapes' calls are that slow, one
      batch runs at a shape called once to find out) or, for :meth:`run`'s last chunk with
      chunk="auto" from its second run on, ``SHAPE_COST_SHARE`` (a tenth) of the last
      run's wall time, and per shape only until the
      padding's cost (the rows added at the compute's GPU time per row, from timed runs)
      adds up to one new shape's: then it runs at its own shape once, a shape seen from
      then on (TensorCompute.pays_to_pad).
      ``True``: always where a seen shape fits (the last chunk of every run; a model you know
      to be slow at new shapes); ``False``: never. ``stats.padded`` says what a run padded.
    - ``output``: ``"same"`` (default: like the input for the stream form, like ``y``
      for a tensor function), ``None`` (no output), or ``(row_shape, dtype)``.
    - ``pinned_pool``: the :class:`~fullpipe.cuda.pinned_pool.PinnedPool` the ring's
      slots and the outputs of pinned inputs come from (default: the process-wide
      ``default_pinned_pool()``). ``stats.pinned`` says what a run pinned.
    - ``timing``: per-stage stats from four events per timed batch. ``"sampled"``
      (default): the first ``2 x streams`` batches of a run and then every
      ``TIMING_STRIDE``-th (8th, or the next stride that shares no factor with the
      stream count, so every lane is sampled: 9th on 2, 4 or 8 streams, 11th on 6) and
      the last ``2 x streams`` are timed, and ``stats.busy_ms`` (and the bound,
      overlap and stage rates made from it) are estimates scaled from them
      (``stats.timed_batches`` says how many). ``True``: every batch, exact. ``False``:
      none. Timing every batch made a host-bound encoder layer 4-17 % slower than the
      sampled default on a slow H100 host (its compute calls got slower too, not just the
      event calls; session 13).
    - ``synchronous``: wait for each batch before the next (the serial baseline).
    - ``pool``: a :class:`~fullpipe.DevicePool` (one is made if not given).
    - ``graph``: False (default). True, stream form: the per-batch sequence (allocate,
      H2D, slot signal, compute, D2H, signal, free) is captured once into a CUDA graph
      per lane and batch shape, and each later batch of that shape is one
      ``cuGraphLaunch`` (ring staging; direct staging adds two memcpy-node updates)
      instead of five to seven driver calls. See :mod:`fullpipe.pipeline.graphs`.
      Consequences: ``compute`` is called only when a graph is captured (once per slot
      or stream and shape), with the stream being captured: it must enqueue only
      capturable work (no synchronization; a failed capture raises
      ``GraphCaptureError``, a ValueError) and whatever it reads when called is frozen
      into the graph (:meth:`reset_graphs` after changing e.g. ``MixKernel.rounds``).
      ``timing`` is treated as False (a graph's nodes are fixed: no per-batch stage
      events; no ``busy_ms``). The device buffers are graph memory, not ``pool`` memory
      (the pool's usage does not move; :meth:`close` gives the graph memory back). At
      most 64 graphs are cached; batches of further new shapes run without a graph.
      ``stats.graph`` says how many batches were launched, captured, or fell back.
      A run with pinned arrays on both sides that repeats an earlier one (the same
      batches, host addresses and compute: a loop that refills the same buffers) is
      captured whole the second time and replayed as ONE launch from the third
      (:mod:`fullpipe.pipeline.run_graphs`; ``stats.graph["run_graph"]``); its graph
      holds about a batch of device memory per stream while cached (at most 4 runs).
      ``graph="batch"``: per-batch graphs only, never a whole run.
      Not combined with ``copy_streams=True`` or ``staging="direct"`` yet.
      True, PyTorch tensor function: the compute alone is captured with PyTorch's
      own ``torch.cuda.CUDAGraph`` (one graph per stream and input shape, static input
      and output tensors; :class:`~fullpipe.pipeline.tensors.TorchGraphs`); copies,
      allocation and prefetch stay as without graphs, per-stage timing included. The
      same failure guarantees; ``f`` runs once eagerly per stream and shape before its
      capture (warm-up). Not available for CuPy tensor functions.
    - ``compute_threads``: ``"auto"`` (default), or 1 to ``streams`` (at most 8): how many
      host threads call the compute, each batch's call on one of them in turn (the calls of
      a run never on the enqueueing thread then; :mod:`fullpipe.pipeline.compute_threads`). ``"auto"``
      is 1, except for a long list (``run_batches``, more than 16 batches) through a PyTorch
      tensor function whose calls set the pace: its first runs measure the calls on
      ``min(3, streams)`` threads too, and keep them unless they were slower
      (``stats.list_path``; pipeline/list_paths.py). Not where the calling thread holds
      PyTorch state the threads would not see (``with torch.device(...)``, a torch function
      mode, torch.compile's CUDA graphs), nor for in-place lists; a run whose call fails on
      the threads runs again on the calling thread (its first batches called twice): if it
      goes through there, with a warning, and the pipeline's calls stay there until
      ``retune()``. ``compute_threads=1``: never on threads. For a PyTorch
      model whose Python call takes about as long as its GPU work or longer, and whose
      call's time is mostly inside PyTorch's operators, which let the GIL go (an
      encoder layer: one fused operator): on H100 hosts where such a layer's call was
      slower than its GPU work, 3 threads took it from 0.67-0.88x to 0.99-1.24x compute
      alone (one thread, device-resident; session 18). Not for calls that are mostly
      Python (many small operators: they take turns on the GIL, and ran 0.6-1.1x as
      fast on 2 threads, 0.6-0.9x on 3). Calls on threads run on threads kept for the
      process (a tensor function's in the caller's autograd and autocast modes; not in
      other per-thread state such as ``with torch.device(...)``), at most one per stream
      at a time, and not in batch order: a compute must not rely on Python state shared
      between calls (a counter, a list it fills in order). PyTorch caches cuDNN plans
      per thread: a model with cuDNN attention over many shapes builds each shape's
      plan on every thread, tens of ms each, so its first runs are much slower (a
      2-layer encoder over 92 shapes: 4.3 s against 0.17 s on one thread, session 18).
      Not with torch.compile(mode="reduce-overhead" or "max-autotune"): PyTorch keeps
      their CUDA graphs per thread, and the first call on a thread fails (with a note
      that says so); nor with graph=True.
      ``stats.compute_threads`` says how many ran and how long the enqueueing thread
      waited for them; the host-bound hint says when they might help. A
      ``compute(stream, x, y)`` is called with the device's context current.

    On an exception in compute, a CUDA error, or Ctrl-C, the run drains what is in
    flight, frees every device allocation it made, gives back the ring, and re-raises
    the exception with a note naming the batch (also as ``exc.batch_index``).

    Threads: a pipeline may be made in one thread and run in another (each run makes
    the device's context current in the calling thread); one run at a time per
    pipeline: use one pipeline per thread (they may share ``pool`` and the pinned
    pool).
    """

    def __init__(
        self,
        compute: ComputeFn | Callable[[Any], Any] | None = None,
        *,
        form: str = "auto",
        streams: int = 3,
        chunk: int | str = "auto",
        slots: int = 4,
        recycle: str = "hostfn",
        staging: str = "auto",
        output: Any = "same",
        timing: bool | str = "sampled",
        synchronous: bool = False,
        copy_streams: bool = False,
        pool: Any = None,
        device: Any = None,
        copy_threads: int | None = None,
        graph: bool = False,
        prefetch: int | None = None,
        pinned_pool: Any = None,
        pin_in_place: bool = True,
        compute_threads: int | str = "auto",
        pad_shapes: bool | str = "auto",
    ):
        self.form = compute_form(compute, form)  # "none", "stream" or "tensor"
        self._form_option = form
        self.compute = compute
        self.n_streams = P.check_positive_int(streams, "streams", "use 1 for a single stream")
        self.chunk = parse_chunk(chunk)
        self.slots = P.check_positive_int(slots, "slots", "the ring needs at least one pinned slot")
        self.recycle = check_recycle(recycle)
        if staging not in STAGING_MODES:
            raise ValueError(f"staging must be one of {STAGING_MODES}, got {staging!r}")
        self.staging = staging
        self.output = P.parse_output(output)
        if compute is None and (self.output.row_shape is not None or self.output.dtype is not None):
            raise ValueError("compute=None copies the input back unchanged: output must be 'same' or None")
        if not (isinstance(timing, bool) or timing == "sampled"):
            raise TypeError(f"timing must be True, False or 'sampled', got {timing!r}")
        self.timing = timing
        self.synchronous = bool(synchronous)
        self.copy_streams = bool(copy_streams)
        if not (isinstance(graph, bool) or graph == "batch"):
            raise TypeError(f"graph must be True, False or 'batch', got {graph!r}")
        if graph and self.copy_streams:
            raise ValueError(
                "graph=True and copy_streams=True are not combined yet: copy_streams spreads each batch over "
                "three streams joined by events and frees its buffer batches later on another stream, while "
                "a per-batch graph is one launch on one stream. Use one of the two.")
        if graph and staging == "direct" and self.form != "tensor":
            raise ValueError(
                "graph=True with staging='direct' is not supported: that mode hands pageable arrays to "
                "cuMemcpyAsync as is, which a graph's memcpy node cannot hold. Use staging='auto' (pinned "
                "arrays are copied directly, pageable ones through the ring) or 'ring'.")
        if graph and form == "cupy":
            raise ValueError("graph=True is not available for a CuPy tensor function (PyTorch only); "
                             "use graph=False, or a compute(stream, x, y) that launches capturable work")
        if self.form == "tensor" and form == "cupy" and self.copy_streams:
            raise ValueError("copy_streams=True is not supported with a CuPy tensor function: CuPy cannot be "
                             "told that the D2H stream still reads the output. Use copy_streams=False.")
        self.graph = graph
        if prefetch is not None:
            if isinstance(prefetch, bool) or not isinstance(prefetch, (int, np.integer)) or prefetch < 0:
                raise ValueError(f"prefetch must be None (auto) or an int >= 0, got {prefetch!r}")
            prefetch = int(prefetch)
        self.prefetch = prefetch
        self.copy_threads = (default_copy_threads() if copy_threads is None
                             else P.check_positive_int(copy_threads, "copy_threads"))
        self._device = device
        self._pool = pool
        self._owns_pool = pool is None
        self._pinned_pool_arg = pinned_pool
        if not isinstance(pin_in_place, bool):
            raise TypeError(f"pin_in_place must be True or False, got {pin_in_place!r}")
        self.pin_in_place = pin_in_place
        if not (isinstance(pad_shapes, bool) or pad_shapes == "auto"):
            raise TypeError(f"pad_shapes must be True, False or 'auto', got {pad_shapes!r}")
        if pad_shapes is True and self.form != "tensor":
            raise ValueError("pad_shapes=True pads the batches a tensor function (y = f(x)) is called with; "
                             "this compute is not one (a compute(stream, x, y) or compute=None)")
        self.pad_shapes = pad_shapes
        threads = ct.check_compute_threads(compute_threads, self.n_streams)
        self.compute_threads = threads or 1  # the calls' threads in every run ("auto": 1, and below)
        # "auto": a long list's trial may measure its calls on this many threads (list_paths.py)
        self._auto_threads = (0 if threads or graph or self.synchronous or self.form != "tensor"
                              else ct.auto_threads(self.n_streams))
        self._list_threads = 0  # this run's calls on this many threads, as the list's trial said (0: not)
        self._threads_failed = False  # a call failed on the threads the trial measured: not again
        if self.compute_threads > 1 and self.form == "none":
            raise ValueError(f"compute_threads={compute_threads} needs a compute to call (compute=None)")
        if self.compute_threads > 1 and graph:
            raise ValueError("compute_threads > 1 and graph=True are not combined: a replayed graph's launch is "
                             "already short. Use one of the two.")
        self._started = False
        self._running = False
        self._tc: TensorCompute | None = None
        self._rec: records.RunRecords | None = None  # this run's batches of several arrays (records.py)
        self._said_serial = False  # the warning that the tensor function's calls turned serial was given
        self._tuned: dict[tuple, Any] = {}  # chunk="auto": measured models per kind of work
        self._probe_first_lane = 0  # chunk="auto": the lane of a probe run's first batch size (_probe)
        # ... and the choice they gave per run size: choose_chunk weighs a few hundred sizes
        # (~1.5 ms of Python), which a loop over same-sized arrays need not pay every run
        # (a key's models change only after retune(), which clears both)
        self._choices: dict[tuple, ChunkChoice] = {}
        self._list_paths = ListPaths()  # long lists: plain, pipelined or threads, measured (list_paths.py)
        self._stats_later: Callable[[], PipelineStats] | None = None  # a small run's stats, made when read
        self.stats = None
        self.probe_stats: PipelineStats | None = None
        self.imap_stats: dict[str, Any] | None = None  # the last imap()'s totals

    @property
    def stats(self) -> PipelineStats | None:
        """The last run's :class:`~fullpipe.pipeline.stats.PipelineStats` (None before the first)."""
        later = self._stats_later
        if later is None:
            return self._stats
        st = later()
        if self._stats_later is later:  # (a run that ended meanwhile on another thread keeps its stats)
            self._stats, self._stats_later = st, None
        return st

    @stats.setter
    def stats(self, value: PipelineStats | None) -> None:
        self._stats, self._stats_later = value, None

    # ------------------------------------------------------------------ lifetime
    def _start(self) -> None:
        if self._started:
            return
        from ..cuda.device import Device
        from ..cuda.events import create_event
        from ..cuda.pool import DevicePool
        from ..cuda.streams import long_lived_streams

        if self._device is None:
            self._device = Device(0)
        self.device = self._device
        index = getattr(self.device, "index", 0)
        self._dev_index = index if isinstance(index, int) else 0
        ensure_current(self._dev_index)
        self._pinned_pool = self._pinned_pool_arg if self._pinned_pool_arg is not None else default_pinned_pool()
        if self._pool is None:
            self._pool = DevicePool(self.device, release_threshold="max")
        self.pool = self._pool
        # Long-lived streams, this pipeline's alone until close(): see streams.long_lived_streams.
        # The last one only uploads bulk-staged inputs (bulk.DeviceInputs).
        n_all = self.n_streams + (2 if self.copy_streams else 0) + 1
        self._all_streams = long_lived_streams(self.device, n_all)
        self.streams = self._all_streams[:self.n_streams]  # compute (and, by default, copies)
        self._handles = [s.handle for s in self._all_streams]
        # The per-batch driver calls go through libcuda directly (cuda/hotpath.py);
        # handles are then plain ints.
        self._hot = HotPath(keep_gil=self.recycle != "pyhostfn")
        self._hs = [handle_int(h) for h in self._handles] if self._hot.native else list(self._handles)
        # Which stream each step of a lane's batches goes on (protocol.Route).
        # copy_streams: every H2D on one stream, every D2H on another, compute on the
        # lane's stream; reusable non-timing events hand a batch from the H2D stream to
        # its compute stream (one event, always recorded on the H2D stream) and from there
        # to the D2H stream (one event per compute stream). A wait takes the event's state
        # when it is enqueued, so the next record may follow at once; each event is only
        # ever recorded on one stream, so its records also complete in order. Buffers are
        # freed _lag batches later on the H2D stream (protocol.DeferredFree).
        N = self.n_streams
        self._lag = max(4, N + 2)
        self._handoff = [create_event(self.device, timing=False) for _ in range(1 + N + self._lag)]
        self._handoff_h = [handle_int(e.handle) if self._hot.native else e.handle for e in self._handoff]
        # bulk-staged inputs uploaded a group at a time: the lanes wait for each group's H2D (bulk.DeviceInputs)
        self._upload_event = create_event(self.device, timing=False)
        self._upload_h = handle_int(self._upload_event.handle) if self._hot.native else self._upload_event.handle
        if self.copy_streams:
            s_in, s_out, h_in, h_out = self._all_streams[N], self._all_streams[N + 1], self._hs[N], self._hs[N + 1]
            self._routes = [Route(s_in, s, s_out, h_in, h, h_out, h2d_done=self._handoff_h[0],
                                  compute_done=self._handoff_h[1 + k])
                            for k, (s, h) in enumerate(zip(self.streams, self._hs))]
        else:
            self._routes = [Route.one_stream(s, h) for s, h in zip(self.streams, self._hs)]
        # One stream per lane: batches reuse their lane's buffer in stream order (lanes.py).
        self._lanes = None if self.copy_streams else LaneBuffers(self.pool, self._hs[:N])
        self._ring_in = SlotRing(self.slots, pool=self._pinned_pool)
        self._ring_out = SlotRing(self.slots, pool=self._pinned_pool)
        self._copier_in: HostCopier | None = None
        self._copier_out: HostCopier | None = None
        self._free_events: list[tuple[Any, Any]] = []
        self._events_out = 0
        self._start_event = create_event(self.device, timing=True)
        self._end_event = create_event(self.device, timing=True)
        self._start_h = handle_int(self._start_event.handle) if self._hot.native else self._start_event.handle
        self._end_h = handle_int(self._end_event.handle) if self._hot.native else self._end_event.handle
        # Non-timing events that stream 0 waits on at the end of a run, one per stream.
        self._join_events = [create_event(self.device, timing=False) for _ in range(len(self._all_streams))]
        self._join_h = [handle_int(e.handle) if self._hot.native else e.handle for e in self._join_events]
        self._create_event = create_event
        driver = drv.driver()
        self._drv = driver
        self._SUCCESS = driver.CUresult.CUDA_SUCCESS
        self._graphs = (BatchGraphs(pool=self.pool, device=self.device, hot=self._hot, recycle=self.recycle,
                                    slots=self.slots) if self.graph and self.form != "tensor" else None)
        self._run_graphs = (RunGraphs(self._graphs, self._hot, self.device, self.pool, self._hs[0],
                                      enabled=self.graph is True) if self._graphs is not None else None)
        self._started = True

    def close(self) -> None:
        """Free the pinned ring, the events, the copy threads and (if it made it) the pool."""
        if not self._started:
            return
        self._check_not_running("close")
        try:
            self._drain_streams()
        except Exception:  # a sticky CUDA error: free what can still be freed, then report it
            with contextlib.suppress(Exception):
                self._free_everything()
            self._started = False
            raise
        self._free_everything()
        free_collected()
        from ..cuda.streams import return_streams

        return_streams(self.device, self._all_streams)  # drained: the next pipeline may take them

    def _free_everything(self) -> None:
        if self._tc is not None:
            self._tc.close()
            self._tc = None
        if self._run_graphs is not None:
            self._run_graphs.close()
            self._run_graphs = None
        if self._graphs is not None:  # before the ring: the graphs hold its slot addresses
            self._graphs.close()  # (and trims the graph memory the run graphs held)
            self._graphs = None
        self._ring_in.free()
        self._ring_out.free()
        for c in (self._copier_in, self._copier_out):
            if c is not None:
                c.close()
        for ev, _ in self._free_events:
            ev.close()
        self._free_events = []
        for ev in (self._start_event, self._end_event, self._upload_event, *self._join_events, *self._handoff):
            ev.close()
        if self._owns_pool:
            self.pool.close()
            self._pool = None
        self._started = False

    def _drain_streams(self) -> None:
        """Wait for everything enqueued on the pipeline's streams (from any thread)."""
        ensure_current(self._dev_index)
        for s in self._all_streams:
            with drv.translated("cuStreamSynchronize"):
                s.sync()

    def __enter__(self) -> "StreamPipeline":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the run's own exception (batch index, note) is the one the user sees
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def _check_not_running(self, what: str) -> None:
        if self._running:
            raise RuntimeError(f"StreamPipeline.{what}() while a run is in progress: a pipeline runs one run at a "
                               "time (give each thread its own pipeline)")

    def __repr__(self) -> str:
        return (
            f"StreamPipeline(streams={self.n_streams}, chunk={self.chunk!r}, slots={self.slots}, "
            f"recycle={self.recycle!r}, staging={self.staging!r})"
        )

    def resources(self) -> dict[str, Any]:
        """What the pipeline holds now, for leak checks: pool usage, live allocations,
        timing events out, whether a run holds the ring, pinned bytes, pending Python
        host functions."""
        from ..cuda.hostfn import pending_count

        d: dict[str, Any] = {"running": self._running, "python_host_functions_pending": pending_count()}
        if self._started:
            s = self.pool.stats()
            d.update(
                pool_used_bytes=s.used_bytes,
                pool_allocations=s.allocations,
                timing_events_out=self._events_out,
                pinned_slots_free=0 if self._running else 2 * self.slots,
                pinned_ring_bytes=self._ring_in.pinned_bytes + self._ring_out.pinned_bytes,
            )
            if self._graphs is not None:
                d["graph_execs"] = len(self._graphs)
                d["graph_lane_buffers"] = self._graphs.lane_buffers
                d["graph_lane_bytes"] = self._graphs.lane_bytes
            if self._run_graphs is not None:
                d["run_graph_execs"] = len(self._run_graphs)
                d["run_graph_bytes"] = self._run_graphs.nbytes
        return d

    def reset_graphs(self) -> None:
        """graph=True: drop the cached CUDA graphs, so that the next batches capture the
        compute again (after changing something it reads when called)."""
        if not self._started:
            return
        self._drain_streams()
        if self._graphs is not None:
            self._graphs.clear()
        if self._run_graphs is not None:
            self._run_graphs.clear()
        if self._tc is not None and self._tc.graphs is not None:
            self._tc.graphs.clear()

    def retune(self) -> None:
        """chunk="auto": forget the measured models, so that the next run probes again
        (after changing the compute, the machine's load, or anything the chunk depends on);
        and which way long lists run (list_paths.py), measured again, their
        calls on threads included after a call failed there."""
        self._tuned.clear()
        self._choices.clear()
        self._list_paths.clear()
        self._threads_failed = False

    # ------------------------------------------------------------------ public runs
    def run(self, x: Any, out: Any = None) -> Any:
        """Run one host array (NumPy, torch CPU tensor, buffer; for a tensor function also
        a tuple or dict of arrays with equal rows, handed to ``f`` the same way: records.py),
        cut into chunks along axis 0. Returns the output (``out`` if given; else a new one of the input's kind,
        pinned if ``x`` was pinned by its owner, or once fullpipe has pinned it in place
        for ``PINNED_OUTPUTS_AFTER_RUNS`` runs), or None with ``output=None``. ``out=x``
        runs in place (``y`` of ``x``'s row shape and dtype); an ``out`` that shares memory
        with ``x`` shifted against it is refused. An input with no rows gives an output with
        no rows (a tensor function is called once on it to learn its output's row shape)."""
        self._check_not_running("run")
        if records.is_record(x):  # (each chunk gathered from its rows of every field by the staging copy)
            self._check_records_allowed()
            packed = records.pack(x, "input", fill=False)
            with self._records_for(records.for_run([packed], [out], by_rows=True)):
                return self._run(packed.array, out)
        return self._run(x, out)

    def _run(self, x: Any, out: Any) -> Any:
        """run() of one array (a batch of several arrays: its records' host array, records.py)."""
        if out is None and self._tc is not None:
            got = self._run_small(x)
            if got is not _NOT_SMALL:
                return got
        x_np, kind = host_view(x, "input")
        if x_np.ndim and not x_np.shape[0] and self._rec is None:  # (no rows: no chunks, as map() over nothing)
            return self._run_empty(x_np, kind, out)
        x_np = P.as_host_array(x_np, "input")
        out_np = None
        if out is not None:
            out_np, _ = host_view(out, "out")
        tensor = self.form == "tensor"
        spec = self.output
        if spec.none and out is not None:
            raise ValueError("out given, but the pipeline has output=None")
        rows = x_np.shape[0]
        row_bytes = x_np.nbytes // rows
        out_shape = out_dtype = None
        if not tensor:
            self._check_input_dtype(x_np.dtype)
            if not spec.none:
                out_shape, out_dtype = spec.shape_for(x_np.shape), spec.dtype_for(x_np.dtype)
                if out_np is not None:
                    P.check_output(out_np, out_shape, out_dtype)  # type: ignore[arg-type]
        elif out_np is not None:
            _check_out_layout(out_np, rows, "out")
        in_place = out_np is not None and _check_in_place(out_np, x_np, "out")
        fixed_rows = None if self.chunk == "auto" else chunk_rows(self.chunk, row_bytes, rows)
        self._start()
        ensure_current(self._dev_index)
        for again in (False, True):
            usage = PinnedUsage()
            notes: list[str] = []
            pins = self._pins()
            try:
                got = self._run_array(x, x_np, kind, out, out_np, tensor, spec, rows, row_bytes, out_shape,
                                      out_dtype, fixed_rows, usage, notes, pins, in_place)
                break
            except ComputeSharesOutput as exc:  # its calls are serial from now on: the whole run again
                if again or in_place:
                    _cannot_run_again(exc, in_place)
                    raise
            finally:
                pins.release()
        self._say_serial(stacklevel=4)  # (run -> _run -> here)
        return got

    def _run_empty(self, x_np: np.ndarray, kind: HostKind, out: Any) -> Any:
        """run() of an input with no rows: an output with no rows (``out`` as given, checked),
        of the row shape and dtype the output would have: the stream form's ``output`` spec,
        or for a tensor function what ``f`` returns for no rows (called once, on the caller's
        stream, as a loop over the batches would call it)."""
        spec = self.output
        if spec.none:
            if out is not None:
                raise ValueError("out given, but the pipeline has output=None")
            return None
        declared = self.form != "tensor"  # (a tensor function's output is what f returns)
        if declared:
            self._check_input_dtype(x_np.dtype)
        if out is not None:
            out_np, _ = host_view(out, "out")
            if declared:
                P.check_output(out_np, spec.shape_for(x_np.shape), spec.dtype_for(x_np.dtype))
            else:
                _check_out_layout(out_np, 0, "out")
            return out
        if declared:
            return like_input(np.empty(spec.shape_for(x_np.shape), spec.dtype_for(x_np.dtype)), kind)
        self._start()
        ensure_current(self._dev_index)
        tc = self._tensor_compute(kind)
        row_shape, host_dtype, give_back = tc.output_of_no_rows(x_np, kind)
        return like_input(np.empty((0, *row_shape), host_dtype), kind, torch_dtype=give_back)

    def _run_small(self, x: Any) -> Any:
        """``run(x)`` of one small input into a new output, for a PyTorch function this
        pipeline has called before (its adapter is made): the run a full ``run()`` would make
        plain (:meth:`_runs_plain`), decided first and run without the rest of a run's checks
        and records, which took ~110 us of a 256 KiB run's ~280 (session 21, p131). The same
        output (pinned from the pool for an input its owner pinned), failure note and stats
        (made when read). Returns ``_NOT_SMALL`` for any other run, having changed nothing."""
        tc = self._tc
        if not self._plain_compute() or self.chunk != "auto":
            return _NOT_SMALL
        x_np, kind = host_view(x, "input")
        nbytes = x_np.nbytes
        if (nbytes > PLAIN_MAX_BYTES or not x_np.ndim or not x_np.shape[0] or not _from_numpy_takes(x_np.dtype)
                or not x_np.flags.writeable):
            return _NOT_SMALL
        x_np = P.as_host_array(x_np, "input")
        rows = x_np.shape[0]
        row_bytes = nbytes // rows
        if even_split_rows(rows, row_bytes, self.n_streams) < rows:  # (chunk="auto" would cut it)
            return _NOT_SMALL
        if self._tuned and any(self._tuned.get(self._tune_key(x_np, a, b)) is not None
                               for a in ("ring", "direct") for b in ("ring", "direct")):
            return _NOT_SMALL  # (models from an earlier run choose its chunk: _tune, _tuned_through_ring)
        cache = default_pin_cache()
        if self.pin_in_place and nbytes * WHOLE_MAX_RATIO >= cache.min_bytes:
            return _NOT_SMALL  # (the cache would remember it, and pin it in place if it comes again)
        cache.flush()  # (as every run: the safe point to let go of arrays nobody holds, _Pins.settle)
        usage, notes = PinnedUsage(), []
        pinned_output = self._pinned_output_for(usage, notes)
        self._running = True
        try:
            met = "none" if cache.empty else cache.overlap(x_np.ctypes.data, nbytes)  # (ctypes.data: 1-2 us)
            # (a range pinned in part goes the long way, through the ring: _runs_plain)
            if self._rec is not None and met != "partial":
                self._rec.fill()  # (a batch of several arrays: a plain run reads its host array)
            got = None if met == "partial" else run_small(tc, x_np, kind, met != "none", pinned_output)
        finally:
            self._running = False
        if got is None:  # (pinned by the pin cache: a run of its own holds the range)
            return _NOT_SMALL
        y, call_s, wall_s = got
        out_bytes = y.nbytes
        streams = self.n_streams  # (the closure keeps no reference to the pipeline)

        def stats() -> PipelineStats:  # what run() records for the same run (its chunk: _tune's even split)
            st = plain_stats(nbytes, out_bytes, wall_s, call_s)
            st.chunk = {"rows": rows, "bytes": rows * row_bytes, "source": "even split",
                        **even_split_choice(rows, row_bytes, streams).as_dict(),
                        "probe_batches": 0, "refined_runs": 0, "new_shape_ms": 0.0}
            return st
        self._record_short_run(stats, usage, notes, stacklevel=6)  # (a warning points at run()'s caller)
        return y

    def _record_short_run(self, make: Callable[[], PipelineStats], usage: PinnedUsage, notes: list,
                          stacklevel: int) -> None:
        """A short run's stats, made when read (``make``, plus the pinned pool's record as of
        now); a note (the pinned pool was full) is said at once, as a full run says it."""
        self.probe_stats = None
        pinned = self._pinned_stats(usage, notes, stacklevel=stacklevel) if notes else None
        held = self._pinned_pool.held_bytes  # (as stats.held_bytes, without filing the returned blocks)
        ring = self._ring_in.pinned_bytes + self._ring_out.pinned_bytes

        def stats() -> PipelineStats:
            st = make()
            st.pinned = pinned if pinned is not None else _pinned_record(usage, held, ring)
            return st
        self._stats_later = stats

    def _pads_shapes(self) -> bool:
        """May this pipeline run a long list's batches at shapes the compute has seen
        (``pad_shapes``: True, or "auto" for a compute whose new shapes are costly)? A plain
        run calls every batch at its own shape: such lists stay pipelined."""
        return self.pad_shapes is True or (self.pad_shapes == "auto" and self._tc is not None
                                           and self._tc.new_shape_s >= NEW_SHAPE_COSTLY_S)

    def _plain_compute(self, any_output_spec: bool = False) -> bool:
        """May this pipeline's runs go plainly (plain.py)? A PyTorch function it has called
        before, the defaults for staging and timing, outputs made from ``y`` (of a declared
        row shape or dtype too with ``any_output_spec``: run_plain checks them, the short
        ways do not)."""
        tc, spec = self._tc, self.output
        return (tc is not None and tc.fw.name == "torch" and tc.graphs is None and tc.fn is self.compute
                and self.staging == "auto" and self.timing is not True and not spec.none
                and (any_output_spec or (spec.row_shape is None and spec.dtype is None)))

    def _pinned_output_for(self, usage: PinnedUsage, notes: list) -> Callable[[tuple[int, ...], np.dtype], Any]:
        """A short run's pinned outputs: from the pinned pool, or None (a pageable output,
        noted) when the pool is full."""
        def pinned_output(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
            try:
                return self._pinned_pool.empty(shape, dtype, usage)
            except PinnedPoolFull as exc:
                notes.append(f"pinned pool full, output is pageable: {exc}")
                return None
        return pinned_output

    def _run_small_list(self, given: list[Any], views: list[tuple[np.ndarray, HostKind]], outs: list[Any] | None,
                        started: float) -> Any:
        """``run_batches(xs, outs)`` of a list of at most SMALL_LIST_MAX_BATCHES batches and
        PLAIN_MAX_BYTES in all, for a PyTorch function this pipeline has called before:
        plain.run_small_list (on the caller's stream), decided before anything else of a run is made (a pipelined run of
        a short list is its fixed costs: bulk blocks, events, threads; session 22, p137,
        p138). The same outputs and errors, the failing batch named as the long way names it
        (its note says the run was plain); stats made when read (staging "plain").
        ``_NOT_SMALL`` for any other run, having changed nothing (the long way then raises
        what it raises). Not with compute_threads > 1: the calls of a host-bound compute go
        to its threads.

        A longer list of small batches (at most LONG_LIST_MAX_BYTES in all, LONG_LIST_MEAN_BYTES a
        batch on average; not where batches may be padded to seen shapes, _pads_shapes) runs
        plainly or pipelined as measured (list_paths.py; ``started``:
        when the run_batches call began, for its time): a ``_LongList`` says to run it
        pipelined and record the time. ``views``: the batches' host views (host_view)."""
        if not self._plain_compute() or self.compute_threads > 1:
            return _NOT_SMALL
        long = len(given) > SMALL_LIST_MAX_BATCHES
        max_bytes = LONG_LIST_MAX_BYTES if long else PLAIN_MAX_BYTES
        arrays = [v[0] for v in views]
        kinds = [v[1] for v in views]
        dtype, library = arrays[0].dtype, kinds[0].library
        total = 0
        if not _from_numpy_takes(dtype):
            return _NOT_SMALL
        for a, k in zip(arrays, kinds):  # (a.flags is made anew at each read: read once)
            total += a.nbytes
            if (total > max_bytes or not a.ndim or not a.size or (a.dtype is not dtype and a.dtype != dtype)
                    or not (flags := a.flags).writeable or not flags.c_contiguous or k.library != library):
                return _NOT_SMALL
        outs_np, in_place, outs_read = None, False, None
        if outs is not None:
            if len(outs) != len(given):
                return _NOT_SMALL
            outs_read = _OutsRead.of(given, views, outs)  # (as the long way: the same calls refused)
            outs_np, in_place = [v[0] for v in outs_read.views], outs_read.in_place
            taken = None  # (the last output dtype found one that torch.from_numpy takes)
            for o, a in zip(outs_np, arrays):  # (_check_out_layout's conditions: else the long way says which)
                if (not o.ndim or o.shape[0] != a.shape[0] or not (flags := o.flags).c_contiguous
                        or not flags.writeable):
                    return _NOT_SMALL
                if o.dtype is not taken:
                    if not _from_numpy_takes(o.dtype):
                        return _NOT_SMALL
                    taken = o.dtype
        cache = default_pin_cache()
        if self.pin_in_place and total >= cache.min_bytes:
            return _NOT_SMALL  # (the cache would remember the list, and pin it in place if it comes again)
        key = None
        if long:
            if not small_batches(total, len(arrays)) or self._pads_shapes():
                return _NOT_SMALL
            key = list_key(arrays, kinds[0].library)
            trial = self._list_paths.in_trial(key)
            # (not in place: a run that failed on the threads could not run again)
            may_thread = self._may_thread_list() and not in_place
            path = self._list_paths.next_path(key, may_thread)
            if path != PLAIN:
                return _LongList(key, trial, views, path, may_thread, outs_read=outs_read)
        cache.flush()  # (as every run: the safe point to let go of arrays nobody holds, _Pins.settle)
        usage, notes = PinnedUsage(), []

        def cache_met(a: np.ndarray) -> bool:
            return not cache.empty and cache.overlap(a.ctypes.data, a.nbytes) != "none"

        self._running = True
        try:
            if self._rec is not None:
                self._rec.fill()  # (batches of several arrays: a plain run reads their host arrays)
            pinned_output = self._pinned_output_for(usage, notes)
            got = run_small_list(self._tc, arrays, kinds, cache_met, lambda n: pinned_output((n,), np.dtype(np.uint8)),
                                 self._copier("out"), outs_np, grouped_uploads=long,
                                 out_addresses=None if outs_read is None else outs_read.addresses)
        finally:
            self._running = False
        if got is None:
            # (pinned in part, or a mix: pipelined)
            return _NOT_SMALL if key is None else _LongList(key, trial, views, PIPELINED, may_thread,
                                                            outs_read=outs_read)
        ys, call_s, wall_s, wait_s = got
        out_bytes, n = sum(o.nbytes for o in (outs_np if outs_np is not None else ys)), len(ys)
        list_path = None
        if key is not None:
            self._list_paths.record(key, PLAIN, time.perf_counter() - started, n)
            list_path = self._list_paths.describe(key, PLAIN, trial)

        def stats() -> PipelineStats:
            st = plain_stats(total, out_bytes, wall_s, call_s, batches=n, wait_s=wait_s)
            st.list_path = list_path
            return st
        self._record_short_run(stats, usage, notes, stacklevel=7)  # (a warning points at run_batches()' caller)
        return ys if outs is None else outs

    def _run_array(self, x: Any, x_np: np.ndarray, kind: HostKind, out: Any, out_np: np.ndarray | None,
                   tensor: bool, spec: Any, rows: int, row_bytes: int, out_shape: Any, out_dtype: Any,
                   fixed_rows: int | None, usage: PinnedUsage, notes: list, pins: "_Pins", in_place: bool) -> Any:
        """run() once its arguments are checked: staging, chunking, the run itself
        (``in_place``: ``out`` is ``x``'s memory)."""
        in_pinned = (pins.pinned("input", x, x_np, self._pinned) if self._rec is None or self._rec.fields is None
                     else self._inputs_pinned(pins, [x], [x_np], []))
        new_pinned = in_pinned and pins.pinned_outputs()  # (a new output is pinned only for a pinned input)
        outputs: _Outputs | None = None
        if tensor:
            self._tensor_compute(kind)
            if not spec.none:
                outputs = _Outputs(spec, pinned=new_pinned, pool=self._pinned_pool, usage=usage, notes=notes,
                                   rows=rows, given=out_np, torch_input=kind.library == "torch")
            out_pinned = new_pinned if out_np is None else pins.pinned("output", out, out_np, self._pinned)
        elif out_np is None and not spec.none:
            out_np = self._new_output(out_shape, out_dtype, new_pinned, usage, notes)
            out_pinned = new_pinned and not notes
        else:
            out_pinned = out_np is not None and pins.pinned("output", out, out_np, self._pinned)
        pins.settle()
        stage_in = self._staging_mode(in_pinned)
        stage_out = None if spec.none else self._staging_mode(out_pinned)
        start = n_probe = 0
        new_shape_s = 0.0
        choice: ChunkChoice | None = None
        source = "given"
        self.probe_stats = None
        pst_list: list[PipelineStats] = []
        run_args = dict(outputs=outputs, usage=usage, kind=kind, in_place=in_place)
        if fixed_rows is None:
            with nvtx.range("fullpipe.pipeline: chunk='auto'"):
                fixed_rows, choice, start, n_probe, source = self._tune(
                    x_np, None if tensor else out_np, rows, row_bytes, stage_in, stage_out, run_args, pst_list)
        bounds = P.chunk_bounds(rows, fixed_rows, start)
        batches = P.batches_from_array(x_np, None if tensor else out_np, bounds, first_index=n_probe)
        tuned = self._tuned.get(self._tune_key(x_np, stage_in, stage_out))
        one_size = choice is not None and tuned is not None and tuned.deferred_rows > 0  # (_one_size_choice)
        if tensor:
            self._pad_last_chunk(batches, fixed_rows, row_bytes, tuned,
                                 TensorCompute.dtype_key(x_np.dtype, kind.torch_dtype if kind.reinterpreted else None),
                                 even_split=source == "even split")
        if source != "even split" and not one_size:  # (chunk="auto" chose fewer chunks than streams knowingly)
            self._warn_few_batches(len(batches) + n_probe, fixed_rows, row_bytes, stacklevel=5)
        if self._runs_plain(batches, n_probe, x_np, outputs):
            if self._rec is not None:
                self._rec.fill()  # (a batch of several arrays: a plain run reads its host array)
            self._running = True
            try:
                stats = run_plain(self._tc, batches[0], x_np,  # type: ignore[arg-type]
                                  kind.torch_dtype if kind.reinterpreted else None, outputs, usage)
            finally:
                self._running = False
        else:
            new_shapes_before = self._tc.new_shape_calls if self._tc is not None else 0
            with nvtx.range(f"fullpipe.pipeline: {len(batches)} batches on {self.n_streams} streams"):
                stats = self._execute(batches, stage_in, stage_out, **run_args) if batches else PipelineStats()
            if self._tc is not None and self._tc.new_shape_calls > new_shapes_before:
                new_shape_s = self._tc.new_shape_s  # (what this run's new batch shape cost the compute)
        stats.chunk = {"rows": fixed_rows, "bytes": fixed_rows * row_bytes, "source": source}
        if choice is not None:
            stats.chunk.update(choice.as_dict())
            stats.chunk["probe_batches"] = n_probe
            key = self._tune_key(x_np, stage_in, stage_out)
            tuned = self._tuned.get(key)
            stats.chunk["refined_runs"] = getattr(tuned, "refined", 0)
            stats.chunk["new_shape_ms"] = getattr(tuned, "new_shape_s", 0.0) * 1e3
            if batches and stats.staging.get("input") != "plain":  # (a plain run has no stage times to learn from)
                self._refine(key, stats, fixed_rows * row_bytes, new_shape_s)
                self._count_kept_loss(key, choice)
        stats.pinned = self._pinned_stats(usage, notes, stacklevel=5)  # (run -> _run -> _run_array -> here)
        pins.annotate(stats)
        self.stats = stats
        if spec.none:
            return None
        if out is not None:
            return out
        if outputs is not None:
            return like_input(outputs.array, kind, torch_dtype=outputs.give_back)
        return like_input(out_np, kind)  # type: ignore[arg-type]

    def _runs_plain(self, batches: list[P.Batch], n_probe: int, x_np: np.ndarray, outputs: "_Outputs | None") -> bool:
        """Does this run() go plainly (pipeline/plain.py): one small batch of a PyTorch
        tensor function, with the pipeline's defaults for staging and timing? Not for inputs
        ``torch.from_numpy`` cannot take as they are (NumPy bfloat16; read-only: a warning),
        nor for a range the pin cache pinned only in part (PyTorch's copy would take it for
        pinned: session 20's CUDA_ERROR_INVALID_VALUE), nor for a batch to run padded to a
        shape the compute has seen (_pad_last_chunk)."""
        return (len(batches) == 1 and n_probe == 0 and outputs is not None and not batches[0].pad_to
                and self._plain_compute(any_output_spec=True) and x_np.nbytes <= PLAIN_MAX_BYTES
                and x_np.dtype.kind != "V" and x_np.flags.writeable
                and default_pin_cache().overlap(batches[0].src_addr, x_np.nbytes) != "partial")

    def run_batches(self, batches: Sequence[Any], outs: Sequence[Any] | None = None) -> list[Any] | None:
        """Run a sequence of host batches (sizes may differ; NumPy arrays, torch CPU
        tensors, buffers; for a tensor function, also batches of several arrays: each a
        tuple, list or dict of arrays with equal rows, handed to ``f`` the same way on the
        device, records.py). Returns their outputs (``outs`` if given, else new arrays of
        each batch's kind, the first array's for several, pinned when every input is), or
        None with ``output=None``. A batch with no rows gets an output with no rows in its
        place (as :meth:`run` gives one; not yet for batches of several arrays)."""
        return self._run_batches(batches, outs)

    def _run_batches(self, batches: Sequence[Any], outs: Sequence[Any] | None = None,
                     warn_few: bool = True, pin_new: bool = True) -> list[Any] | None:
        """run_batches; ``pin_new`` False: pin no new list in place (imap's windows, whose
        batches are each seen once), but use what earlier runs pinned."""
        self._check_not_running("run_batches")
        _refuse_one_array(batches, "run_batches takes a sequence of arrays")
        try:
            given = list(batches)
        except TypeError as exc:
            raise TypeError(f"batches must be a sequence of arrays, got {type(batches).__name__}") from exc
        if given and records.several(given[0]):
            self._check_records_allowed()
        packed = records.pack_all(given)
        if packed is not None:
            outs = None if outs is None else list(outs)
            with self._records_for(records.for_run(packed, outs, by_rows=False)):
                return self._run_list([p.array for p in packed], outs, warn_few, pin_new)
        return self._run_list(given, outs, warn_few, pin_new)

    def _run_list(self, given: list[Any], outs: Sequence[Any] | None, warn_few: bool, pin_new: bool
                  ) -> list[Any] | None:
        """run_batches of ``given`` (one array each: for batches of several arrays, their records'
        host arrays, records.py)."""
        if not given:  # nothing to run, as map() over nothing (imap([]) yields nothing too)
            if outs is not None and (outs := list(outs)):
                raise ValueError(f"{len(outs)} outputs for 0 batches")
            return None if self.output.none else []
        if outs is not None:
            outs = list(outs)
        if self._rec is None and any(map(_no_rows, given)):
            return self._run_list_with_empties(given, outs, warn_few, pin_new)
        started = time.perf_counter()
        if self._tc is None:
            return self._run_list_pipelined(given, outs, warn_few, pin_new)
        views = host_views(given, "batch {}")  # (once, for every way below)
        got = self._run_small_list(given, views, outs, started)
        if got is _NOT_SMALL and pin_new:  # (not imap's windows: each seen once, of varying sizes)
            got = self._long_list_for_threads(given, views, outs) or _NOT_SMALL
        if isinstance(got, _LongList):  # (pipelined, as measured or to measure it: list_paths.py)
            return self._run_long_list(got, given, outs, warn_few, pin_new, started)
        if got is not _NOT_SMALL:
            return got
        return self._run_list_pipelined(given, outs, warn_few, pin_new, views)

    def _run_list_with_empties(self, given: list[Any], outs: list[Any] | None, warn_few: bool,
                               pin_new: bool) -> list[Any] | None:
        """run_batches of a list in which some batches have no rows (a window of requests
        with none in it): the others run as a list, and each empty one gets an output with
        no rows, as run() gives for it (its ``outs`` entry, checked; a tensor function is
        called once on no rows per kind of empty batch to learn the output's row shape)."""
        if outs is not None and len(outs) != len(given):
            raise ValueError(f"{len(outs)} outputs for {len(given)} batches")
        if outs is not None and self.output.none:
            raise ValueError("outs given, but the pipeline has output=None")
        empty = [_no_rows(b) for b in given]
        given_outs = {}  # (an empty batch's outs entry checked before the other batches run and write theirs)
        if outs is not None:
            given_outs = {i: self._run_empty(*host_view(b, f"batch {i}"), outs[i])
                          for i, (b, e) in enumerate(zip(given, empty)) if e}
        rest = [b for b, e in zip(given, empty) if not e]
        ys = None
        if rest:
            try:
                ys = self._run_list(rest, None if outs is None else [o for o, e in zip(outs, empty) if not e],
                                    warn_few, pin_new)
            except BaseException as exc:
                _renumber(exc, [i for i, e in enumerate(empty) if not e])
                raise
        if self.output.none:
            return None
        made = iter(ys or [])
        seen: dict[tuple, Any] = {}
        result = []
        for i, (b, e) in enumerate(zip(given, empty)):
            if not e:
                result.append(next(made))
                continue
            if outs is not None:
                result.append(given_outs[i])
                continue
            x_np, kind = host_view(b, f"batch {i}")
            key = (kind.library, str(kind.torch_dtype), x_np.dtype.str, x_np.shape[1:])
            if key not in seen:
                seen[key] = self._run_empty(x_np, kind, None)
            y = seen[key]
            result.append(y.clone() if hasattr(y, "clone") else y.copy())
        return result

    def _may_thread_list(self) -> bool:
        """May a long list's calls go to compute threads this run, as its trial measures or
        chose (compute_threads="auto")? A PyTorch tensor function, run from a thread that is
        not a compute thread and holds no PyTorch state the threads would not see, and no
        call of this pipeline's failed on them before."""
        tc = self._tc
        return (self._auto_threads > 1 and not self._threads_failed and tc is not None and tc.fw.name == "torch"
                and not ct.on_compute_thread() and not ct.torch_state_stays_here(tc.fw.torch)
                and not tc.fw.graph_trees_state())  # (torch.compile's CUDA graphs are per thread)

    def _long_list_for_threads(self, given: list[Any], views: list[tuple[np.ndarray, HostKind]],
                               outs: list[Any] | None) -> "_LongList | None":
        """A long list of larger batches (more than SMALL_LIST_MAX_BATCHES batches, beyond
        LONG_LIST_MEAN_BYTES a batch on average or LONG_LIST_MAX_BYTES in all), through a
        PyTorch function with the pipeline's defaults, whose calls may go to threads:
        pipelined, its trial measuring the threads' way too where the calls set the pace
        (list_paths.py; without plain, which is for small batches). A resnet18 over lists of
        1-16 images (1.2 MB a batch), whose Python call set the pace, ran 1.46-1.48x faster on
        three threads forced (H200 hosts, session 36, p244). None: pipelined, as any other
        list (and any refusal is the long way's to raise). Not where batches may be padded to
        seen shapes (their new shapes cost seconds, and each thread would pay them) nor in
        place (a run that failed on the threads could not run again)."""
        if (len(views) <= SMALL_LIST_MAX_BATCHES or not self._plain_compute() or not self._may_thread_list()
                or self._pads_shapes()):
            return None
        arrays = [v[0] for v in views]
        if small_batches(sum(a.nbytes for a in arrays), len(arrays)):
            return None  # (small batches: _run_small_list's to take or turn down)
        outs_read = None
        if outs is not None:
            try:
                outs_read = _OutsRead.of(given, views, outs) if len(outs) == len(views) else None
            except (TypeError, ValueError):
                return None
            if outs_read is None or outs_read.in_place:
                return None
        key = ("larger batches",) + list_key(arrays, views[0][1].library)
        trial = self._list_paths.in_trial(key)
        return _LongList(key, trial, views, self._list_paths.next_path(key, may_thread=True), may_thread=True,
                         plain=False, outs_read=outs_read)

    def _run_long_list(self, got: "_LongList", given: list[Any], outs: list[Any] | None, warn_few: bool,
                       pin_new: bool, started: float) -> list[Any] | None:
        """A long list pipelined (``got.path``: PIPELINED, or THREADS: the
        calls on the compute threads), its time recorded for the list's trial. A run whose
        call failed on the threads runs again here on this thread, as it would have with
        compute_threads=1 (the batches before the failure are called twice): a failure there
        is raised as it would have been; a run that goes through warns, and this pipeline's
        calls stay on one thread from then on (until retune())."""
        run = functools.partial(self._run_list_pipelined, given, outs, warn_few, pin_new, got.views, depth=1,
                                outs_read=got.outs_read)
        path, failed = got.path, None
        if path not in (PIPELINED, THREADS):
            raise AssertionError(f"a long list's path is {path!r}")
        if path == THREADS:
            self._list_threads = self._auto_threads
            try:
                ys = run()
            except Exception as exc:
                if not ct.raised_by_a_call(exc):
                    raise
                failed = f"{type(exc).__name__}: {exc}"  # (the exception and its frames go before the run again)
                path, started = PIPELINED, time.perf_counter()
            finally:
                self._list_threads = 0
        if path == PIPELINED:  # (after a failure on the threads: here, raising what it raises here)
            ys = run()
        if failed is not None:  # (it failed on the threads only)
            self._threads_failed = True
            warnings.warn(f"run_batches: the compute failed when called from {self._auto_threads} threads at once "
                          f"({failed}); the list ran again with its calls on this thread, and this pipeline's "
                          "calls stay here (compute_threads='auto' measures threads for host-bound lists; "
                          "compute_threads=1 never does; retune() measures again)", RuntimeWarning,
                          stacklevel=5)  # (run_batches' caller)
        seconds, n = time.perf_counter() - started, len(given)
        # (a list pinned in place by this run: its cuMemHostRegister is a one-off, not the way's)
        registered_s = ((self.stats.pinned or {}).get("in_place") or {}).get("register_ms", 0.0) / 1e3
        seconds = max(seconds - registered_s, 1e-9)
        call_s = None
        if path == PIPELINED and got.may_thread:
            call_s = self.stats.host_us.get("compute_call", 0.0) * n / 1e6
        self._list_paths.record(got.key, path, seconds, n, call_s, plain=got.plain)
        self.stats.list_path = self._list_paths.describe(got.key, path, got.trial)
        return ys

    def _run_list_pipelined(self, given: list[Any], outs: list[Any] | None, warn_few: bool, pin_new: bool,
                            views: list[tuple[np.ndarray, HostKind]] | None = None, depth: int = 0,
                            outs_read: "_OutsRead | None" = None) -> list[Any] | None:
        """run_batches of ``given`` through the streams (not plainly; ``views``: the batches'
        host views, when _run_small_list has made them, and ``outs_read`` the outputs' as it
        read them; ``depth``: frames between this and _run_list, for the warnings' stacklevel)."""
        if views is None:
            views = host_views(given, "batch {}")
        arrays = [v[0] for v in views]
        out_given = out_addresses = None
        if outs is not None:
            outs = list(outs)
            out_views = (host_views(outs, "outs[{}]") if outs_read is None
                         else outs_read.views)
            out_given = [v[0] for v in out_views]
            out_addresses = _host_addresses(outs, out_views) if outs_read is None else outs_read.addresses
        addresses = _host_addresses(given, views) if outs_read is None else outs_read.in_addresses
        tensor = self.form == "tensor"
        spec = self.output
        if tensor:
            items, _, _ = P.batches_from_list(arrays, None, P.OutputSpec(none=True), addresses)
            if spec.none and outs is not None:
                raise ValueError("outs given, but the pipeline has output=None")
            if out_given is not None:
                if len(out_given) != len(items):
                    raise ValueError(f"{len(out_given)} outputs for {len(items)} batches")
                for i, (o, it) in enumerate(zip(out_given, items)):
                    _check_out_layout(o, it.in_shape[0], f"outs[{i}]")
            out_arrays = None
        else:
            items, out_arrays, _ = P.batches_from_list(arrays, out_given, spec, addresses)
            self._check_input_dtype(items[0].src.dtype)
        in_place = out_given is not None and (outs_read.in_place if outs_read is not None else
                                              _check_outputs_apart(out_given, arrays, out_addresses, addresses))
        self._start()
        ensure_current(self._dev_index)
        kind = views[0][1]
        usage = PinnedUsage()
        notes: list[str] = []
        pins = self._pins(register=pin_new)
        try:
            in_pinned = self._inputs_pinned(pins, given, arrays, [(b.src_addr, b.in_bytes) for b in items])
            outs_pinned = out_given is not None and pins.pinned_list(
                "output", outs, out_given, [(a, o.nbytes) for a, o in zip(out_addresses, out_given)],  # type: ignore[arg-type]
                self._pinned)
            pins.settle()
            new_pinned = in_pinned and pins.pinned_outputs()  # (new outputs are pinned only for pinned inputs)
            outputs = None
            if tensor:
                self._tensor_compute(kind)
                if not spec.none:
                    outputs = _Outputs(spec, pinned=new_pinned, pool=self._pinned_pool, usage=usage, notes=notes,
                                       n_batches=len(items), given=out_given, torch_input=kind.library == "torch",
                                       given_addresses=out_addresses)
                    outputs.row_bytes_hint = self._tc.out_row_bytes  # type: ignore[union-attr]
                out_pinned = new_pinned if out_given is None else outs_pinned
            elif out_arrays is not None and out_given is None and new_pinned:
                # pinned inputs: pinned outputs from the pool (the D2H goes straight in)
                for i, (it, po) in enumerate(zip(items, self._new_outputs(out_arrays, usage, notes))):
                    it.dst, it.dst_addr = po, po.ctypes.data
                    out_arrays[i] = po
                out_pinned = not notes
            else:
                out_pinned = out_arrays is not None and (outs_pinned or all(self._pinned(o) for o in out_arrays))
            stage_in = self._staging_mode(in_pinned)
            stage_out = None if spec.none else self._staging_mode(out_pinned)
            self.probe_stats = None
            if warn_few and not (self._plain_compute() and self.compute_threads == 1
                                 and len(items) <= SMALL_LIST_MAX_BATCHES
                                 and sum(b.in_bytes for b in items) <= PLAIN_MAX_BYTES):
                # (a short list of a tensor function runs plainly from the next run on, nothing
                # to overlap by design: not worth a warning on its first run either)
                self._warn_few_batches(len(items), None, 0, stacklevel=6 + depth)
            run_args = dict(outputs=outputs, usage=usage, kind=kind, in_place=in_place, bucket=True)
            with nvtx.range(f"fullpipe.pipeline: {len(items)} batches on {self.n_streams} streams"):
                try:
                    stats = self._execute(items, stage_in, stage_out, **run_args)
                except ComputeSharesOutput as exc:  # its calls are serial from now on: the whole run again
                    if in_place:
                        _cannot_run_again(exc, in_place)
                        raise
                    stats = self._execute(items, stage_in, stage_out, **run_args)
            self._say_serial(stacklevel=6 + depth)
            stats.pinned = self._pinned_stats(usage, notes, stacklevel=6 + depth)  # (4 + depth frames up: run_batches)
            pins.annotate(stats)
            self.stats = stats
            if spec.none:
                return None
            if outs is not None:
                return list(outs)
            if outputs is not None:
                return [like_input(o, k, torch_dtype=outputs.give_back)
                        for o, (_, k) in zip(outputs.items, views)]
            return [like_input(o, k) for o, (_, k) in zip(out_arrays, views)]  # type: ignore[arg-type]
        finally:
            pins.release()

    def imap(self, batches: Iterable[Any], *, window: int | str = imap_windows.DEFAULT_WINDOW,
             read_ahead: bool | str = "auto") -> Iterator[Any]:
        """Run batches from any iterable (a generator, a DataLoader, a file reader) and
        yield their outputs in order, one per batch (None each with ``output=None``), as
        ``run_batches`` would return them.

        The iterable is read in windows of up to ``window`` bytes of input ("256MiB", at
        least 4 batches per stream) or ``window`` batches (an int); each window is one
        ``run_batches`` run, and a reader thread reads the next batches while it runs
        (``read_ahead=False``: on the caller's thread, a full window at a time; "auto", the
        default: a reader thread, except for a PyTorch DataLoader without workers, whose
        Python would take turns with the compute's for the GIL: imap.choose_read_ahead). A batch
        must keep its data until its output is yielded: a batch whose memory changes
        meanwhile (an iterator that refills one buffer) raises ValueError.
        ``pipe.imap_stats`` says how many windows ran and how long the caller waited for
        the iterable. See :mod:`fullpipe.pipeline.imap`."""
        window_bytes, window_batches = imap_windows.parse_window(window)
        read_ahead, why = imap_windows.choose_read_ahead(batches, read_ahead)
        _refuse_one_array(batches, "imap takes an iterable of batches")
        try:
            batches = iter(batches)
        except TypeError as exc:
            raise TypeError(f"imap takes an iterable of host batches, got {type(batches).__name__}") from exc
        totals = self.imap_stats = imap_windows.new_totals()
        totals["read_ahead"], totals["read_ahead_why"] = read_ahead, why

        def run_window(items: list, whole: bool) -> list[Any] | None:
            return self._run_batches(items, warn_few=whole, pin_new=False)

        return imap_windows.imap(run_window, batches, window_bytes=window_bytes, window_batches=window_batches,
                                 min_batches=imap_windows.MIN_WINDOW_BATCHES_PER_STREAM * self.n_streams,
                                 read_ahead=read_ahead, totals=totals)

    # ------------------------------------------------------------------ helpers
    def _say_serial(self, stacklevel: int = 3) -> None:
        """Warn once when the tensor function's calls turned serial (tensors.py)."""
        tc = self._tc
        if tc is not None and tc.serial is not None and not self._said_serial:
            self._said_serial = True
            warnings.warn(f"{tc.serial}. Its calls now run one after another on the GPU, each output copied once "
                          "on the device (the copies still overlap the calls); a run that may have read such "
                          "memory too early was run again. For CUDA graphs through fullpipe, pass an eager "
                          "function with graph=True (a graph per stream). stats.compute_serial says why.",
                          PipelineWarning, stacklevel=stacklevel)

    def _pins(self, register: bool = True) -> "_Pins":
        """This run's holder of arrays pinned in place: registers only with pin_in_place and
        staging='auto' (and ``register``); holds what the cache registered unless
        staging='ring' (no direct copy)."""
        if self.staging == "ring":
            return _Pins(None)
        return _Pins(default_pin_cache(), register=register and self.pin_in_place and self.staging == "auto"
                     and not (self._rec is not None and self._rec.copied))  # (records' own host arrays: new every run)

    def _check_records_allowed(self) -> None:
        """Batches of several arrays (records.py) are for a tensor function: said before any
        of them is packed."""
        if self.form != "tensor":
            raise TypeError("batches of several arrays (a tuple, list or dict of arrays) are for a tensor function "
                            "y = f(batch): a compute(stream, x, y) takes one array per batch (a DataLoader's "
                            "(input, label) pairs: pass (x for x, _ in loader))")

    @contextlib.contextmanager
    def _records_for(self, rec: records.RunRecords) -> Iterator[None]:
        """A run of batches of several arrays each, as records (records.RunRecords): the
        adapter unpacks each batch by its layout for the call."""
        self._rec = rec
        if self._tc is not None:
            self._tc.records = rec.layout_of
        try:
            yield
        finally:
            self._rec = None
            if self._tc is not None:
                self._tc.records = None

    def _tensor_compute(self, kind: HostKind) -> TensorCompute:
        """The tensor-function adapter, made at the first run (its library may depend
        on the first input's kind)."""
        if self._tc is not None and self._tc.fn is not self.compute:  # pipe.compute was reassigned
            self._drain_streams()
            self._tc.close()
            self._tc = None
        if self._tc is None:
            name = tensor_framework(self.compute, self._form_option, kind)
            if self.graph and name != "torch":
                raise ValueError("graph=True is not available for a CuPy tensor function (PyTorch only)")
            if name == "cupy" and self.copy_streams:
                raise ValueError("copy_streams=True is not supported with a CuPy tensor function")
            if name == "cupy" and self.compute_threads > 1:
                raise ValueError(f"compute_threads={self.compute_threads} is for PyTorch tensor functions; a CuPy "
                                 "function is called on the enqueueing thread (compute_threads=1)")
            self._tc = TensorCompute(self.compute, make_framework(name, self._dev_index), self._routes,
                                     graphs=TorchGraphs() if self.graph else None)
            self._said_serial = False
        self._tc.records = None if self._rec is None else self._rec.layout_of
        return self._tc

    def _new_output(self, shape: Any, dtype: Any, pinned: bool, usage: PinnedUsage, notes: list) -> np.ndarray:
        """A host output: from the pinned pool for a pinned input (so the D2H goes straight
        in and steady-state runs pin nothing), else pageable."""
        if pinned:
            try:
                return self._pinned_pool.empty(shape, dtype, usage)
            except PinnedPoolFull as exc:
                notes.append(f"pinned pool full, output is pageable (staged through the ring): {exc}")
        return np.empty(shape, dtype)

    def _new_outputs(self, like: list[np.ndarray], usage: PinnedUsage, notes: list) -> list[np.ndarray]:
        """run_batches of pinned inputs: pinned outputs shaped like ``like``, cut from one
        block of the pinned pool (one take per run, not one per batch), or pageable
        arrays when the pool has no room."""
        places, total = bulk_staging.offsets([o.nbytes for o in like])
        try:
            block = self._pinned_pool.empty((total,), np.uint8, usage)
        except PinnedPoolFull as exc:
            notes.append(f"pinned pool full, outputs are pageable (staged through the ring): {exc}")
            return [np.empty(o.shape, o.dtype) for o in like]
        return [block[at:at + o.nbytes].view(o.dtype).reshape(o.shape) for o, at in zip(like, places)]

    def _pinned_stats(self, usage: PinnedUsage, notes: list, stacklevel: int = 3) -> dict[str, Any]:
        d = _pinned_record(usage, self._pinned_pool.stats.held_bytes,
                           self._ring_in.pinned_bytes + self._ring_out.pinned_bytes)
        if notes:
            d["fallback"] = "; ".join(notes)
            # Said, not only recorded: a pageable output the D2H writes straight into makes
            # that copy synchronous (the host waits for it), a slowdown with no other sign.
            warnings.warn(f"fullpipe.StreamPipeline: {d['fallback']}. Raise the pinned pool's cap "
                          "(fullpipe.cuda.default_pinned_pool().cap_bytes = ...) or pass out= arrays you pinned.",
                          PipelineWarning, stacklevel=stacklevel)  # the caller of run() / run_batches()
        return d

    def _warn_few_batches(self, n_batches: int, rows: int | None, row_bytes: int, stacklevel: int = 3) -> None:
        if n_batches >= self.n_streams or self.synchronous:
            return
        hint = ""
        if rows is not None and isinstance(self.chunk, int):
            hint = (f" chunk={self.chunk} is a row count ({rows * row_bytes / 2**20:.1f} MiB per chunk); for a "
                    f"size in bytes write chunk='{self.chunk}B' or e.g. '8MiB'.")
        warnings.warn(f"fullpipe.StreamPipeline: {n_batches} batch(es) for {self.n_streams} streams: nothing to "
                      f"overlap, the copies and the compute run one after the other.{hint}",
                      PipelineWarning, stacklevel=stacklevel)

    def _check_input_dtype(self, dtype: np.dtype) -> None:
        want = getattr(self.compute, "input_dtype", None)
        if want is not None and np.dtype(want) != dtype:
            raise ValueError(f"{type(self.compute).__name__} takes {np.dtype(want)} input, got {dtype}")

    def _pinned(self, arr: np.ndarray, address: int | None = None) -> bool:
        """Is all of ``arr`` (at ``address``, if read already) page-locked? (Called once the
        run's context is current.) The driver is asked about its first and last byte,
        through the ctypes hot path where it can (run_batches asks for every batch and
        output); a range that the pin-down cache pinned only in parts is not (PinCache.overlap)."""
        start = P.host_address(arr) if address is None else address
        got = self._hot.range_pinned(start, arr.nbytes)
        if got is None:
            try:
                got = bool(is_pinned(arr))
            except Exception:
                return False
        return bool(got) and default_pin_cache().overlap(start, arr.nbytes) != "partial"

    def _bulk(self, batches: list[P.Batch], stage_in: str, stage_out: str | None, outputs: "_Outputs | None",
              usage: PinnedUsage | None) -> tuple[BulkStaging | None, str, str | None]:
        """Small pageable sides of a run moved in bulk (bulk.py) instead of through the
        ring: the input copied into one pinned block before the first batch, the outputs
        D2H'd into one and copied out as their batches finish. Returns (the run's BulkStaging or
        None, stage_in, stage_out), a bulk side now "direct"."""
        small = pageable.INLINE_MAX_BYTES
        bulk_in = stage_in == "ring" and bulk_staging.fits([b.in_bytes for b in batches], small)
        dsts = _known_outputs(batches, outputs) if stage_out == "ring" else None
        bulk_out = dsts is not None and bulk_staging.fits([d.nbytes for d in dsts], small)
        # run_batches of a tensor function without outs=: each output is made from its y,
        # so its place in a block is given then (BulkStaging.place_output). Small batches
        # only, and only once an earlier run of this compute showed how big its output rows
        # are (small inputs may have large outputs: those go through the ring, which
        # overlaps their copies; an output that does not fit the block is copied directly)
        hint = self._tc.out_row_bytes if self._tc is not None else 0
        lazy_out = (stage_out == "ring" and dsts is None and outputs is not None and outputs.rows is None
                    and not outputs.given and len(batches) > 1 and max(b.in_bytes for b in batches) <= small
                    and 0 < hint * sum(b.in_shape[0] for b in batches) <= bulk_staging.BULK_MAX_BYTES)
        if not (bulk_in or bulk_out or lazy_out):
            return None, stage_in, stage_out
        staged = BulkStaging(self._pinned_pool, usage)
        try:
            if bulk_in:
                staged.stage_inputs(batches, self._copier("in"), None if self._rec is None else self._rec.parts_of)
                stage_in = "direct"
            if bulk_out:
                # (the stream form's batches hold their outputs' addresses; outs= were read once)
                addresses = ([b.dst_addr for b in batches] if outputs is None else
                             [outputs.given_addresses[b.index] for b in batches])  # type: ignore[index]
                places = staged.route_outputs(batches, dsts, addresses)  # type: ignore[arg-type]
                if outputs is not None:
                    outputs.bulk = places
                stage_out = "direct"
            elif lazy_out:
                outputs.lazy_bulk, outputs.row_bytes_hint = staged, hint  # type: ignore[union-attr]
                stage_out = "direct"
        except PinnedPoolFull:  # no room in the pinned pool: the ring it is (it may still fit)
            staged.cancel()
            if outputs is not None:
                outputs.bulk = outputs.lazy_bulk = None
            return None, "ring" if bulk_in else stage_in, "ring" if (bulk_out or lazy_out) else stage_out
        except BaseException:  # a copy failed, Ctrl-C: nothing was enqueued; the blocks go back
            staged.give_back()
            raise
        return staged, stage_in, stage_out

    def _inputs_pinned(self, pins: "_Pins", objs: list, arrays: list[np.ndarray],
                       ranges: list[tuple[int, int]]) -> bool:
        """run_batches' (and run()'s) input side: page-locked for this run? For batches of
        several arrays gathered from their fields (records.py), it is whether every field is
        (pinned by its owner, as a DataLoader's pin_memory=True does, or in place by the pin
        cache, as a list seen again is): then each batch's H2D reads its fields where they
        are (:meth:`_direct_records`), with no host copy."""
        rec = self._rec
        if rec is None or rec.fields is None:
            return pins.pinned_list("input", objs, arrays, ranges, self._pinned)
        fobjs, farrays, faddresses = rec.fields
        rec.fields_pinned = pins.pinned_list("input", fobjs, farrays,
                                             [(at, a.nbytes) for a, at in zip(farrays, faddresses)], self._pinned)
        return rec.fields_pinned

    def _direct_records(self, batches: list[P.Batch]) -> None:
        """Batches of several arrays copied to the GPU without staging (records.py): with
        every field pinned, each batch's H2D reads its fields where they are (Batch.h2d_parts,
        one copy per field); else (staging="direct" of pageable fields) each batch's records
        are written into its host array first."""
        rec, copier = self._rec, self._copier("in")
        for b in batches:
            parts = rec.parts_of(b)  # type: ignore[union-attr]
            if parts is None:
                continue
            if rec.fields_pinned:  # type: ignore[union-attr]
                b.h2d_parts = parts
            else:
                copier.copy_parts(b.src_addr, parts)

    def _staging_mode(self, pinned: bool) -> str:
        if self.staging == "auto":
            return "direct" if pinned else "ring"
        return self.staging

    def _worker_setup(self) -> None:
        """Run first on each staging thread: event waits need the device's context current."""
        ensure_current(self._dev_index)

    def _copier(self, direction: str) -> HostCopier:
        attr = "_copier_in" if direction == "in" else "_copier_out"
        if getattr(self, attr) is None:
            setattr(self, attr, HostCopier(self.copy_threads))
        return getattr(self, attr)

    def _events(self, index: int = 0) -> list[tuple[Any, Any]]:
        """Four timing events for batch ``index`` (from the free list, made when it is empty)."""
        while len(self._free_events) < 4:
            ev = self._create_event(self.device, timing=True)
            self._free_events.append((ev, handle_int(ev.handle) if self._hot.native else ev.handle))
        got = self._free_events[-4:]
        del self._free_events[-4:]
        self._events_out += 4
        return got

    def _stage_events(self, run: "_Run", mode: RunMode) -> Callable[[int], Any] | None:
        """The protocol's source of timing events for this run: every batch, the
        sampled ones (``timing="sampled"``), or none."""
        if not mode.timing:
            return None
        timed = timed_positions(len(run.batches), self.n_streams, mode)
        if timed is None:
            return self._events
        first = run.batches[0].index
        events = self._events
        return lambda index: events(index) if index - first in timed else None

    def _give_back_events(self, evs: list[tuple[Any, Any]]) -> None:
        self._free_events.extend(evs)
        self._events_out -= len(evs)

    def _check(self, name: str, result: Any) -> Any:
        if result[0] != self._SUCCESS:
            raise drv.error_from_code(name, result[0])
        return result[1] if len(result) > 1 else None

    def _pad_last_chunk(self, batches: list[P.Batch], chunk_rows: int, row_bytes: int, tuned: "_Tuned | None",
                        dtype_key: tuple, even_split: bool = False) -> None:
        """run() of a tensor function: run the last chunk at the others' rows where that saves
        a new batch shape (``pad_shapes``; TensorCompute.pays_to_pad; also where the shape's
        cost is a good part of a run, _Tuned.costly_shapes: a ViT-B/16's second run over 512
        images on an H200 paid ~70 ms for its last chunk's 122 rows, as long as the whole
        run; session 38), the probes' readings (what a new shape cost, the compute's time
        per byte) handed to the adapter first.

        chunk="auto"'s ``even_split`` of an input too small to probe: its last chunk is at most
        a row short per other chunk, so padding it costs next to nothing, and it saves a new
        shape whatever one costs, which no run has measured yet: 100 images through a resnet50
        split 34 + 34 + 32 took 258 ms on the pipeline's first run, two new shapes (an H200;
        session 48, p302)."""
        tc = self._tc
        if tc is None:
            return
        one_size = tuned is not None and tuned.deferred_rows > 0
        if tuned is not None and batches:
            compute = tuned.models.get("compute")
            tc.learn_from_probes(tuned.new_shape_s, compute.per_byte_s * row_bytes if compute is not None else 0.0,
                                 batches[0].in_shape[1:], dtype_key)
        if self.pad_shapes is False or not batches:
            return
        last = batches[-1]
        if last.in_shape[0] >= chunk_rows or tc.has_seen(last.in_shape, dtype_key):
            return  # (a whole chunk, or a shape the compute has seen: nothing to save)
        if one_size:
            # (probed at one size, for the first call's cost: the last chunk padded to it, also a short
            # run's only chunk, at most one chunk's compute more, as what a new shape costs is not known
            # yet, only that the first call cost a good part of the run)
            last.pad_to = chunk_rows
        elif len(batches) >= 2 and batches[-2].in_shape[0] == chunk_rows and (
                even_split or tc.pays_to_pad(last.in_shape, dtype_key, chunk_rows, self.pad_shapes,
                                             costly=tuned is not None and tuned.costly_shapes)):
            last.pad_to = chunk_rows

    # ------------------------------------------------------------------ chunk="auto"
    def _tune_key(self, x: np.ndarray, stage_in: str, stage_out: str | None) -> tuple:
        return (tuple(x.shape[1:]), x.dtype.str, stage_in, stage_out, self.form, id(self.compute),
                self.n_streams, self.copy_streams, self.output)

    def _tune(self, x, out, rows, row_bytes, stage_in, stage_out, run_args,
              pst_list) -> tuple[int, ChunkChoice, int, int, str]:
        """The chunk for this run: from the models measured on an earlier run of the same
        kind of work ("reused"), or from probe chunks run now (real rows of x, kept)."""
        key = self._tune_key(x, stage_in, stage_out)
        tuned = self._tuned.get(key)
        start = n_probe = 0
        source = "reused"
        if tuned is None:
            tuned = self._tuned_through_ring(x, stage_in, stage_out)
            if tuned is not None:
                self._tuned[key] = tuned
                source = "reused from the ring"
        if tuned is None:
            probes = probe_rows(rows, row_bytes, likely_chunk=self._probes_each_size_twice())
            if not probes:
                choice = even_split_choice(rows, row_bytes, self.n_streams)
                return choice.rows, choice, 0, 0, "even split"
            tuned, start, n_probe = self._measure(x, out, rows, row_bytes, probes, stage_in, stage_out, run_args)
            self._tuned[key] = tuned
            source = "tuned"
        elif tuned.deferred_rows and (done := self._completed_elsewhere(x, stage_in, stage_out, tuned)) is not None:
            tuned = self._tuned[key] = done
            source = "reused"
        elif tuned.deferred_rows and 2 * tuned.deferred_rows <= rows // 4:  # (the smaller size, its turn now)
            # (an in-place run's two probes here are on one lane: not verified by them, its calls careful
            # this run, as an in-place run's first is: TensorCompute.verified)
            tuned, start, n_probe = self._measure(x, out, rows, row_bytes, [tuned.deferred_rows], stage_in,
                                                  stage_out, run_args, known=tuned)
            self._tuned[key] = tuned
            source = "tuned"
        if tuned.deferred_rows:
            choice = self._one_size_choice(tuned, rows, row_bytes)
            return choice.rows, choice, start, n_probe, source
        # The chunk is chosen for the whole run, as a later run of this size meets it (without
        # probes); the probes' rows stand in for its first chunks. Chosen for what the probes
        # left, a chunk kept for a compute's costly new shapes split every later run into whole
        # chunks and a short last one padded to a whole chunk: convnext_tiny's 642 rows (1926 of
        # 2048 images left) computed 2568 rows a run, at 0.80x the best fixed chunk; mobilenet,
        # ViT and regnet lost 6-12 % the same way (an H200; session 44, p294).
        choice_key = (key, rows, row_bytes)
        choice = self._choices.get(choice_key)
        if choice is None:
            in_flight = (self._lag + 1) if self.copy_streams else 3 * self.n_streams - 1
            args = dict(
                total_bytes=rows * row_bytes, row_bytes=row_bytes, streams=self.n_streams,
                host_s=tuned.host.fixed_s, host_per_byte_s=tuned.host.per_byte_s,
                device_budget_bytes=tuned.budget_bytes, out_over_in=tuned.out_over_in,
                device_bytes_per_byte=tuned.compute_bytes_per_byte, buffers_in_flight=in_flight,
                min_bytes=tuned.fitted_from_bytes, keep_bytes=tuned.kept_bytes,
                # (below the threshold a shape's cost is not weighed: the chunk is kept only when about as good)
                new_shape_s=tuned.new_shape_s if tuned.costly_shapes else 0.0,
                kept_loss_s=tuned.kept_loss_s if tuned.kept_loss_for == tuned.kept_bytes else 0.0,
                lanes=0 if self.copy_streams else self.n_streams,
            )
            choice = choose_chunk(tuned.models, **args)
            if not tuned.run_s and math.isfinite(choice.predicted_ms):
                # (before any run, what a new shape costs is weighed against the predicted one: the
                # first run pads its last chunk where that cost is a good part of a run. resnet50 over
                # 4096 images, an H200: its first run's last chunk, 100 rows, cost 176 ms in a ~250 ms run)
                tuned = dataclasses.replace(tuned, run_s=choice.predicted_ms * 1e-3)
                self._tuned[key] = tuned
            # The first choice: the largest size the probes ran at is a batch shape the compute has
            # paid for. Where new shapes are costly (_Tuned.costly_shapes, against the run just
            # predicted), it is kept if predicted within PROBE_KEEP_WITHIN of the best, or while what
            # it loses is less than a new shape costs (choose_chunk's rent rule, as for a chunk kept
            # from run to run). resnet50 over 4096 images (an H200, a fresh process; session 45, p297)
            # was probed at 6, 55, 110 and 220 rows, each new size's first call 100-190 ms more than
            # its second, and its chunk (586 rows) cost another 132 ms; fixed chunks of 222 and 445
            # rows ran within 2 % of each other (p295).
            # mobilenet_v3_large's new shapes cost 1.8-3.4 s, and a chunk chosen past its probes made
            # its first run 3.5x the naive loop's (session 46, call 2). For this run only: the next run
            # of this size chooses again (not cached), by the rules for a kept chunk.
            cache = True
            if source == "tuned" and tuned.probed_bytes and choice.nbytes != tuned.probed_bytes and tuned.costly_shapes:
                choice = choose_chunk(tuned.models, **{
                    **args, "keep_bytes": tuned.probed_bytes, "keep_within": PROBE_KEEP_WITHIN,
                    "new_shape_s": tuned.new_shape_s, "kept_loss_s": 0.0,
                    "kept_what": "the largest size the probes ran at (a batch shape the compute has seen)"})
                cache = choice.nbytes != tuned.probed_bytes
            if tuned.costly_shapes:
                probed = " probed at two sizes only, and" if tuned.new_shape_s >= NEW_SHAPE_COSTLY_S else ""
                choice = dataclasses.replace(choice, reason=choice.reason + (
                    f" A new batch shape cost the compute {tuned.new_shape_s * 1e3:.0f} ms on its first call (its "
                    f"per-shape setup):{probed} the chunk is kept from run to run."))
            if len(self._choices) >= 256:
                self._choices.clear()
            if cache:
                self._choices[choice_key] = choice
        return choice.rows, choice, start, n_probe, source

    def _completed_elsewhere(self, x: np.ndarray, stage_in: str, stage_out: str | None,
                             one_size: "_Tuned") -> "_Tuned | None":
        """The same work's models completed under another staging (a second run whose input or
        output was copied directly probed the smaller size there), for a run staged as the first
        one was (a new pageable array of the same shape), whose own models are still at one size
        (``one_size``). Probing the smaller size again here would read no new-shape cost (a shape
        the compute has seen) and let the chunk change run after run. Their chunk is kept where
        their shapes are costly; stages only this staging has keep their one-size lines, and its
        host time per batch stays its own. None where no other staging's are complete."""
        outs = (None,) if stage_out is None else ("ring", "direct")
        for before in itertools.product(("ring", "direct"), outs):
            t = self._tuned.get(self._tune_key(x, *before)) if before != (stage_in, stage_out) else None
            if t is not None and not t.deferred_rows:
                return _carried(t, {st: t.models.get(st, m) for st, m in one_size.models.items()}, one_size.host)
        return None

    def _one_size_choice(self, tuned: "_Tuned", rows: int, row_bytes: int) -> ChunkChoice:
        """The chunk of a run whose compute was probed at one size (_first_call_costly): that
        size, a batch shape the compute has paid for."""
        n = tuned.probed_bytes // row_bytes  # (a shorter run: one chunk, padded to it, _pad_last_chunk)
        per_chunk = max(max(m.time(n * row_bytes) for m in tuned.models.values()), tuned.host.fixed_s)
        reason = (f"{n * row_bytes / 2**20:.2f} MiB ({n} rows): the size probed. The compute's first call there took "
                  f"{tuned.first_call_s * 1e3:.0f} ms more than its second (its one-time and per-shape setup), a "
                  f"good part of the run: one batch shape this run, a second probe size on the next")
        return ChunkChoice(n * row_bytes, n, max(tuned.models, key=lambda st: tuned.models[st].time(n * row_bytes)),
                           float("nan"), reason, predicted_ms=-(-rows // n) * per_chunk * 1e3)

    def _refine(self, key: tuple, stats: PipelineStats, chunk_bytes: int, new_shape_s: float = 0.0) -> None:
        """chunk="auto" learns from its own runs. The probes run each chunk alone and wait
        for it, and what they read can be several times what a steady run takes: on an
        H100 a bf16 MLP probed through the ring read 1857 us of host time per batch and a
        16 GB/s compute, its steady runs 290 us and 119 GB/s, and the choice (94 MiB) ran
        at 0.93x the best fixed chunk (16 MiB; session 14). So after each run at a chosen
        chunk, each stage's time per chunk in that run (its busy time, and for the ring's
        copies the median per batch) is kept, the smallest per size seen, and:

        - once runs have been seen at two sizes at least 1.5x apart, the stage's model is
          the line through the smallest and the largest of them. The probes' fit can miss
          a fixed cost per chunk: on an H100 they fitted 0 us of fixed compute time to
          that MLP (a 10.5 GB/s probe, scaled down by a run), its steady runs took
          150 us per 8 MiB chunk and 240 us per 18 MiB chunk, and the refined models
          rated 8 MiB chunks as good as 18 where they ran 11 % slower (session 16);
        - before that, a stage the run took less time for than its model predicts is
          scaled down to what the run took (a steady run's stages share the GPU, so one
          run's time alone is not evidence that a stage is slower than probed).

        The host time per batch is only lowered. The next run chooses again, keeping this
        run's chunk if it is still predicted within KEEP_WITHIN (2 %) of the best and the models that
        chose it were not far off. At most MAX_REFINES times per kind of work: after
        that, a loop over the same work keeps its choice.

        The first run at a chunk size that called the compute at a batch shape new to it
        carries that shape's setup (``new_shape_s``, the compute's measure of a new shape's
        cost; 0 for a run at shapes seen before) in its compute time; where the setup is more
        than REFIT_ABOVE of that time, that run's compute time is not learnt from (the next
        run at that size is; a run at a size seen before is learnt from even where only its
        shorter last chunk was a new shape, as a caller whose row count changes at every
        run meets). A resnet18 at 112 px (fp16, 8192 images, an H200;
        session 44, p291): the first run at 2048 rows took 75 ms where the next took 57, its
        compute was refitted to 3.6 GB/s (the runs after it: 5.5) and the models, their
        refinements spent, predicted 93 ms for every later run."""
        tuned = self._tuned.get(key)
        if tuned is None or stats.bytes_in <= 0:
            return
        if tuned.deferred_rows:  # (probed at one size: the next run probes the other, and fits through both)
            return
        # A compute whose new shapes cost seconds, or a good part of a run, keeps this run's
        # chunk whatever the models said (choose_chunk weighs a change against that cost): a
        # new chunk size is a new shape
        tuned = dataclasses.replace(tuned, run_s=stats.wall_ms / 1e3)
        self._tuned[key] = tuned
        costly_shapes = tuned.costly_shapes
        if tuned.refined >= MAX_REFINES:
            if costly_shapes and tuned.kept_bytes != chunk_bytes:  # (a chunk chosen again: kept from now on)
                self._tuned[key] = dataclasses.replace(tuned, kept_bytes=chunk_bytes)
            return
        share = chunk_bytes / stats.bytes_in  # of the run's busy time, one chunk's
        seen_per_chunk = {stage: ms / 1e3 * share for stage, ms in stats.busy_ms.items()}
        if (new_shape_s > REFIT_ABOVE * stats.busy_ms.get("compute", 0.0) / 1e3
                and chunk_bytes not in tuned.seen.get("compute", {})):
            seen_per_chunk.pop("compute", None)  # (its setup inside: not this chunk size's time)
        for stage, copies in stats.host_copy_s.items():  # the ring's memmoves, per batch
            if copies:
                seen_per_chunk[stage] = median(copies)
        seen = {stage: dict(by_size) for stage, by_size in tuned.seen.items()}
        models, changed, lowest = dict(tuned.models), False, 1.0
        for stage, t in seen_per_chunk.items():
            m = models.get(stage)
            if m is None or t <= 0.0:
                continue
            by_size = seen.setdefault(stage, {})
            by_size[chunk_bytes] = min(t, by_size.get(chunk_bytes, t))
            small, large = min(by_size), max(by_size)
            predicted = m.time(chunk_bytes)
            if large >= FIT_SPREAD * small:
                fitted = fit_stage(stage, small, by_size[small], large, by_size[large])
                if abs(fitted.time(chunk_bytes) - predicted) > REFIT_ABOVE * predicted or any(
                        abs(fitted.time(n) - m.time(n)) > REFIT_ABOVE * m.time(n) for n in (small, large)):
                    models[stage], changed = fitted, True
                    lowest = min(lowest, fitted.time(chunk_bytes) / predicted)
            elif t < REFINE_BELOW * predicted:
                k = t / predicted
                models[stage] = StageModel(m.fixed_s * k, m.per_byte_s * k)
                changed, lowest = True, min(lowest, k)
        host = tuned.host
        seen_host = _host_s_per_batch(stats)
        if 0.0 < seen_host < REFINE_BELOW * host.time(chunk_bytes):
            changed, lowest = True, min(lowest, seen_host / host.time(chunk_bytes))
            host = StageModel(seen_host, 0.0)
        if changed:
            # This run's chunk is kept only if the models that chose it were about right: one
            # chosen from a host time 7.7x too large (carried over from the ring; session 16)
            # is no better a start than any other size.
            kept = chunk_bytes if lowest >= KEEP_IF_CORRECTED_ABOVE or costly_shapes else 0
            self._tuned[key] = dataclasses.replace(tuned, models=models, host=host, refined=tuned.refined + 1,
                                                   kept_bytes=kept, seen=seen)
            self._forget_choices(key)
        else:
            self._tuned[key] = dataclasses.replace(tuned, seen=seen,
                                                   kept_bytes=chunk_bytes if costly_shapes else tuned.kept_bytes)

    def _count_kept_loss(self, key: tuple, choice: ChunkChoice) -> None:
        """A chunk kept for the compute's new-shape cost (choose_chunk) lost this run
        ``choice.keep_loss_ms`` against the best predicted: add it up, per chunk (runs of
        other sizes at the same chunk add to the same sum); once the next run's loss would
        take the sum past that cost, the run after chooses again (the cached choices of
        this kind of work are dropped). A run at another chunk starts the sum over."""
        tuned = self._tuned.get(key)
        if tuned is None:
            return
        loss_s = choice.keep_loss_ms * 1e-3
        same = tuned.kept_loss_for == choice.nbytes
        if loss_s > 0:
            paid = (tuned.kept_loss_s if same else 0.0) + loss_s
        elif same:
            return
        else:
            paid = 0.0
        self._tuned[key] = dataclasses.replace(tuned, kept_loss_s=paid, kept_loss_for=choice.nbytes)
        if loss_s > 0 and paid + loss_s > tuned.new_shape_s:
            self._forget_choices(key)

    def _forget_choices(self, key: tuple) -> None:
        """The next run of this kind of work chooses its chunk again, at any size."""
        for choice_key in [ck for ck in self._choices if ck[0] == key]:
            del self._choices[choice_key]

    def _tuned_through_ring(self, x: np.ndarray, stage_in: str, stage_out: str | None) -> "_Tuned | None":
        """The models of the same work tuned through the ring, for a side that is now
        copied directly (an array pinned in place at its second run, or pinned by the
        user): the GPU copies were timed from the ring's pinned slots, so they stand;
        the ring's host copies (stage-in, drain-out) are dropped. The host time per
        batch keeps the ring's share: an over-estimate, which only errs towards larger
        chunks. Saves a second tune (for a framework model, new probe shapes and their
        first calls: 2.1 s for a torchvision model on an H100). The chunk the ring's runs
        kept is not kept here: it was chosen for the ring's host costs (a 1 GiB MLP kept
        128 MiB chunks pinned in place at 0.92x the best fixed chunk, 32 MiB; session 15).
        The runs' corrections start over too: their host and compute times were the
        ring's, whose threads compete with the compute for the host. Except for a compute
        whose new batch shapes are costly (_Tuned.costly_shapes): its chunk stays (a mobilenet
        pinned in place at its second run chose a new chunk there, two new shapes, 3.6 s;
        session 19)."""
        was_in = [stage_in] + (["ring"] if stage_in == "direct" else [])
        was_out = [stage_out] + (["ring"] if stage_out == "direct" else [])
        found = [(before, self._tuned.get(self._tune_key(x, *before)))
                 for before in itertools.product(was_in, was_out) if before != (stage_in, stage_out)]
        # (the most ring-staged first; one whose probes are complete before one still at one size: a
        # first run's models, probed at one size, are left behind where its second run was staged otherwise)
        found.sort(key=lambda bt: (bt[1] is None or bt[1].deferred_rows > 0, -bt[0].count("ring")))
        for before, tuned in found:
            if tuned is not None:
                dropped = {name for name, b, now in zip(HOST_STAGES, before, (stage_in, stage_out)) if b != now}
                return _carried(tuned, {k: m for k, m in tuned.models.items() if k not in dropped})
        return None

    def _measure(self, x, out, rows, row_bytes, probes, stage_in, stage_out, run_args,
                 known: "_Tuned | None" = None) -> tuple["_Tuned", int, int]:
        """Probe chunks, each waited for alone with stage timing: the sizes of
        ``probe_rows`` (a small one twice, the first a warm-up, then a larger one), then x2
        while the slowest GPU stage has not reached its linear regime (time < 0.6 x the size
        ratio: launch-bound), within a quarter of the input. A tensor function runs each
        new size twice (frameworks autotune per shape), the second counts, and the larger
        size goes first (its first call the warm-up); its probes at a likely chunk leave
        room to double only in inputs of ~1.6 GiB and more.

        A tensor function whose first call cost a good part of the run predicted from the
        larger size (:meth:`_first_call_costly`) is probed at that size alone: the run keeps
        it, one batch shape in all, and the smaller size waits for the next run (``known``:
        the models of that first run, its probes' times; ``probes``: the smaller size)."""
        free_before = self.device.memory_info()[0]
        tensor = self.form == "tensor"
        per_size: dict[int, dict[str, float]] = dict(known.probe_points) if known is not None else {}
        first_host: dict[int, float] = {}  # each size's first call: the host's time
        # per size probed twice, its first batch's host time over the second's: what a new shape
        # costs (not the first size: the first call of all carries the compute's one-time costs)
        excess: dict[int, float] = {}
        gpu_time = {r: _gpu_time(p) for r, p in per_size.items()}
        a, n_probe = 0, 0
        twice = self._probes_each_size_twice()
        # (a tensor function: the larger size first, so that the smaller one's first call, which
        # measures what a new shape costs, allocates from the framework's cache: a first call larger
        # than any before may also grow its allocator. bench workloads' bf16 MLP, probed at 16 MiB
        # then 64 MiB, read 8 ms at 64 MiB where a fresh process read 0.7 ms, and as a per-shape cost
        # that kept a chunk 6 % slower than the best; session 46, call 2)
        small, large = probes[0], probes[-1]
        # (the smaller size after a first look at the larger; not in place, whose probes verify the compute's
        # outputs on two lanes in one run: TensorCompute.verified)
        split = twice and known is None and not run_args.get("in_place")
        if known is not None:
            plan = [small, small]
        elif split:
            plan = [large, large]
        else:
            plan = [large, large, small, small] if twice else list(probes)
        then = [small, small] if split else []
        first_size = plan[0] if known is None else 0  # (with ``known``, the first call of all was the first run's)
        last_pst = None
        while plan:
            bounds = []
            for r in plan:
                bounds.append((a, a + r))
                a += r
            pst = self._probe(P.batches_from_array(x, out, bounds, first_index=n_probe), stage_in, stage_out,
                              first_lane=len(per_size), **run_args)
            last_pst = pst
            for i, r in enumerate(plan):
                m = _probe_point(pst, i, self.compute is not None, stage_out is not None)
                # A size probed twice: each stage's shorter time counts. The first run of a new
                # size may pay one-time costs (a framework's autotuning, its allocator growing)
                # and either run a hiccup of the host (one H100 tune: 11.2 ms of host time
                # against 4.3 ms for the same size just before, which fitted a host cost per
                # byte and chose 7.9 MiB chunks, 1.8x slower than the best fixed chunk).
                prev = per_size.get(r)
                per_size[r] = m if prev is None else {k: min(v, prev.get(k, v)) for k, v in m.items()}
                if prev is None:
                    first_host[r] = m["host"]
                elif r != first_size:
                    excess[r] = max(first_host[r] - per_size[r]["host"], 0.0)
                gpu_time[r] = _gpu_time(per_size[r])
            n_probe += len(plan)
            if then:  # (a tensor function's larger size alone so far: is its first call a good part of the run?)
                excess_s = self._first_call_excess(first_host[large], per_size[large]["host"])
                if self._first_call_costly(excess_s, per_size[large], rows / large):
                    self.probe_stats = last_pst
                    return self._tuned_at_one_size(per_size[large], large, small, row_bytes, out, run_args,
                                                   free_before, excess_s), a, n_probe
                plan, then = then, []
                continue
            sizes = sorted(per_size)
            n_prev, n_last = sizes[-2], sizes[-1]
            launch_bound = gpu_time[n_last] < 0.6 * (n_last / n_prev) * gpu_time[n_prev]
            nxt = 2 * n_last
            plan = [nxt] * (2 if twice else 1)
            # (a compute whose new batch shapes cost seconds: every larger probe would too)
            new_shape_s = min(excess.values()) if excess else 0.0
            if (not launch_bound or a + len(plan) * nxt > rows // 4 or nxt * row_bytes > 256 * 2**20
                    or new_shape_s >= NEW_SHAPE_COSTLY_S):
                break
        self.probe_stats = last_pst
        sizes = sorted(per_size)
        n1, n2 = sizes[-2], sizes[-1]
        p1, p2 = per_size[n1], per_size[n2]
        # (stages of both sizes: a deferred size may be probed where a side's staging changed)
        models = {st: fit_stage(st, n1 * row_bytes, p1[st], n2 * row_bytes, p2[st]) for st in p2
                  if st != "host" and st in p1}
        # The host's time per batch is the enqueue and the compute call: Python and driver
        # calls, the same for any chunk size (the ring's copies are modelled on their own).
        # Probes have seen it grow with the size where steady runs did not: on an H100 a fit
        # through two probes gave 272 us + 17 us/MiB for a bf16 MLP (1.5 ms at 74 MiB), its
        # steady runs took 244 us per batch at that size, and the fit chose chunks 4x larger
        # than the best of a sweep. So: the faster of the two fitted sizes, for every size.
        host = StageModel(min(p1["host"], p2["host"]), 0.0)
        out_over_in = self._out_over_in(out, run_args, row_bytes)
        if known is not None:
            # The framework's memory as the first run's probes read it, and what its cache grew by over
            # these (calls at another shape: blocks of other sizes), as where both sizes are probed in one
            # run. The larger size's probes alone read 57 bytes per input byte for regnet_y_800mf where all
            # four read 74, and its chunk grew to 1024 rows (capped by device memory) where it had grown to
            # 820: 0.6x the best fixed chunk, against 1.0x (an H200, session 47, p301). Not the growth since
            # the first run: work in between (other pipelines, other models) grows the cache too.
            budget = known.budget_bytes
            grown = max(0, free_before - self.device.memory_info()[0]) / (n2 * row_bytes) if tensor else 0.0
            compute_bytes = known.compute_bytes_per_byte + grown
        else:
            budget = free_before // 2
            compute_bytes = self._compute_bytes(tensor, free_before, n2 * row_bytes, out_over_in)
        return _Tuned(models, host, out_over_in, compute_bytes, budget, n1 * row_bytes, n2 * row_bytes,
                      new_shape_s=new_shape_s), a, n_probe

    @staticmethod
    def _out_over_in(out: Any, run_args: dict, row_bytes: int) -> float:
        outputs = run_args.get("outputs")
        if outputs is not None and outputs.row_bytes:
            return outputs.row_bytes / row_bytes
        if out is not None:
            return (out.nbytes / out.shape[0]) / row_bytes
        return 0.0

    def _compute_bytes(self, tensor: bool, free_before: int, probe_bytes: int, out_over_in: float) -> float:
        """A tensor function's own device memory per input byte: the framework's cache grew by
        about that much over the probes, the largest ``probe_bytes``."""
        if not tensor:
            return 0.0
        free_after = self.device.memory_info()[0]
        return max(0.0, (free_before - free_after) / probe_bytes - 1.0 - out_over_in)

    def _first_call_excess(self, first_host_s: float, second_host_s: float) -> float:
        """A size's first call over its second: the compute's own calls where fullpipe makes
        them (a tensor function: not fullpipe's first batch, its lane buffers and events), else
        the two batches' host time."""
        tc = self._tc
        if tc is not None and len(tc.last_calls) == 2:
            first, second = tc.last_calls
            return first - second
        return first_host_s - second_host_s

    @staticmethod
    def _first_call_costly(excess_s: float, point: dict[str, float], chunks: float) -> bool:
        """A tensor function's first call at its larger probe size took SHAPE_COST_SHARE of the
        run predicted from that size (``chunks`` of it, each its slowest stage's time) more than
        its second (``excess_s``, and at least FIRST_CALL_FLOOR_S): often the first call of all,
        its one-time costs with a new shape's. Then a second size may cost a good part of the
        run too. mobilenet_v3_large over 4096 images (an H200, session 47, p299, p300): its
        first call at 410 rows 2.1-2.5 s, its second 5 ms; a new shape after it 1.7-1.8 s, the
        run ~100 ms; with a fixed chunk of 410 rows its first run took 2.6 s, with both probe
        sizes 4.4 s."""
        return excess_s >= FIRST_CALL_FLOOR_S and excess_s >= SHAPE_COST_SHARE * chunks * max(point.values())

    def _tuned_at_one_size(self, point: dict[str, float], rows: int, smaller: int, row_bytes: int, out: Any,
                           run_args: dict, free_before: int, excess_s: float) -> "_Tuned":
        """The models of a first run probed at one size (``rows``): each stage's line from the
        origin through it, the host's time per batch its own; the run keeps that size, and the
        next run probes ``smaller`` (:meth:`_measure` with ``known``)."""
        nbytes = rows * row_bytes
        models = {st: fit_stage(st, nbytes, t, nbytes, t) for st, t in point.items() if st != "host"}
        out_over_in = self._out_over_in(out, run_args, row_bytes)
        return _Tuned(models, StageModel(point["host"], 0.0), out_over_in,
                      self._compute_bytes(self.form == "tensor", free_before, nbytes, out_over_in),
                      free_before // 2, nbytes, nbytes, deferred_rows=smaller, probe_points={rows: dict(point)},
                      first_call_s=excess_s)

    def _probes_each_size_twice(self) -> bool:
        """A framework model's first call at a shape may pay its autotuning or per-shape
        setup: its probes run each size twice (and the first call over the second is the
        new-shape cost)."""
        return self.form == "tensor"

    def _probe(self, batches: list[P.Batch], stage_in: str, stage_out: str | None, first_lane: int = 0,
               **run_args: Any) -> PipelineStats:
        """A probe run for chunk="auto": each batch waits for the previous one, with
        per-stage timing events, never as a graph (the stage times are what it is for);
        each batch size on a lane of its own (_probe_lanes), from ``first_lane`` on."""
        self._probe_first_lane = first_lane
        try:
            return self._execute(batches, stage_in, stage_out, PROBE_RUN, **run_args)
        finally:
            self._probe_first_lane = 0

    def _run_mode(self) -> RunMode:
        # A graph's nodes are fixed: no per-batch timing events in graph mode (stream form).
        graphs = self.graph and self.form != "tensor"
        return RunMode(timing=bool(self.timing) and not graphs, synchronous=self.synchronous, graphs=graphs,
                       every_batch=self.timing is True)

    def _prefetch_for(self, mode: RunMode, ring_in: bool, threads: int = 1) -> int:
        """Batches whose front half (allocate, H2D) is enqueued before this batch's
        compute. At most N-1: the next front on this batch's own stream would sit
        before its compute. With compute threads, at most N-threads: a lane's next
        front (an H2D into its lane buffer) goes in only after that lane's last call is
        back, and up to ``threads`` calls are out. At most K-1 with ring input: the
        stager would otherwise wait for this batch's own H2D before the compute is even
        called."""
        if mode.synchronous or mode.graphs:
            return 0
        most = self.n_streams - threads
        n = most if self.prefetch is None else min(self.prefetch, most)
        if ring_in:
            n = min(n, self.slots - 1)
        return max(n, 0)

    # ------------------------------------------------------------------ the loop
    def _execute(self, batches: list[P.Batch], stage_in: str, stage_out: str | None,
                 mode: RunMode | None = None, outputs: "_Outputs | None" = None,
                 usage: PinnedUsage | None = None, kind: HostKind | None = None,
                 in_place: bool = False, bucket: bool = False) -> PipelineStats:
        """Enqueue every batch (the host-driver pattern of the module docstring), wait
        once at the end, and return what the run did (``in_place``: the outputs are the
        inputs' memory; ``bucket``: batches of new shapes may run at seen ones: TensorCompute.begin_run)."""
        mode = self._run_mode() if mode is None else mode
        free_collected()  # pinned frees the collector queued: here, before any graph capture of this run
        n, K, N = len(batches), self.slots, self.n_streams
        staging = {"input": stage_in, "output": stage_out or "none"}
        bulk = None
        if outputs is not None:
            outputs.bulk = outputs.lazy_bulk = None
        # chunk="auto" probes measure the ring's per-batch costs (the chunks they choose are
        # staged through it), never bulk staging
        if self.staging == "auto" and "ring" in (stage_in, stage_out) and mode is not PROBE_RUN:
            bulk, stage_in, stage_out = self._bulk(batches, stage_in, stage_out, outputs, usage)
            # the stats say "bulk"; the protocol sees those sides as pinned ("direct")
            if staging["input"] == "ring" and stage_in == "direct":
                staging["input"] = "bulk"
            if staging["output"] == "ring" and stage_out == "direct":
                staging["output"] = "bulk"
        ring_in, ring_out, has_out = stage_in == "ring", stage_out == "ring", stage_out is not None
        if self._rec is not None and staging["input"] == "direct":
            self._direct_records(batches)
        stats = PipelineStats(
            batches=n, streams=N, slots=K, recycle=self.recycle, copy_streams=self.copy_streams,
            staging=staging,
            bytes_in=sum(b.in_bytes for b in batches), bytes_out=sum(b.out_bytes for b in batches),
        )
        try:  # until the run's own try below: a failure here gives the bulk blocks back
            if ring_in:
                self._ring_in.ensure(max(b.in_bytes for b in batches), usage)
            if ring_out and outputs is None:
                self._ring_out.ensure(max(b.out_bytes for b in batches), usage)
            in_dtype = batches[0].src.dtype
            out_dtype = batches[0].dst.dtype if has_out and batches[0].dst is not None else None
            gx = self._graphs if mode.graphs else None  # graph=True: see graphs.py
            graph_bytes = 0  # graph=True: the device memory of the run's largest batch
            if gx is not None:
                graph_bytes = max(_device_bytes(b, has_out and self.compute is not None) for b in batches)
                gx.begin_run(GraphRun.of(self.compute, stage_in, stage_out, in_dtype, out_dtype),
                             self._routes, self._ring_in, self._ring_out, device_bytes=graph_bytes)
            tc = self._tc if self.form == "tensor" else None
            new_shapes_before = tc.new_shape_calls if tc is not None else 0
            if tc is not None:
                tc.begin_run(kind.torch_dtype if kind is not None and kind.reinterpreted else None, in_dtype,
                             in_place=in_place, bucket=bucket, pad_shapes=self.pad_shapes)
                if tc.graphs is not None:
                    tc.graphs.begin_run()
            if outputs is not None:
                outputs.begin_execute(batches, self._ring_out if ring_out else None)
        except BaseException:
            if bulk is not None:
                bulk.give_back()
            raise

        run = _Run(batches, stop=threading.Event(), lanes=N)
        run.lazy_out = outputs is not None
        run.bulk_out = bulk if bulk is not None and staging["output"] == "bulk" else None
        run.bulk_in = bulk if bulk is not None and staging["input"] == "bulk" else None
        # Who does the ring's memmoves: this thread for small batches, staging threads
        # for the rest (pageable.py says why).
        run.inline_in = ring_in and max(b.in_bytes for b in batches) <= pageable.INLINE_MAX_BYTES
        out_bound = _largest_output(batches, outputs) if ring_out else None
        run.inline_out = out_bound is not None and out_bound <= pageable.INLINE_MAX_BYTES
        stats.host_copies = {side: ("caller" if inline else "threads")
                             for side, used, inline in (("input", ring_in, run.inline_in),
                                                        ("output", ring_out, run.inline_out)) if used}
        self._running = True
        threads = (ring_in and not run.inline_in) or (ring_out and not run.inline_out)
        switch = short_switch_interval() if threads else contextlib.nullcontext()
        drained = True
        pos, b = 0, batches[0]
        t_start = time.perf_counter()
        try:
            with switch:
                proto = self._open_run(run, mode, gx, ring_in, ring_out, has_out, in_dtype, out_dtype,
                                             tc, outputs, usage)
                t_loop = time.perf_counter()
                if gx is not None:
                    if run.bulk_in is not None:  # (a graph's H2Ds may read any batch's input)
                        run.bulk_in.wait_inputs()
                    at = [0]
                    try:
                        whole = self._whole_run(run, gx, batches, ring_in, ring_out, graph_bytes, mode, at)
                    finally:
                        pos = at[0]
                        b = batches[pos]
                    if not whole:
                        for pos, b in enumerate(batches):
                            self._one_graph_batch(run, gx, proto, b, pos, ring_in, ring_out, mode)
                else:
                    threads = self._threads_for(mode, tc)
                    group = self._call_group(mode, tc, ring_in) if threads == 1 else 1
                    # (grouped calls: the H2Ds ahead of a group's first call; _grouped_loop needs no L)
                    L = self._prefetch_for(mode, ring_in, threads) if group == 1 else group - 1
                    stats.prefetch, stats.call_group = L, group
                    at = [0]  # the batch the loop works on, for the failure note
                    try:
                        self._eager_loop(run, proto, batches, L, ring_in, ring_out, mode, at, tc, threads, group)
                    finally:
                        pos = at[0]
                        b = batches[pos]
                if run.deferred is not None:
                    run.deferred.flush(self._routes[0].d2h)
                if run.lanes is not None:  # in stream order, behind each lane's last batch
                    run.lanes.give_back()
                loop_s, loop_wait_s = time.perf_counter() - t_loop, run.wait_s
                if run.finished is not None:
                    self._drain_while_finishing(run)
                stats.gpu_span_ms = self._finish_run(run)
                if bulk is not None:  # every D2H is done: the outputs to the caller's arrays
                    t_drain = time.perf_counter()
                    stats.bulk_drained_early = bulk.drained_early
                    bulk.drain_outputs(self._copier("out"))
                    stats.bulk_drain_ms = (time.perf_counter() - t_drain) * 1e3
                if tc is not None and outputs is not None and outputs.rows is None:  # for the next run's _bulk
                    tc.out_row_bytes = max(tc.out_row_bytes, outputs.max_row_bytes)
        except BaseException as exc:
            released, drained = self._abort(run)
            if gx is not None:
                gx.after_abort(drained)
            _annotate(exc, b, pos, n, released, K)
            raise
        finally:
            if bulk is not None:
                bulk.wait_copies()  # host copies started during the run write the caller's arrays
            if bulk is not None and drained:  # (not drained: a GPU copy may still read or write them)
                bulk.give_back()
            if drained:
                for sig in run.signals:
                    sig.close()
            else:  # a host function may still run some day: keep its semaphore's memory alive
                _ORPHANED_SIGNALS.extend(run.signals)
            if tc is not None:
                tc.release()
            self._running = False
        stats.wall_ms = (time.perf_counter() - t_start) * 1e3
        stats.pinned_ring_bytes = (self._ring_in.pinned_bytes if ring_in else 0) + (
            self._ring_out.pinned_bytes if ring_out else 0)
        if outputs is not None:
            stats.bytes_out = sum(bb.out_bytes for bb in batches)
        stats.enqueue_us_per_batch = sum(run.enqueue_us) / n
        stats.bulk_uploads = run.inputs.uploads if run.inputs is not None else 0
        stats.input_shapes = len({bb.in_shape for bb in batches})
        stats.loop_us_per_batch = max(loop_s - loop_wait_s - run.call_wait_s, 0.0) * 1e6 / n
        stats.host_wait_ms = run.wait_s * 1e3
        stats.enqueue_us = run.enqueue_us
        call_s = sum(run.clock)
        compute_us = call_s * 1e6 / n
        front_us = sum(run.front_us) / n
        # calls on this thread are inside its enqueue time; calls on compute threads are not
        here_us = compute_us if run.calls is None else 0.0
        stats.host_us = {"front": front_us, "compute_call": compute_us,
                         "back": max(stats.enqueue_us_per_batch - front_us - here_us, 0.0),
                         "staging_wait": stats.host_wait_ms * 1e3 / n}
        if run.calls is not None:
            stats.compute_threads = {"threads": run.calls.threads, "wait_ms": run.call_wait_s * 1e3}
        stats.timings = run.timings
        stats.host_copy_s = {"stage_in": run.stager.copy_s if run.stager is not None else [],
                             "drain_out": run.drainer.copy_s if run.drainer is not None else []}
        if gx is not None:
            stats.graph = self._run_graphs.stats(gx.run_stats(n))  # type: ignore[union-attr]
        elif tc is not None and tc.graphs is not None:
            stats.graph = tc.graphs.run_stats(n)
        stats.compute_serial = tc.serial if tc is not None else None
        if tc is not None and tc.padded_batches:
            stats.padded = {"batches": tc.padded_batches, "rows": tc.padded_rows}
        stats.timed_batches = len(run.timings)
        if run.timings:
            stats.busy_ms = busy_from_timings(run.timings, self.compute is not None, has_out)
            if len(run.timings) < n:  # sampled: scaled by the bytes each stage moved, at most the span
                stats.busy_ms = _scaled_busy(stats.busy_ms, run.timings, batches, stats.gpu_span_ms)
            # What padding a row costs (pad_shapes), from a run whose calls were all at shapes seen
            # before, none captured into a graph: a new shape's first call paces the GPU at its
            # host's speed (resnet50's first call, ~400 ms on an H200, spans its compute's events
            # where a run takes ~6 ms a chunk), as does a capture (f run eagerly inside it). Learnt
            # from chunk="auto"'s probes, padding looked dearer than a new shape and the first runs
            # of resnet50 and ViT-B/16 left their last chunk a new shape (session 46, call 3).
            if (tc is not None and stats.busy_ms.get("compute") and tc.new_shape_calls == new_shapes_before
                    and not (tc.graphs is not None and tc.graphs.captures)):
                tc.learn_compute_time([b.in_shape for b in batches], stats.busy_ms["compute"] * 1e-3)
        return stats

    def _eager_loop(self, run: "_Run", proto: Protocol, batches: list[P.Batch], L: int, ring_in: bool,
                    ring_out: bool, mode: RunMode, at: list, tc: TensorCompute | None, threads: int,
                    group: int = 1) -> None:
        """Issue order: the fronts (allocate, H2D) of batches j..j+L, then the back
        (compute, D2H, free) of batch j. With L >= 1 the next batches' H2Ds are in
        flight while the compute call of batch j runs on the host. With compute threads,
        :meth:`_threaded_loop` instead, and with ``group`` > 1 :meth:`_grouped_loop`,
        each with the same fronts and bookkeeping."""
        n, K, N = len(batches), self.slots, self.n_streams
        lane_of = (_probe_lanes(batches, N, self._probe_first_lane) if mode is PROBE_RUN
                   else [pos % N for pos in range(n)])
        stager, drainer, routes = run.stager, run.drainer, self._routes
        ring_in_addr, ring_out_addr = self._ring_in.address, self._ring_out.address
        synchronous, timing = mode.synchronous, mode.timing
        enqueue_us, front_us, pending = run.enqueue_us, run.front_us, run.pending
        perf = time.perf_counter
        ring_addr = ring_out and not run.lazy_out
        bulk_out, copier_out = run.bulk_out, (self._copier("out") if run.bulk_out is not None else None)
        bulk_in = run.bulk_in  # inputs copied into their block in groups while the first batches run
        inputs = run.inputs  # ... and uploaded to the GPU a group at a time (or None: one H2D per batch)
        finished = run.finished = _Finished(N, batches[0].index) if bulk_out is not None and timing else None
        front, back = proto.front, proto.back
        nxt = 0  # the next batch whose front half is to be enqueued

        def fronts_upto(last: int) -> None:
            nonlocal nxt
            while nxt < n and nxt <= last:
                at[0] = nxt
                bb = batches[nxt]
                slot = nxt % K
                if ring_in:
                    tw = perf()
                    stager.take(nxt)  # type: ignore[union-attr]
                    run.wait_s += perf() - tw
                    src = ring_in_addr(slot)
                elif inputs is not None:
                    src = inputs.address(nxt, bb)
                else:
                    if bulk_in is not None:
                        bulk_in.wait_input(nxt)
                    src = bb.src_addr
                t0 = perf()
                pending.append(front(bb, lane_of[nxt], slot, src))
                front_us.append((perf() - t0) * 1e6)
                nxt += 1

        def dst(b: P.Batch, slot: int) -> int:
            """The D2H's host address (a lazy output: dst_of decides)."""
            return ring_out_addr(slot) if ring_addr else b.dst_addr

        def settle(pos: int, b: P.Batch, slot: int, t0: float, off: float, before_us: float) -> float:
            """After batch ``pos``'s back half (begun at ``t0``, with ``off`` of run.off_s
            then): its output slot to the drainer, its host time (``before_us``: its front's
            and any more before ``t0``), and every few batches the finished batches' events
            and bulk outputs. Returns the time its host time ends."""
            if ring_out:
                drainer.submit(slot, b.dst_addr, b.drain_bytes)  # type: ignore[union-attr]
            t1 = perf()
            enqueue_us.append(before_us + (t1 - t0 - (run.off_s - off)) * 1e6)
            # ---- bookkeeping, off the critical path of the GPU (every few batches: between the
            # calls of a host-bound compute each look at the events costs ~8 us, session 17)
            if timing and pos % HARVEST_EVERY == 0:
                self._harvest(run.inflight, run.timings, block=False)
                if finished is not None:  # the outputs of the batches done, to the caller's arrays
                    bulk_out.drain_some(finished.prefix(run.timings), copier_out)  # type: ignore[union-attr]
            return t1

        if threads > 1:
            self._threaded_loop(run, proto, fronts_upto, dst, settle, n, L, threads, at, tc)
            return
        if group > 1:
            self._grouped_loop(run, proto, fronts_upto, dst, settle, n, group, at)
            return
        for pos in range(n):
            fronts_upto(pos + L)
            at[0] = pos
            p = pending[0]
            b = p.b
            slot = p.slot
            off = run.off_s
            t0 = perf()
            back(p, dst(b, slot))
            pending.popleft()
            t1 = settle(pos, b, slot, t0, off, front_us[pos])
            if synchronous:
                with drv.translated("cuStreamSynchronize"):
                    routes[lane_of[pos]].d2h_stream.sync()
                run.wait_s += perf() - t1

    def _call_group(self, mode: RunMode, tc: TensorCompute | None, ring_in: bool) -> int:
        """How many batches' compute calls go back to back (1: one batch at a time).

        A tensor function's call is mostly the framework's own host code (PyTorch's
        dispatch and launches). Between two batches fullpipe runs its own (the D2H, the
        output's place, events, the next fronts), and the next call then runs slower:
        an encoder layer's call inside fullpipe's loop took 541 us right after
        fullpipe's work against 465 us for the same call repeated at once (p194, session
        29). So the calls of up to one batch per lane go one after another, then their
        back halves, then the next group's fronts: one lane's next front still goes in
        after that lane's back (the lane buffer), so nothing is prefetched beyond the
        group. Not for stream-form computes (a launch or two: nothing to win), graphs
        (a replay), synchronous runs and probes (one batch at a time by design); at most
        ``prefetch`` + 1 where the option is set (the group's first call has the other
        H2Ds of its group ahead of it)."""
        if tc is None or tc.graphs is not None or mode.synchronous or mode.graphs:
            return 1
        group = min(self.n_streams, MAX_CALL_GROUP)
        if self.prefetch is not None:  # (the group's first call has the rest of its H2Ds ahead of it)
            group = min(group, self.prefetch + 1)
        if ring_in:  # (the group's fronts take that many ring slots before its first call)
            group = min(group, self.slots - 1)
        return max(group, 1)

    def _grouped_loop(self, run: "_Run", proto: Protocol, fronts_upto: Callable[[int], None],
                      dst: Callable[[P.Batch, int], int], settle: Callable[..., float], n: int, group: int,
                      at: list) -> None:
        """The eager loop with the compute calls of ``group`` consecutive batches (each on
        its own lane) back to back: the group's fronts, its calls, then its back halves
        in batch order (:meth:`_call_group` says why). A failing call leaves the group's
        batches in ``run.pending``, as the eager loop does: the run is taken down the same way."""
        pending, front_us = run.pending, run.front_us
        call, finish = proto.call, proto.finish
        perf = time.perf_counter
        called: list[tuple[Any, float]] = []  # per batch of the group: (what call returned, its host us)
        for first in range(0, n, group):
            last = min(first + group, n) - 1
            fronts_upto(last)
            for pos in range(first, last + 1):
                at[0] = pos
                off = run.off_s
                t0 = perf()
                got = call(pending[pos - first])
                called.append((got, (perf() - t0 - (run.off_s - off)) * 1e6))
            for pos in range(first, last + 1):
                at[0] = pos
                p = pending[0]
                b, slot = p.b, p.slot
                got, call_us = called[pos - first]
                off = run.off_s
                t0 = perf()
                finish(p, got, dst(b, slot))
                pending.popleft()
                settle(pos, b, slot, t0, off, front_us[pos] + call_us)
            called.clear()

    def _threads_for(self, mode: RunMode, tc: TensorCompute | None) -> int:
        """The host threads that call the compute this run (1: the enqueueing thread; also
        for a pipeline run from inside a call on a compute thread, whose calls would wait
        behind that very call)."""
        if (tc is not None and tc.graphs is not None) or mode.synchronous or self.n_streams < 2:
            return 1
        if ct.on_compute_thread():
            return 1
        return self._list_threads or self.compute_threads

    def _threaded_loop(self, run: "_Run", proto: Protocol, fronts_upto: Callable[[int], None],
                       dst: Callable[[P.Batch, int], int], settle: Callable[..., float], n: int, L: int,
                       threads: int, at: list, tc: TensorCompute | None) -> None:
        """The eager loop (its ``fronts_upto``, ``dst`` and ``settle``) with each batch's
        compute call on one of ``threads`` host threads (compute_threads.py): this thread
        enqueues the fronts, sends the calls, and once a call is back, its batch's D2H and
        the rest. Up to ``threads`` calls are out at once, each on its own lane; the
        prefetch ``L`` is at most streams - threads (_prefetch_for), so a lane's next
        front goes in only after that lane's last call is back: a lane buffer is not
        overwritten under a call still enqueueing its reads."""
        W = threads - 1  # calls out besides the newest
        pending = run.pending
        call, finish = proto.call, proto.finish
        perf = time.perf_counter
        # a call on a worker needs the device's context current there: a stream-form compute
        # launches through the driver, and PyTorch's cuBLAS warns without one
        current = functools.partial(ensure_current, self._dev_index)
        modes = ct.TorchModes(tc.fw.torch, current) if tc is not None else ct.InContext(current)
        calls = run.calls = ct.ComputeCalls(threads, modes)
        sent: collections.deque = collections.deque()  # [position, Pending, host us to send it]

        def finish_oldest() -> None:
            pos, p, send_us = sent[0]
            at[0] = pos
            b, slot = p.b, p.slot
            tw = perf()
            got = calls.take()  # (its exception is raised here)
            t0 = perf()
            run.call_wait_s += t0 - tw
            off = run.off_s
            finish(p, got, dst(b, slot))
            sent.popleft()
            settle(pos, b, slot, t0, off, run.front_us[pos] + send_us)

        try:
            for pos in range(n):
                fronts_upto(pos + L)
                at[0] = pos
                p = pending[0]
                entry = [pos, p, 0.0]
                sent.append(entry)  # (before it leaves pending: a Ctrl-C between loses neither)
                pending.popleft()
                t0 = perf()
                calls.send(call, p)
                entry[2] = (perf() - t0) * 1e6
                if len(sent) > W:
                    finish_oldest()
            while sent:
                finish_oldest()
        except BaseException:
            calls.drain()  # no call may still enqueue work while the run is taken down
            for _, p, _ in reversed(sent):  # their timing events go back with the fronts'
                if not (pending and pending[0] is p):
                    pending.appendleft(p)
            raise

    def _whole_run(self, run: "_Run", gx: BatchGraphs, batches: list[P.Batch], ring_in: bool, ring_out: bool,
                   device_bytes: int, mode: RunMode, at: list) -> bool:
        """graph=True, pinned on both sides: a run that repeats an earlier one (same
        batches, host addresses and compute) is one launch of a graph of the whole run,
        captured the second time it is seen (run_graphs.py). False: go batch by batch."""
        rg = self._run_graphs
        assert rg is not None
        rg.begin_run()
        if ring_in or ring_out or mode.synchronous or not rg.enabled:
            return False
        t0 = time.perf_counter()
        key = rg.key(self.compute, gx.run_key, self.n_streams, batches)
        g = rg.lookup(key)
        if g is None:
            if not rg.seen_before(key):
                return False
            g = rg.capture(key, batches, self._routes, device_bytes, at)
            run.off_s += rg.capture_s
        rg.launch(g, self._hs[0])
        n = len(batches)
        per_batch_us = max(time.perf_counter() - t0 - rg.capture_s, 0.0) * 1e6 / n
        run.enqueue_us.extend([per_batch_us] * n)
        run.front_us.extend([0.0] * n)
        return True

    def _one_graph_batch(self, run: "_Run", gx: BatchGraphs, proto: Protocol, b: P.Batch, pos: int,
                         ring_in: bool, ring_out: bool, mode: RunMode) -> None:
        """graph=True (stream form): batch b as one launch of its graph, or through the
        protocol when it has none (the graph cache is full)."""
        N, K = self.n_streams, self.slots
        lane, slot = pos % N, pos % K
        if ring_in:
            tw = time.perf_counter()
            run.stager.take(pos)  # type: ignore[union-attr]
            run.wait_s += time.perf_counter() - tw
            src = self._ring_in.address(slot)
        else:
            src = b.src_addr
        dst = self._ring_out.address(slot) if ring_out else b.dst_addr
        off = run.off_s
        t0 = time.perf_counter()
        g = self._graph_for(run, gx, b, slot, lane, src, dst)
        if g is not None:
            gx.launch(g, src, dst, self._hs[lane])
        else:
            proto.back(proto.front(b, lane, slot, src), dst)
        if ring_out:
            run.drainer.submit(slot, b.dst_addr, b.drain_bytes)  # type: ignore[union-attr]
        t1 = time.perf_counter()
        run.front_us.append(0.0)
        run.enqueue_us.append((t1 - t0 - (run.off_s - off)) * 1e6)
        if mode.synchronous:
            with drv.translated("cuStreamSynchronize"):
                self._routes[lane].d2h_stream.sync()
            run.wait_s += time.perf_counter() - t1

    def _open_run(self, run: "_Run", mode: RunMode, gx: BatchGraphs | None, ring_in: bool, ring_out: bool,
                  has_out: bool, in_dtype: Any, out_dtype: Any, tc: TensorCompute | None,
                  outputs: "_Outputs | None", usage: PinnedUsage | None) -> Protocol:
        """Start the staging threads with the ring's slot signals, make every stream wait
        for one start event, and build this run's protocol (its two halves)."""
        K = self.slots
        free_in = ready_out = None
        if ring_in:
            if gx is not None:  # graph mode: the graphs' host nodes post these: they outlive the run
                free_in = gx.ring_signals("in")
            else:
                free_in = [make_signal(self.recycle, self.device, initial=1) for _ in range(K)]
                run.signals += free_in
            sources = ([bb.src for bb in run.batches] if self._rec is None else
                       [self._rec.parts_of(bb) or bb.src for bb in run.batches])
            run.stager = (InlineInputStager(self._ring_in, free_in, sources, self._copier("in"), run.stop)
                          if run.inline_in else
                          InputStager(self._ring_in, free_in, sources, self._copier("in"), run.stop,
                                      on_start=self._worker_setup))
            run.stager.start()
        if ring_out:
            if gx is not None:
                ready_out = gx.ring_signals("out")
            else:
                ready_out = [make_signal(self.recycle, self.device, initial=0) for _ in range(K)]
                run.signals += ready_out
            free_out = [threading.Semaphore(1) for _ in range(K)]
            run.drainer = (InlineOutputDrainer(self._ring_out, ready_out, free_out, self._copier("out"), run.stop)
                           if run.inline_out else
                           OutputDrainer(self._ring_out, ready_out, free_out, self._copier("out"), run.stop,
                                         on_start=self._worker_setup))
            run.drainer.start()
        if run.bulk_in is not None and gx is None and self._lanes is not None:
            # the inputs go to the GPU a group at a time (bulk.DeviceInputs), into one block
            # allocated on stream 0 before the start event all streams wait for
            h0 = self._hs[0]
            ptr = self.pool.allocate_ptr(run.bulk_in.input_bytes, h0)
            run.live.append([ptr, h0, None])  # (freed by _finish_run, or by _abort on failure)
            run.inputs = DeviceInputs(run.bulk_in, ptr, self._hot, self._hs[:self.n_streams], self._hs[-1],
                                      self._upload_h)
        # One start event that every stream waits for: a common time origin. (Through the hot
        # path, which keeps the GIL, as the loop's records and waits do: a binding's call lets
        # it go, and py-spy put 20-40 us on each such call at a run's end, session 54.)
        hot, hs, start_h = self._hot, self._hs, self._start_h
        hot.event_record(start_h, hs[0])
        for h in hs[1:]:
            hot.stream_wait_event(h, start_h)
        if self.copy_streams:
            run.deferred = DeferredFree(self.pool, self._hot, self._handoff_h[1 + self.n_streams:], run.live)
        dst_of = None
        if outputs is not None:
            ring_out_addr = self._ring_out.address

            def dst_of(p: Any, dst: int, info: Any) -> int:
                b = p.b
                via_ring = outputs.place(b, *info, usage)  # type: ignore[union-attr]
                return ring_out_addr(p.slot) if via_ring else b.dst_addr
        inflight = run.inflight
        alloc, free, live = self.pool.allocate_ptr, self.pool.free_ptr, run.live
        writes_output = has_out and self.compute is not None and tc is None
        on_device = run.inputs is not None
        if on_device and tc is not None:  # each batch's x cut from one tensor over the inputs' block
            tc.use_block(run.inputs.device_ptr, run.bulk_in.input_bytes)  # type: ignore[union-attr]
        # One buffer per lane (lanes.py): not with graph=True (graph memory, per batch), nor when
        # the inputs are on the device already and the compute writes no output region
        if self._lanes is not None and gx is None and (writes_output or not on_device):
            run.lanes = self._lanes  # first: a failure inside take() gives back what it took
            self._lanes.take(max(P.align_up(b.out_bytes, DEVICE_ALIGN) if on_device else
                                 _device_bytes(b, writes_output) for b in run.batches))
            alloc, free, live = self._lanes.allocate_ptr, self._lanes.free_ptr, None
            if tc is not None:
                tc.use_lanes(self._lanes.addresses())
        return protocol_halves(
            hot=self._hot, routes=self._routes, compute=self.compute, has_out=has_out, in_dtype=in_dtype,
            out_dtype=out_dtype, alloc=alloc, free=free, deferred=run.deferred,
            live=live, free_in=None if free_in is None else [sig.arm for sig in free_in],
            ready_out=None if ready_out is None else [sig.arm for sig in ready_out],
            stage_events=self._stage_events(run, mode),
            in_flight=(lambda index, evs: inflight.append((index, evs))) if mode.timing else None,
            acquire_out=run.acquire_out if ring_out else None,
            compute_out=tc if tc is not None else None, dst_of=dst_of, clock=run.clock,
            device_index=self._dev_index, inputs_on_device=on_device,
            sources_pinned=self.staging != "direct",  # (only staging="direct" hands pageable arrays to the H2D)
        )

    def _graph_for(self, run: "_Run", gx: BatchGraphs, b: P.Batch, slot: int, lane: int, src: int,
                   dst: int) -> Any:
        """graph=True: batch b's graph, captured on first use (the capture's time is not
        enqueue time: stats.graph["capture_ms"]), or None: run it through the protocol.
        The graph writes the output slot, and a capture records its signal: the drain
        thread must be done with the slot before either."""
        drainer = run.drainer
        if drainer is not None:
            run.acquire_out(slot)
        g, capture_s = gx.graph_for(b, slot, lane, src, dst)
        run.off_s += capture_s
        if g is None and drainer is not None:  # the protocol acquires it again
            drainer.free[slot].release()
        return g

    def _finish_run(self, run: "_Run") -> float:
        """The one wait at the end: join every stream into stream 0, wait for the end
        event and the staging threads, read the last stage times. Returns the GPU span
        (ms, start event to end event)."""
        hot, hs, end_h = self._hot, self._hs, self._end_h  # (the hot path: see _open_run)
        for h, j_ev in zip(hs[1:], self._join_h[1:]):
            hot.event_record(j_ev, h)
            hot.stream_wait_event(hs[0], j_ev)
        if run.inputs is not None:  # behind every batch of every stream
            entry = next(e for e in run.live if e[0] == run.inputs.device_ptr)
            self.pool.free_ptr(entry[0], entry[1])
            run.live.remove(entry)
        hot.event_record(end_h, hs[0])
        tw = time.perf_counter()
        if run.drainer is not None:
            run.drainer.finish()
            run.drainer.wait_done()
        self._check("cuEventSynchronize", self._drv.cuEventSynchronize(self._end_event.handle))  # (lets the GIL go)
        if run.stager is not None:
            run.stager.join()
            run.stager.raise_error()
        run.wait_s += time.perf_counter() - tw
        self._harvest(run.inflight, run.timings, block=True)
        return hot.elapsed_ms(self._start_h, end_h)

    def _drain_while_finishing(self, run: "_Run") -> None:
        """Every batch is enqueued, and the last ones are timed (timed_positions): copy
        each bulk-staged output to the caller's array as soon as its batch is done,
        while the GPU finishes the rest, rather than all of them after the last batch
        (on this thread, which only waits for the GPU here: BulkStaging.drain_here)."""
        bulk_out, copier, d = run.bulk_out, self._copier("out"), self._drv
        tw = time.perf_counter()
        while run.inflight:
            self._check("cuEventSynchronize", d.cuEventSynchronize(run.inflight[0][1][3][1]))
            self._harvest(run.inflight, run.timings, block=False)
            bulk_out.drain_here(run.finished.prefix(run.timings), copier)  # type: ignore[union-attr]
        run.wait_s += time.perf_counter() - tw

    def _harvest(self, inflight: collections.deque, timings: list[BatchTiming], block: bool) -> None:
        """Read the stage times of batches whose last event has completed (in order).
        Only batches whose back half is enqueued are in ``inflight``."""
        hot, start_h = self._hot, self._start_h
        elapsed = hot.elapsed_ms
        while inflight:
            index, evs = inflight[0]
            if not block and not hot.event_done(evs[3][1]):
                return
            t = (elapsed(start_h, evs[0][1]), elapsed(start_h, evs[1][1]), elapsed(start_h, evs[2][1]),
                 elapsed(start_h, evs[3][1]))
            timings.append(BatchTiming(index, t))
            inflight.popleft()
            self._give_back_events(evs)

    def _abort(self, run: "_Run") -> tuple[int, bool]:
        """Drain in-flight work and give everything back. Returns the number of device
        allocations freed here (the rest were already freed in stream order) and whether
        every stream drained."""
        run.stop.set()
        drained = True
        # Drain first: with copy_streams a live buffer may still be used on a stream
        # other than the one it is freed on.
        for s in self._all_streams:
            try:
                s.sync()  # after this every host function enqueued on s has run
            except Exception:
                drained = False
        freed = 0
        for ptr, h, _ in run.live:
            try:
                self.pool.free_ptr(ptr, h)
                freed += 1
            except Exception:  # the context may be broken (sticky CUDA error): nothing more to do
                pass
        run.live.clear()
        if run.lanes is not None:
            try:
                freed += run.lanes.give_back()
            except Exception:  # the context may be broken: nothing more to do
                pass
        if freed:  # stream-ordered frees: done before the caller sees the exception (and the pool's stats)
            for s in self._all_streams:
                with contextlib.suppress(Exception):
                    s.sync()
        for w in (run.stager, run.drainer):
            if w is not None:
                w.join(timeout=10.0)
        given = set()  # (a batch whose finish failed after its events went in flight is in both)
        while run.inflight:
            _, evs = run.inflight.popleft()
            given.add(id(evs))
            self._give_back_events(evs)
        while run.pending:  # fronts whose back half never ran: their timing events
            p = run.pending.popleft()
            if p.ev and id(p.ev) not in given:
                given.add(id(p.ev))
                self._give_back_events(p.ev)
        return freed, drained


@dataclasses.dataclass(frozen=True)
class RunMode:
    """How one run treats its batches."""

    timing: bool  # four timing events per timed batch: per-stage stats
    synchronous: bool  # wait for each batch before the next
    graphs: bool  # one CUDA graph launch per batch (graphs.py)
    every_batch: bool = True  # False: timing="sampled" (timed_positions)


PROBE_RUN = RunMode(timing=True, synchronous=True, graphs=False)  # chunk="auto" probes: stage times
REFINE_BELOW = 0.8  # chunk="auto": a stage a run took less than this share of its model's time for is refined
MAX_REFINES = 3  # ... by at most this many runs per kind of work
# chunk="auto": a compute whose first call at a new batch shape took this much more host time than
# its second (a torchvision mobilenet_v3_small or efficientnet_b0 in fp16/bf16 channels_last: 1.5-2.9 s
# per shape on an H100 host, cuDNN's per-shape setup; resnet50 75-120 ms; session 19) is probed at
# no more sizes than the first two, and keeps its chunk from run to run (NEW_SHAPE_COSTLY_S, tensors.py);
# one whose new shape costs this share of a run's wall time keeps its chunk too (_Tuned.costly_shapes)
SHAPE_COST_SHARE = 0.1
# ... a first call this much slower than the next is a framework's setup, not fullpipe's own first batch (its
# lane buffers and events) or a host's hiccup, which take milliseconds (_first_call_costly)
FIRST_CALL_FLOOR_S = 0.02
PROBE_KEEP_WITHIN = 0.05  # chunk="auto"'s first choice keeps the largest probe size this close to the best (_tune)
FIT_SPREAD = 1.5  # ... refitted through runs at two chunk sizes at least this far apart
REFIT_ABOVE = 0.05  # ... when that line is this far from the model in use
KEEP_IF_CORRECTED_ABOVE = 0.5  # ... the run's chunk kept (if nearly the best) only if no model fell below this share
TIMING_STRIDE = 8  # timing="sampled": after the first 2 x streams batches, about every 8th is timed
MAX_CALL_GROUP = 4  # a tensor function's calls of at most this many batches go back to back (_call_group)
HARVEST_EVERY = 4  # the loop reads the finished batches' timing events every this many batches
# a pageable input pinned in place gets pinned outputs (from the pinned pool) from its 16th run: _Pins.pinned_outputs
PINNED_OUTPUTS_AFTER_RUNS = 16


def timing_stride(streams: int) -> int:
    """The sampled stride: the first from TIMING_STRIDE up that shares no factor with the
    stream count, so the timed batches visit every lane in turn (batch i runs on lane
    i % streams). A stride of 8 on 4 streams would time only lane 0: its stage times
    would stand for all lanes, and the other lanes' outputs would never be known done
    early (:class:`_Finished`)."""
    s = TIMING_STRIDE
    while math.gcd(s, streams) != 1:
        s += 1
    return s


def timed_positions(n: int, streams: int, mode: RunMode) -> set[int] | None:
    """The positions in a run of the batches that get timing events (``mode.timing``);
    None: all of them. Sampled: the first and the last 2 x streams, and about every 8th
    between them (the last ones say when each of the run's last outputs can be copied
    out: _drain_while_finishing)."""
    if mode.every_batch or n <= 4 * streams:
        return None
    edge = 2 * streams
    return set(range(edge)) | set(range(edge, n, timing_stride(streams))) | set(range(n - edge, n))


class _Finished:
    """How many batches, from a run's first, are known to be done, from the timed
    batches read so far. A timed batch's last event is recorded on its lane's D2H stream
    after its D2H, so when it has completed every earlier batch of the same lane is done
    too: with every batch timed that is each batch read; sampled, each lane is known done
    up to its latest timed batch read."""

    def __init__(self, lanes: int, first_index: int):
        self.lanes, self.first_index = lanes, first_index
        self._open = list(range(lanes))  # per lane: the position of its first batch not known done
        self._read = 0

    def prefix(self, timings: list[BatchTiming]) -> int:
        n_lanes, opened = self.lanes, self._open
        for t in timings[self._read:]:
            pos = t.index - self.first_index
            lane = pos % n_lanes
            opened[lane] = max(opened[lane], pos + n_lanes)
        self._read = len(timings)
        return min(opened)


class _Pins:
    """One run's arrays pinned in place by the pin-down cache (cuda/pin_cache.py): the
    entries it holds until it ends, and what they cost, for ``stats``. ``register``
    False (pin_in_place off, or staging not "auto"): nothing new is registered, but
    memory the cache registered for other runs is held while this run copies it
    directly (the driver says it is pinned; it must stay so). ``cache`` None: staging
    through the ring only, nothing to hold."""

    def __init__(self, cache: Any, register: bool = True):
        self.cache = cache
        self.register = register
        self.held: list[Any] = []
        self.sides: dict[str, str] = {}  # side -> "registered now" / "registered before"
        self.runs: dict[str, int] = {}  # side -> the fewest runs any of its entries has served (this one included)
        self.counted: set[int] = set()  # ids of the entries this run was counted in (held: alive till it ends)
        self.register_s = 0.0

    def pinned_list(self, side: str, objs: Sequence[Any], arrays: Sequence[np.ndarray],
                    ranges: list[tuple[int, int]], is_pinned: Callable[..., bool]) -> bool:
        """run_batches: is every batch of a side page-locked for this run? In the order
        of cost: a list the cache registered as it is (found by each batch's range); memory
        pinned by its owner (``is_pinned``: pin_memory(), the pool; the driver says the
        same of memory the cache registered, so what the cache holds is held all the
        same); else a list seen again, registered now (PinCache.acquire_list)."""
        if self.cache is None or not self.register:
            return self._pinned_held(side, arrays, is_pinned, ranges)
        entries = self.cache.find_list(ranges)
        dt = 0.0
        if entries is None:
            if all(is_pinned(a, r[0]) for a, r in zip(arrays, ranges)):
                if self._hold_each(side, arrays) == len(arrays):  # all of them inside ranges the cache registered
                    self.sides[side] = "registered before"
                return True
            if sum(n for _, n in ranges) >= self.cache.min_bytes:  # (a small list: not worth a look at owners)
                entries, dt = self.cache.acquire_list(list(zip(objs, arrays)))
        if entries is None:
            self._hold_each(side, arrays)  # (registered by an earlier run: must stay so while copied)
            return False
        self._hold(side, entries)
        self.register_s += dt
        self.sides[side] = "registered now" if dt else "registered before"
        return True

    def _pinned_held(self, side: str, arrays: Sequence[np.ndarray], is_pinned: Callable[..., bool],
                     ranges: list[tuple[int, int]] | None = None) -> bool:
        """Without registering: are the arrays (at ``ranges``' addresses, if read already)
        page-locked (by their owner, or by the cache for another run: then held for this one)?"""
        addresses = [None] * len(arrays) if ranges is None else [at for at, _ in ranges]
        if not all(is_pinned(a, at) for a, at in zip(arrays, addresses)):
            return False
        if self.cache is not None:
            self._hold_each(side, arrays)
        return True

    def pinned_outputs(self, side: str = "input") -> bool:
        """Are the outputs fullpipe makes for ``side`` (found page-locked) pinned, from the
        pinned pool, so that the D2H goes straight in? For memory its owner pinned, yes.
        For memory the cache pinned in place, which is pageable to the user, only once it
        has served ``PINNED_OUTPUTS_AFTER_RUNS`` runs: a ski-rental rule (pay the rent, the
        output staged through the ring, until it has added up to the price of buying, two
        pinned outputs of the whole size in the pool: a loop keeps the last one while the
        next run makes another). Measured on an H100 host (session 21, ``y = pipe.run(x)``
        of t*2, p127/p128): pinned at once, the outputs cost 0.2 s (256 MiB), 1.2 s (1 GiB)
        and 5-7 s (4.3 GB) more over their first two runs, then saved 17, 65 and 230 ms a
        run: 12-27 runs to pay back."""
        runs = self.runs.get(side)
        return runs is None or runs >= PINNED_OUTPUTS_AFTER_RUNS

    def _hold(self, side: str, entries: Sequence[Any]) -> None:
        """Hold ``entries`` for this run, each counted as serving one more run once."""
        self.held += entries
        if not entries:
            return
        new = []
        for e in entries:
            if id(e) not in self.counted:
                self.counted.add(id(e))
                new.append(e)
        if new:
            self.cache.count_run(new)
        fewest = min(e.runs for e in entries)
        self.runs[side] = min(self.runs.get(side, fewest), fewest)

    def _hold_each(self, side: str, arrays: Sequence[np.ndarray]) -> int:
        """Hold the entries the arrays lie in, if any; returns how many were."""
        found = [e for e in map(self.cache.hold, arrays) if e is not None]
        self._hold(side, found)
        return len(found)

    def settle(self) -> None:
        """After this run holds its entries: let go of arrays nobody holds any more (a
        safe point: no capture in progress on this thread, no copy of theirs in flight)."""
        if self.cache is not None:
            self.cache.flush()

    def pinned(self, side: str, obj: Any, arr: np.ndarray, is_pinned: Callable[[np.ndarray], bool]) -> bool:
        """Is ``arr`` (the host view of the user's ``obj``) page-locked for this run: by
        its owner (``is_pinned``), or by the cache, now or before?"""
        if self.cache is None or not self.register:
            return self._pinned_held(side, [arr], is_pinned)
        known: list[bool] = []  # the driver is asked at most once

        def pinned_by_owner() -> bool:
            if not known:
                known.append(is_pinned(arr))
            return known[0]

        entry, dt = self.cache.acquire(obj, arr, pinned_by_owner)
        if entry is None:
            if not pinned_by_owner():
                return False
            self._hold_each(side, [arr])  # (a small view inside an array the cache registered: held, counted)
            return True
        self._hold(side, [entry])
        self.register_s += dt
        self.sides[side] = "registered now" if dt else "registered before"
        return True

    def annotate(self, stats: PipelineStats) -> None:
        if not self.sides:
            return
        for side in self.sides:
            if stats.staging.get(side) == "direct":
                stats.staging[side] = "pinned in place"
        stats.pinned["in_place"] = {**self.sides, "register_ms": self.register_s * 1e3,
                                    "cache_bytes": self.cache.stats.registered_bytes}
        if "input" in self.runs:  # (new outputs pinned from PINNED_OUTPUTS_AFTER_RUNS runs of the input on)
            stats.pinned["in_place"]["input_runs"] = self.runs["input"]

    def release(self) -> None:
        while self.held:
            self.cache.release(self.held.pop())


class _Run:
    """What one run holds while it goes: its staging threads and signals, the device
    allocations not yet freed in stream order, the batches whose front half is
    enqueued and back half not yet, the timing events in flight, and the host's own
    clock."""

    def __init__(self, batches: list[P.Batch], stop: threading.Event, lanes: int = 1):
        self.batches, self.stop = batches, stop
        self.signals: list[Any] = []  # made for this run: closed at its end
        self.stager: InputStager | InlineInputStager | None = None
        self.drainer: OutputDrainer | InlineOutputDrainer | None = None
        self.inline_in = self.inline_out = False  # the ring's memmoves done by the enqueueing thread
        self.deferred: DeferredFree | None = None
        self.lanes: LaneBuffers | None = None  # the lane buffers taken for this run, if any
        self.live: list[list] = []  # [device pointer, stream, done event] not yet freed
        self.pending: collections.deque = collections.deque()  # protocol.Pending: fronts without backs
        self.inflight: collections.deque = collections.deque()  # (batch index, events) not yet read
        self.timings: list[BatchTiming] = []
        self.enqueue_us: list[float] = []
        self.front_us: list[float] = []  # per batch: the front half's host time
        self.clock = [0.0] * lanes  # seconds in the compute calls, per lane
        self.calls: ct.ComputeCalls | None = None  # compute calls on other threads (compute_threads.py)
        self.call_wait_s = 0.0  # the enqueueing thread waiting for those calls
        self.lazy_out = False  # outputs made from the first y (tensor functions): dst decided in back
        self.bulk_out: BulkStaging | None = None  # outputs staged in bulk: drained as batches finish
        self.finished: _Finished | None = None  # which batches are known done (bulk_out with timing)
        self.bulk_in: BulkStaging | None = None  # inputs staged in bulk: copied in groups ahead of their H2Ds
        self.inputs: DeviceInputs | None = None  # ... and uploaded to the GPU in groups
        self.wait_s = 0.0  # the enqueueing thread blocked on the ring (and, synchronous, on the GPU)
        self.off_s = 0.0  # time inside the enqueue window that is not enqueue time: waits, captures

    def acquire_out(self, slot: int) -> None:
        """Wait until the drain thread is done with output slot ``slot``."""
        tw = time.perf_counter()
        self.drainer.acquire_slot(slot)  # type: ignore[union-attr]
        dt = time.perf_counter() - tw
        self.wait_s += dt
        self.off_s += dt


class _Outputs:
    """A tensor function's host outputs, made from its first ``y`` (no declared shape).

    One array for :meth:`StreamPipeline.run` (``rows`` given; batch b writes its rows
    ``b.rows``), or one array per batch for ``run_batches`` (``n_batches``; each
    batch's row shape may differ, e.g. sequence lengths). Pinned (from the pool) when
    the input is; ``given``: the caller's ``out``/``outs``, checked against ``y``.
    ``place`` runs in the back half of each batch, after the compute call."""

    def __init__(self, spec: P.OutputSpec, *, pinned: bool, pool: Any, usage: PinnedUsage, notes: list,
                 rows: int | None = None, n_batches: int | None = None, given: Any = None,
                 torch_input: bool = False, given_addresses: list[int] | None = None):
        self.spec, self.pinned, self.pool, self.usage, self.notes = spec, pinned, pool, usage, notes
        self.torch_input = torch_input  # outputs go back as torch tensors: bfloat16 and co. can travel
        self.rows = rows
        self.array: np.ndarray | None = given if rows is not None else None
        self.items: list[Any] = list(given) if (rows is None and given is not None) else [None] * (n_batches or 0)
        self.given = given is not None
        self.given_addresses = given_addresses  # run_batches' outs=: their host addresses, read once
        self.row_shape: tuple[int, ...] | None = None
        self.dtype: np.dtype | None = None
        self.give_back: Any = None  # the framework dtype the outputs are handed back as (bfloat16)
        self.row_bytes = 0
        self._ring: Any = None
        self._ring_sized = True
        self.bulk: dict[int, int] | None = None  # bulk staging: each batch's pinned place for its D2H
        self.lazy_bulk: BulkStaging | None = None  # bulk staging, places given as the outputs are made
        self.row_bytes_hint = 0  # ... sized for rows this big at least (an earlier run's largest)
        self.max_row_bytes = 0  # the largest output row of this run (bytes)
        self._block: np.ndarray | None = None  # run_batches, pinned: the run's outputs cut from one block
        self._block_addr = self._block_used = 0
        self._block_failed = False

    def begin_execute(self, batches: list[P.Batch], ring: Any) -> None:
        """A new _execute (probes, then the rest): the ring, if any, is sized at its
        first placed batch."""
        self._ring = ring
        self._ring_sized = ring is None
        self._max_in = max(b.in_bytes for b in batches)
        self._max_rows = max(b.in_shape[0] for b in batches)
        self._rows_total = sum(b.in_shape[0] for b in batches)

    def _cut(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, int] | None:
        """run_batches with pinned outputs: (the batch's output, its address) cut from one
        pinned block for the whole run, sized at the first batch for its row size (or an
        earlier run's largest) times the run's rows; None once it is full or when the pool
        has no room: the output is a block of its own. One take from the pool per run
        rather than one per batch (each ~15 us on an H100 host: the take, a view, a
        finalizer; 12 % of the host time in a cProfile of 200 batches of a short compute)."""
        nbytes = math.prod(shape) * dtype.itemsize
        if self._block is None:
            if self._block_failed:
                return None
            size = max(self.row_bytes, self.row_bytes_hint) * self._rows_total + bulk_staging.ALIGN * len(self.items)
            try:
                self._block = self.pool.empty((max(size, 1),), np.uint8, self.usage)
            except PinnedPoolFull:
                self._block_failed = True
                return None
            self._block_addr = self._block.ctypes.data
        at = self._block_used
        if at + nbytes > self._block.nbytes:
            return None
        self._block_used = at + P.align_up(max(nbytes, 1), bulk_staging.ALIGN)
        return self._block[at:at + nbytes].view(dtype).reshape(shape), self._block_addr + at

    def _new(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if self.pinned:
            try:
                return self.pool.empty(shape, dtype, self.usage)
            except PinnedPoolFull as exc:
                self.notes.append(f"pinned pool full, output is pageable: {exc}")
                self.pinned = False
        return np.empty(shape, dtype)

    def place(self, b: P.Batch, shape: tuple[int, ...], dtype: np.dtype, give_back: Any, usage: Any) -> bool:
        """Give batch b its host output for a ``y`` of ``shape``/``dtype``; returns True
        when its D2H goes through the ring (False: straight into the output)."""
        row = tuple(shape[1:])
        addr = 0
        if self.row_shape is None:
            spec = self.spec
            if spec.row_shape is not None and tuple(spec.row_shape) != row:
                raise ValueError(f"the compute returned rows of shape {row}; output= declares {spec.row_shape}")
            if spec.dtype is not None and spec.dtype != dtype:
                raise ValueError(f"the compute returned {dtype}; output= declares {spec.dtype}")
            if give_back is not None and not self.torch_input and not self.given:
                raise TypeError(numpy_cannot_hold(give_back))
            self.row_shape, self.dtype, self.give_back = row, dtype, give_back
            self.row_bytes = int(np.prod(row, dtype=np.int64)) * dtype.itemsize
        elif dtype != self.dtype or (self.rows is not None and row != self.row_shape):
            raise ValueError(f"batch {b.index}: the compute returned {dtype} rows of shape {row}; the first batch "
                             f"returned {self.dtype} rows of shape {self.row_shape}")
        if self.rows is not None:
            if self.array is None:
                self.array = self._new((self.rows,) + row, dtype)
            elif self.given and (self.array.shape[1:] != row or self.array.dtype != dtype):
                raise ValueError(f"out has shape {self.array.shape} and dtype {self.array.dtype}; the compute "
                                 f"returns rows of shape {row} and dtype {dtype}")
            a, z = b.rows  # type: ignore[misc]
            dst = self.array[a:z]
        else:
            i = b.index
            dst = self.items[i]
            if dst is None:
                got = self._cut(tuple(shape), dtype) if self.pinned else None
                if got is None:
                    dst = self.items[i] = self._new(tuple(shape), dtype)
                else:
                    dst, addr = got
                    self.items[i] = dst
            elif tuple(dst.shape) != tuple(shape) or dst.dtype != dtype:
                raise ValueError(out_mismatch(i, dst, shape, dtype))
        b.dst, b.out_bytes, b.out_shape = dst, dst.nbytes, tuple(shape)
        if shape[0]:
            self.max_row_bytes = max(self.max_row_bytes, dst.nbytes // shape[0])
        if self.bulk is not None:  # the D2H goes to the batch's place in the run's pinned block
            b.dst_addr, b.drain_bytes = self.bulk[b.index], 0
            return False
        b.dst_addr = addr or P.host_address(dst)  # (not for the bulk case above)
        if self.lazy_bulk is not None:  # ... given now (0: no room, straight into dst)
            estimate = max(self.row_bytes, self.row_bytes_hint) * self._rows_total
            b.dst_addr = self.lazy_bulk.place_output(dst, estimate, b.dst_addr) or b.dst_addr
            b.drain_bytes = 0
            return False
        ring = self._ring
        if ring is None:
            b.drain_bytes = 0
            return False
        if not self._ring_sized:  # no D2H of this run has used the ring yet: size it now
            if self.rows is not None:
                need = self.row_bytes * self._max_rows
            else:
                need = max(b.out_bytes, int(self._max_in * b.out_bytes / max(b.in_bytes, 1)))
            ring.ensure(need, usage)
            self._ring_sized = True
        if b.out_bytes > ring.slot_bytes:  # bigger than the ring's slots: straight into the output
            b.drain_bytes = 0
            return False
        b.drain_bytes = b.out_bytes
        return True


@dataclasses.dataclass(frozen=True)
class _Tuned:
    """chunk="auto": what the probes measured for one kind of work (pipeline cache)."""

    models: dict[str, StageModel]  # GPU stages and the staging copies, per input byte
    host: StageModel  # the host's time per batch (enqueue + compute call)
    out_over_in: float
    compute_bytes_per_byte: float  # device memory the compute itself holds per input byte
    budget_bytes: int  # device memory the chunks in flight may use
    fitted_from_bytes: int  # the smaller probe size of the fit: no chunk below it
    probed_bytes: int = 0  # the larger: a batch shape the compute has seen
    refined: int = 0  # runs whose own times lowered these models (StreamPipeline._refine)
    kept_bytes: int = 0  # the chunk of the last run that refined them (kept if still about as good)
    # the host's time a new batch shape cost the compute on its first call (a framework's per-shape
    # setup), from the probes' sizes run twice but the first: the least of them
    new_shape_s: float = 0.0
    kept_loss_s: float = 0.0  # predicted time the runs lost by keeping their chunk for that cost ...
    kept_loss_for: int = 0  # ... that chunk (bytes)
    seen: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)  # runs: stage -> {chunk: s}
    run_s: float = 0.0  # the last run's wall time (what a new shape costs against it; before a run, its prediction)
    # probed at one size (StreamPipeline._first_call_costly): the smaller size's rows, to probe on the next
    # run; the probed size's seconds per stage; its first call over its second
    deferred_rows: int = 0
    probe_points: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    first_call_s: float = 0.0

    @property
    def costly_shapes(self) -> bool:
        """New batch shapes cost the compute enough that its chunk is kept: NEW_SHAPE_COSTLY_S,
        or SHAPE_COST_SHARE of a run. (A ViT-B/16 over 512 images on an H200: a new batch size
        cost its first call ~47 ms, as long as a whole run; the second run chose 128 rows where
        the first ran 130, and took 2x the runs after it. Session 38.)"""
        return self.new_shape_s >= NEW_SHAPE_COSTLY_S or 0.0 < SHAPE_COST_SHARE * self.run_s <= self.new_shape_s


def _pinned_record(usage: PinnedUsage, pool_held_bytes: int, ring_bytes: int) -> dict[str, Any]:
    """A run's ``stats.pinned``: what it took from the pinned pool, what the pool and the ring hold."""
    d = {f.name: getattr(usage, f.name) for f in dataclasses.fields(usage)}  # (asdict: ~30 us more a run)
    d["pool_held_bytes"] = pool_held_bytes
    d["ring_bytes"] = ring_bytes
    return d


_NOT_SMALL = object()  # StreamPipeline._run_small: not a small run, nothing done


@dataclasses.dataclass(frozen=True)
class _LongList:
    """StreamPipeline._run_small_list: a long list of small batches, to run pipelined
    (``key``: its kind, list_paths.list_key; ``trial``: as a run of the trial; ``views``:
    the batches' host views, made already; ``path``: with the calls here or on threads);
    or _long_list_for_threads: a long list of larger batches (``plain`` False)."""
    key: tuple
    trial: bool
    views: list
    path: str = PIPELINED  # PIPELINED or THREADS (list_paths.py)
    may_thread: bool = False  # (as _may_thread_list said when the run began)
    plain: bool = True  # whether its kind of list may run plainly (small batches)
    outs_read: "_OutsRead | None" = None  # the outputs as read and checked already (None: outs= not given)


@dataclasses.dataclass(frozen=True)
class _OutsRead:
    """run_batches' ``outs=`` read once a run: their host views, their addresses and the
    batches' (``in_addresses``), and whether a batch is in place (_check_outputs_apart).
    Each pass over a list of small batches costs the host 1-4 us a batch, before any batch
    runs: the bench's variable-length list (29 encoder batches, an H200) spent 1.5 ms of a
    17 ms run outside its batches, 0.4 ms of it checking the outputs twice (session 48, p306)."""
    views: list
    addresses: list
    in_addresses: list
    in_place: bool

    @staticmethod
    def of(given: list[Any], views: list[tuple[np.ndarray, HostKind]], outs: list[Any]) -> "_OutsRead":
        out_views = host_views(outs, "outs[{}]")
        addresses, in_addresses = _host_addresses(outs, out_views), _host_addresses(given, views)
        in_place = _check_outputs_apart([v[0] for v in out_views], [v[0] for v in views], addresses, in_addresses)
        return _OutsRead(out_views, addresses, in_addresses, in_place)


def _from_numpy_takes(dtype: np.dtype) -> bool:
    """Can ``torch.from_numpy`` take an array of ``dtype`` as it is? (Not NumPy bfloat16 or
    other void dtypes, objects, strings, dates, another byte order, long double.)"""
    return dtype.kind in "biufc" and dtype.isnative and dtype.itemsize <= (16 if dtype.kind == "c" else 8)


def _device_bytes(b: P.Batch, writes_output: bool) -> int:
    """The device memory batch ``b`` takes: its input, and its output after it (256-byte
    aligned) when the compute writes an output region fullpipe allocates."""
    if not writes_output:
        return b.in_bytes
    return -(-b.in_bytes // DEVICE_ALIGN) * DEVICE_ALIGN + b.out_bytes


def _known_outputs(batches: list[P.Batch], outputs: "_Outputs | None") -> list[np.ndarray] | None:
    """Each batch's host output array when it is known before the compute runs (the
    stream form's, or a tensor function's ``outs=`` of run_batches), else None."""
    if outputs is None:
        dsts = [b.dst for b in batches]
        return None if any(d is None for d in dsts) else dsts  # type: ignore[return-value]
    if outputs.given and outputs.rows is None:
        return [outputs.items[b.index] for b in batches]
    return None


def _largest_output(batches: list[P.Batch], outputs: "_Outputs | None") -> int | None:
    """The largest batch's host output in bytes, or None when it is known only after
    the compute ran (a tensor function's fresh outputs)."""
    if outputs is None:
        return max(b.out_bytes for b in batches)
    if not outputs.given:
        return None
    if outputs.rows is not None:
        a = outputs.array
        return int(a.nbytes // max(a.shape[0], 1)) * max(b.in_shape[0] for b in batches)
    sizes = [getattr(x, "nbytes", None) for x in outputs.items]
    return None if any(n is None for n in sizes) or not sizes else int(max(sizes))


def _scaled_busy(busy: dict[str, float], timings: list[BatchTiming], batches: list[P.Batch],
                 span_ms: float | None) -> dict[str, float]:
    """timing="sampled": each stage's busy time over the timed batches, scaled to the run
    by the bytes the stage moved (the input's for H2D and compute, the output's for
    D2H), at most the run's GPU span."""
    timed = {t.index for t in timings}
    def ratio(nbytes: Callable[[P.Batch], int]) -> float:
        part = sum(nbytes(b) for b in batches if b.index in timed)
        whole = sum(nbytes(b) for b in batches)
        return whole / part if part else len(batches) / max(len(timed), 1)
    in_ratio, out_ratio = ratio(lambda b: b.in_bytes), ratio(lambda b: b.out_bytes)
    out = {k: v * (out_ratio if k == "d2h" else in_ratio) for k, v in busy.items()}
    return {k: min(v, span_ms) if span_ms else v for k, v in out.items()}


def _probe_point(pst: PipelineStats, i: int, with_compute: bool, with_out: bool) -> dict[str, float]:
    """Seconds per stage of probe batch i: GPU stages from its events, the host's
    enqueue time, the staging threads' memmoves."""
    t = pst.timings[i]
    m = {"h2d": (t.stage("h2d")[1] - t.stage("h2d")[0]) / 1e3}
    if with_compute:
        m["compute"] = (t.stage("compute")[1] - t.stage("compute")[0]) / 1e3
    if with_out:
        m["d2h"] = (t.stage("d2h")[1] - t.stage("d2h")[0]) / 1e3
    m["host"] = pst.enqueue_us[i] * 1e-6
    for name, copies in pst.host_copy_s.items():
        if len(copies) > i:
            m[name] = copies[i]
    return m


def _check_in_place(out: np.ndarray, x: np.ndarray, what: str) -> bool:
    """run(): may ``out`` share memory with ``x``? Only in place: each output row where its
    input row is, of the same size (``run(x, out=x)``). A batch's output is then written
    after its own input was read, and over no other batch's input; any other overlap would
    overwrite input rows another batch has not read yet (its H2D may wait on another
    stream). Returns whether the run is in place. (Both C-contiguous, the same rows.)"""
    if not np.may_share_memory(out, x):
        return False
    if out.ctypes.data == x.ctypes.data and out.nbytes == x.nbytes:
        return True
    raise ValueError(f"{what} shares memory with the input without lining up with it row for row (its rows would "
                     "overwrite input rows not yet read): pass a separate array, or the input itself, of the "
                     "output's row shape and dtype, for an in-place run")


def _cannot_run_again(exc: BaseException, in_place: bool) -> None:
    """A ComputeSharesOutput that reaches the caller: say why the run was not done again."""
    if hasattr(exc, "add_note"):
        exc.add_note("This run wrote its outputs over its inputs (out= shares their memory), so it cannot be done "
                     "again: the rows of the batches already copied out may be wrong, and their inputs are gone. "
                     "The compute's calls are serial from now on (an in-place run is serial until a run has shown "
                     "it need not be): run it again from a copy of the input." if in_place else
                     "It happened again in the run done again, whose calls were serial: please report it.")


# Below this many outputs, run_batches' overlap check sorts and bisects in plain Python: NumPy's
# per-call costs made it 95 us a run of 29 encoder batches on an H200 host (session 55, call 1)
_APART_NUMPY_FROM = 256


def _check_outputs_apart(outs: Sequence[np.ndarray], inputs: Sequence[np.ndarray],
                         out_addresses: Sequence[int] | None = None,
                         in_addresses: Sequence[int] | None = None) -> bool:
    """run_batches: no output may share memory with another batch's input (it may be
    written before that batch's H2D read it); a batch's output over its own input is an
    in-place batch (its input is read before its output is written, in stream order).
    Returns whether any batch is in place. Address ranges, sorted: O(n log n); the
    addresses, where read already (_host_addresses)."""
    in_at = [P.host_address(a) for a in inputs] if in_addresses is None else in_addresses
    out_at = [P.host_address(o) for o in outs] if out_addresses is None else out_addresses
    spans = sorted((lo, lo + a.nbytes, j) for j, (a, lo) in enumerate(zip(inputs, in_at)) if a.nbytes)
    if not spans or not outs:
        return False
    starts = [lo for lo, _, _ in spans]
    # reach[k]: the furthest end among spans[0..k]; an output whose last span starting before its
    # end (last) reaches no further than its start meets no input: outputs apart from the inputs,
    # the usual case, are found so in one pass
    reach, furthest = [], 0
    for _, hi, _ in spans:
        furthest = hi if hi > furthest else furthest
        reach.append(furthest)
    out_hi = [lo + o.nbytes for lo, o in zip(out_at, outs)]
    if len(outs) < _APART_NUMPY_FROM:
        met = [(i, k) for i, (lo, hi) in enumerate(zip(out_at, out_hi))
               if (k := bisect.bisect_left(starts, hi) - 1) >= 0 and reach[k] > lo]
    else:
        last = np.searchsorted(np.array(starts, dtype=np.int64), np.array(out_hi, dtype=np.int64), side="left") - 1
        hit = (last >= 0) & (np.array(reach, dtype=np.int64)[np.maximum(last, 0)] > np.array(out_at, dtype=np.int64))
        met = [(i, int(last[i])) for i in np.flatnonzero(hit).tolist()]
    in_place = False
    for i, k in met:
        lo, hi = out_at[i], out_hi[i]
        while k >= 0 and reach[k] > lo:
            a, z, j = spans[k]
            if a < hi and lo < z:
                if j != i:
                    raise ValueError(f"outs[{i}] shares memory with batch {j}'s input: it could be written before "
                                     "that batch is read. Pass outputs apart from the other batches' inputs (each "
                                     "batch's own input is allowed: an in-place batch)")
                in_place = True
            k -= 1
    return in_place


def _renumber(exc: BaseException, positions: list[int]) -> None:
    """An error of a run of the batches with rows of a list (_run_list_with_empties): its
    ``batch_index`` made the batch's place in the list given, and a note saying how the
    batches its message names are counted."""
    b = getattr(exc, "batch_index", None)
    try:
        if isinstance(b, int) and 0 <= b < len(positions):
            exc.batch_index = positions[b]  # type: ignore[attr-defined]
        shown = ", ".join(f"{k} -> {p}" for k, p in list(enumerate(positions))[:12])
        exc.add_note(f"fullpipe.StreamPipeline: the batches with no rows were set aside, so the batch numbers above "
                     f"count only the {len(positions)} with rows (as given: {shown}"
                     f"{', ...' if len(positions) > 12 else ''})")
    except Exception:  # some exception types refuse new attributes
        pass


def _no_rows(x: Any) -> bool:
    """A batch with no rows (shape (0, ...)), told by its shape alone."""
    shape = getattr(x, "shape", None)
    return shape is not None and len(shape) > 0 and shape[0] == 0


def _check_out_layout(out: np.ndarray, rows: int, what: str) -> None:
    """A tensor function's output, checked before its shape is known: its rows, its
    layout; shape and dtype are checked against the first ``y``."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{what} must be a NumPy array or a torch CPU tensor, got {type(out).__name__}")
    if out.ndim == 0 or out.shape[0] != rows:
        raise ValueError(f"{what} has shape {out.shape}; it needs {rows} rows (one per input row)")
    if not out.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous")
    if not out.flags.writeable:
        raise ValueError(f"{what} is read-only")


def _gpu_time(point: dict[str, float]) -> float:
    """A probe point's slowest GPU stage, seconds."""
    return max(v for k, v in point.items() if k in ("h2d", "compute", "d2h"))


def _carried(tuned: "_Tuned", models: dict[str, StageModel], host: StageModel | None = None) -> "_Tuned":
    """chunk="auto"'s models of the same work from another staging, for this one (``models``,
    ``host``: as this staging has them): their chunk kept where the compute's new shapes are
    costly, the runs' corrections started over (StreamPipeline._tuned_through_ring,
    _completed_elsewhere)."""
    return dataclasses.replace(tuned, models=models, host=tuned.host if host is None else host,
                               kept_bytes=tuned.kept_bytes if tuned.costly_shapes else 0, refined=0, seen={})


def _probe_lanes(batches: list[P.Batch], lanes: int, first: int = 0) -> list[int]:
    """chunk="auto"'s probes (each batch waited for before the next): the lane of each batch,
    one per batch size in the order the sizes come (from lane ``first``). A framework's
    caching allocator keeps what a call freed for that call's stream, so a size's second call
    on another lane would allocate afresh and read as host time per chunk (an H100: 361-1115
    us against 130-250 us on the same stream; session 25). Sizes on different lanes still let
    a tensor function's outputs be checked across lanes (TensorCompute._shares)."""
    rank: dict[tuple[int, ...], int] = {}
    return [(first + rank.setdefault(b.in_shape, len(rank))) % lanes for b in batches]


def _host_s_per_batch(stats: PipelineStats) -> float:
    """The host's time per batch as chunk="auto" models it: the enqueueing thread's, which
    holds the compute call unless the calls ran on compute threads; then the calls' time
    shared among the threads, where that is longer."""
    per_batch = stats.enqueue_us_per_batch
    if stats.compute_threads:
        per_batch = max(per_batch, stats.host_us.get("compute_call", 0.0) / stats.compute_threads["threads"])
    return per_batch * 1e-6


def _host_addresses(objs: Sequence[Any], views: Sequence[tuple[np.ndarray, HostKind]]) -> list[int]:
    """The host address of each of the caller's arrays (``views``: host_view's answers):
    a torch tensor's ``data_ptr()`` (0.1 us), an array's through the buffer protocol (plan.host_address)."""
    return [o.data_ptr() if k.library == "torch" else P.host_address(a) for o, (a, k) in zip(objs, views)]


def _refuse_one_array(batches: Any, what: str) -> None:
    """run_batches and imap take many batches: one array (iterable by its rows) is a mistake."""
    if isinstance(batches, np.ndarray) or _is_tensor(batches):
        raise TypeError(f"{what}; for one array use run(x)")
    if isinstance(batches, Mapping):
        raise TypeError(f"{what}, got a {type(batches).__name__}: for one batch of several arrays use run(batch) "
                        "or a list of such batches, [batch]")


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "is_cuda")


_ORPHANED_SIGNALS: list[Any] = []


def _annotate(exc: BaseException, b: P.Batch, pos: int, n: int, freed: int, slots: int) -> None:
    where = f"batch {b.index}" + (f" (rows {b.rows[0]}:{b.rows[1]})" if b.rows else "")
    note = (
        f"fullpipe.StreamPipeline: failed at {where}, {pos + 1} of {n} in this run; in-flight work was "
        f"drained, {freed} device allocation(s) still held by the run freed, all {slots} pinned slots "
        "each way returned"
    )
    try:
        exc.add_note(note)
        exc.batch_index = b.index  # type: ignore[attr-defined]
    except Exception:  # some exception types refuse new attributes
        pass
