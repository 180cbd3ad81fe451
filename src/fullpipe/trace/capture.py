"""``with fullpipe.trace.capture() as tl:`` - record what the GPU did around any code.

Inside the block, run anything: fullpipe, PyTorch, CuPy. On exit the capture
waits for the GPU (``cuCtxSynchronize``: the work enqueued inside the block has
finished) and ``tl`` then holds a :class:`~fullpipe.trace.timeline.Timeline`:
``tl.save("t.json")`` (Perfetto), ``tl.plot("t.png")``, ``print(tl.summary())``.

Backends: CUPTI activity records when ``cupti-python`` works here (every kernel,
copy, memset, sync and pool allocation in the process, GPU timestamps); else CUDA
events around fullpipe's own operations, a coarser timeline that says so in
``tl.notes``. One capture at a time per process (CUPTI is process-wide).

The hook for code that enqueues work (the level-1 executor, experiments) is two
context managers that cost next to nothing when no capture is active:

    from fullpipe import trace
    with trace.stamp("h2d", stream, tag=batch, nbytes=n):   # kinds: h2d d2h d2d kernel memset
        copy_h2d(dptr, host, stream)
    with trace.tag(batch):                                  # tag whatever is enqueued inside
        torch_model(x)

``stamp`` opens an NVTX range always; with CUPTI it tags the records of the
enqueued operations with ``tag``; in the fallback it records the events that
*are* the timeline. :func:`current` returns the active capture or None.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from . import nvtx
from .fallback import STAMP_KINDS, EventSession
from .timeline import Timeline

BACKENDS = ("auto", "cupti", "events")

_state_lock = threading.Lock()
_active: "Capture | None" = None


def current() -> "Capture | None":
    """The capture that is recording now, or None."""
    return _active


class Capture:
    """A recording in progress (inside ``with``) or done (after it): then a
    timeline's methods work on it directly (``save``, ``plot``, ``summary``,
    ``dump``, ``records``, ``problems``)."""

    def __init__(self, backend: str = "auto", *, tags: bool = True, synchronize: bool = True):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.requested_backend = backend
        self.tags = tags
        self.synchronize = synchronize
        self.backend: str | None = None  # "cupti" or "events" once started
        self._session: Any = None
        self._tag_stack = threading.local()
        self._stream_names: dict[int, str] = {}
        self.timeline: Timeline | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Capture":
        global _active
        with _state_lock:
            if _active is not None:
                raise RuntimeError("a fullpipe.trace capture is already active; captures do not nest")
            _active = self
        try:
            self._session = self._start_session()
        except BaseException:
            with _state_lock:
                _active = None
            raise
        return self

    def _start_session(self):
        reason = "backend='events' was asked for"
        if self.requested_backend in ("auto", "cupti"):
            try:
                from .activity import CuptiSession

                session = CuptiSession(tags=self.tags)
                session.start()
                self.backend = "cupti"
                return session
            except Exception as exc:
                if self.requested_backend == "cupti":
                    raise RuntimeError(f"CUPTI tracing is not available here: {type(exc).__name__}: {exc}") from exc
                reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        session = EventSession(reason)
        session.start()
        self.backend = "events"
        return session

    def __exit__(self, exc_type, exc, tb) -> None:
        global _active
        session, notes = self._session, []
        try:
            with nvtx.range("fullpipe.trace: finish capture"):
                if self.backend == "cupti":
                    session.stop_ns = session.timestamp()
                if self.synchronize:
                    notes += _synchronize_gpu()
                if self.backend == "cupti":
                    session.stop()
                    records = session.records
                else:
                    records = session.stop()
        except Exception as stop_exc:
            if exc_type is not None:  # the user's error matters more; keep what we have
                records = getattr(session, "records", [])
                notes.append(f"capture ended by {exc_type.__name__}; finishing it failed: {stop_exc}")
            else:
                raise
        finally:
            with _state_lock:
                _active = None
        self.timeline = Timeline(records=list(records), source=self.backend or "events", device=_device_name(),
                                 notes=list(session.notes) + notes, streams=dict(self._stream_names))
        return None

    # ------------------------------------------------------------------ the hook
    @contextlib.contextmanager
    def stamp(self, kind: str, stream: Any, tag: Any = None, *, name: str | None = None,
              nbytes: int | None = None) -> Iterator[None]:
        """Mark the operation(s) enqueued on ``stream`` inside the block as one
        ``kind`` range (h2d, d2h, d2d, kernel, memset) belonging to ``tag``."""
        _check_kind(kind)
        if tag is None:
            tag = self._current_tag()
        with nvtx.range(f"{kind}" if tag is None else f"{kind} [{tag}]"):
            if self.backend == "events":
                pending = self._session.begin(kind, stream, tag, name, nbytes)
                yield
                self._session.end(pending)
            else:
                with self.tag(tag) if tag is not None else contextlib.nullcontext():
                    yield

    @contextlib.contextmanager
    def tag(self, value: Any) -> Iterator[None]:
        """Tag every operation enqueued by this thread inside the block (e.g. a batch)."""
        stack = self._tags()
        stack.append(value)
        pushed = False
        try:
            if self.backend == "cupti":
                self._session.push_tag(value)
                pushed = True
            yield
        finally:
            if pushed:
                self._session.pop_tag()
            stack.pop()

    def stream_id(self, stream: Any) -> int:
        """The id this capture's records use for ``stream`` (a cuda.core Stream or any
        object with ``__cuda_stream__``)."""
        if self._session is None:
            raise RuntimeError("stream ids exist only while the capture runs")
        return self._session.stream_id(stream)

    def name_stream(self, stream: Any, name: str) -> None:
        """Show ``name`` beside the stream's rows in the trace and the figure."""
        try:
            self._stream_names[self.stream_id(stream)] = str(name)
        except Exception:  # a name is a nicety; never fail the user's work for it
            pass

    def _tags(self) -> list:
        stack = getattr(self._tag_stack, "stack", None)
        if stack is None:
            stack = self._tag_stack.stack = []
        return stack

    def _current_tag(self) -> Any:
        stack = self._tags()
        return stack[-1] if stack else None

    # ------------------------------------------------------------------ the result
    def _done(self) -> Timeline:
        if self.timeline is None:
            raise RuntimeError("the capture is still running: use its results after the with-block")
        return self.timeline

    @property
    def records(self):
        return self._done().records

    @property
    def notes(self) -> list[str]:
        return self._done().notes

    def summary(self):
        return self._done().summary()

    def save(self, path):
        return self._done().save(path)

    def plot(self, path, **kwargs):
        return self._done().plot(path, **kwargs)

    def dump(self, path):
        return self._done().dump(path)

    def problems(self) -> list[str]:
        return self._done().problems()


def capture(backend: str = "auto", *, tags: bool = True, synchronize: bool = True) -> Capture:
    """Record the GPU's work inside a ``with`` block.

    ``backend``: "auto" (CUPTI if it works, else events), "cupti" (fail without it),
    "events" (the coarse fallback). ``tags``: carry :func:`tag`/:func:`stamp` tags to
    CUPTI records (costs one DRIVER record per CUDA call). ``synchronize``: wait for
    the GPU on exit (leave it on unless the block already did).
    """
    return Capture(backend, tags=tags, synchronize=synchronize)


# --------------------------------------------------------------------------- module-level hook
def _check_kind(kind: str) -> None:
    if kind not in STAMP_KINDS:
        raise ValueError(f"stamp kind must be one of {sorted(STAMP_KINDS)}, got {kind!r}")


@contextlib.contextmanager
def stamp(kind: str, stream: Any, tag: Any = None, *, name: str | None = None,
          nbytes: int | None = None) -> Iterator[None]:
    """Wrap the enqueueing of one operation: a range on the active capture, if any,
    and an NVTX range. See the module docstring."""
    cap = _active
    if cap is None:
        _check_kind(kind)
        with nvtx.range(kind if tag is None else f"{kind} [{tag}]"):
            yield
        return
    with cap.stamp(kind, stream, tag, name=name, nbytes=nbytes):
        yield


@contextlib.contextmanager
def tag(value: Any) -> Iterator[None]:
    """Tag the operations enqueued inside the block on the active capture (no-op without one)."""
    cap = _active
    if cap is None:
        yield
        return
    with cap.tag(value):
        yield


def name_stream(stream: Any, name: str) -> None:
    """Name a stream in the active capture's trace and figure (no-op without one)."""
    cap = _active
    if cap is not None:
        cap.name_stream(stream, name)


def _synchronize_gpu() -> list[str]:
    """cuCtxSynchronize on this thread's context (device 0's if it has none); a note instead of an
    error when there is no GPU."""
    try:
        from ..cuda import driver as drv
        from ..cuda.device import ensure_current

        ensure_current()  # the capture may end in a thread that has no context yet
        drv.call("cuCtxSynchronize")
        return []
    except Exception as exc:
        return [f"could not wait for the GPU at the end of the capture ({exc}); records of work "
                "still running then may be missing"]


def _device_name() -> str | None:
    try:
        from ..cuda import driver as drv
        from ..cuda.device import ensure_current

        ensure_current()
        dev = drv.call("cuCtxGetDevice")
        name = drv.call("cuDeviceGetName", 256, dev)
        return (name.decode(errors="replace") if isinstance(name, bytes) else str(name)).split("\x00")[0].strip()
    except Exception:
        return None
