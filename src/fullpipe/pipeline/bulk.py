"""Small pageable batches staged in bulk: a run's whole input in one pinned block.

The ring (staging.py) moves each pageable batch through one of K pinned slots: a
memmove, a slot signal from the GPU (a host function or an event), a wait. For
small batches (a run of many batches of at most ``pageable.INLINE_MAX_BYTES``,
e.g. variable-length token batches) those memmoves and waits are done by the
thread that also calls the user's compute, between its launches: on an H100 host
a PyTorch encoder layer's calls took 440-720 us per batch that way against
320-375 us with pinned batches, and the run reached 0.6-0.8x compute alone
against 0.99-1.0x pinned (issue 14, same process, same batches).

So when a run's pageable side is small in total (at most ``BULK_MAX_BYTES``), it is
moved in bulk instead: every input batch is copied into one pinned block (the first
few hundred kilobytes before the first H2D, the rest in groups on the copier's threads
while the first batches run), and the batches are
then copied to the GPU straight from there, as pinned inputs are; every output goes
from the GPU straight into its place in one pinned block. No slot, no signal, no
wait per batch. The outputs of the batches whose D2H has finished (the executor
reads their timing events anyway; sampled, a timed batch done says every earlier
batch of its stream is done) are copied into the caller's arrays on a copier
thread while the run goes on, a group of at least ``DRAIN_GROUP_BYTES`` at a time;
once every batch is enqueued, each as soon as its batch is done. The price: the
output copy is not overlapped with the GPU's work without timing events. On an
H100 host, a run of 127 encoder batches with 35 MB of output took 68.4 ms with the
whole output copied at the end, against 64.2 ms with pinned batches (issue 14). The
blocks come from the pinned pool and go back to it at the end of the run.

A PyTorch function's list of at most ``plain.SMALL_LIST_MAX_BATCHES`` batches (16) and
``plain.PLAIN_MAX_BYTES`` (8 MiB) in all goes
plainly instead from the pipeline's second run on, when its batches are all pageable or
all pinned by their owner, of one library and dtype, and the pipeline has its defaults
and one compute thread (StreamPipeline._run_small_list, plain.run_small_list: the calls
on the caller's stream, no input block; session 22).
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

from .plan import align_up, host_address

BULK_MAX_BYTES = 64 << 20  # per side and run
ALIGN = 256  # each batch's place in a block
# Outputs copied out during the run go in groups of at least this many bytes: one copier
# job per finished batch (127 of ~280 KB for an encoder layer) woke a thread and took the
# GIL between every compute call of a host-bound run (session 13)
DRAIN_GROUP_BYTES = 4 << 20
# The inputs go into their block ahead of the batches that read them: the first
# FIRST_INPUT_BYTES before the run's first H2D, the rest in groups of INPUT_GROUP_BYTES on
# the copier's threads while the first batches run. Copying all of them first held the
# GPU idle for 1.5 ms of a 65 ms run of 127 encoder batches (4 MB of token ids, session 14).
FIRST_INPUT_BYTES = 256 << 10
INPUT_GROUP_BYTES = 1 << 20


def _groups(sizes: Sequence[int], first_bytes: int, group_bytes: int) -> list[tuple[int, int]]:
    """[(start, end), ...] cutting batch positions into consecutive groups: the first
    of at least ``first_bytes``, each other of at least ``group_bytes`` (the last one
    may be smaller); every group holds at least one batch."""
    groups, start, acc, want = [], 0, 0, first_bytes
    for i, n in enumerate(sizes):
        acc += n
        if acc >= want:
            groups.append((start, i + 1))
            start, acc, want = i + 1, 0, group_bytes
    if start < len(sizes):
        groups.append((start, len(sizes)))
    return groups


def fits(sizes: Sequence[int], batch_max: int) -> bool:
    """True when a side of a run may be staged in bulk: more than one batch, each at
    most ``batch_max`` bytes (the small-batch regime), at most BULK_MAX_BYTES in all."""
    return len(sizes) > 1 and max(sizes) <= batch_max and _aligned_total(sizes) <= BULK_MAX_BYTES


def _aligned(n: int) -> int:
    return align_up(n, ALIGN)


def _aligned_total(sizes: Sequence[int]) -> int:
    return sum(_aligned(n) for n in sizes)


def offsets(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Each of ``sizes``' place in one block, from its start (ALIGN-aligned, in order),
    and the block's size (at least ALIGN)."""
    places, at = [], 0
    for n in sizes:
        places.append(at)
        at += _aligned(n)
    return places, max(at, ALIGN)


class BulkStaging:
    """The pinned blocks of one run. ``pool``: the pipeline's pinned pool; ``usage``:
    the run's PinnedUsage."""

    def __init__(self, pool: Any, usage: Any):
        self.pool, self.usage = pool, usage
        self.blocks: list[Any] = []
        self.outputs: list[tuple[int, int, int]] = []  # (caller's address, pinned address, bytes)
        self._before: list[tuple[Any, int, int, int]] = []  # (batch, src_addr, dst_addr, drain_bytes) before the move
        self._drained = 0  # outputs[:_drained] are being or have been copied out
        self._lazy: list[int] | None = None  # place_output's [next free address, end] in its block
        self._copying: list[Any] = []  # the copies started during the run (futures)
        self._counted = 0  # outputs[:_counted] are in _pending_bytes or already drained
        self._pending_bytes = 0  # finished outputs not yet handed to the copier
        self._inputs_pending: collections.deque = collections.deque()  # (first batch position, futures) per group
        self.input_block: Any = None  # the inputs' pinned block (stage_inputs)
        self.input_groups: list[tuple[int, int]] = []  # the batch positions copied into it together
        self.input_batches: list[Any] = []  # the batches whose inputs are in it, in run order

    def _places(self, sizes: Sequence[int]) -> list[int]:
        places, total = offsets(sizes)
        block = self.pool.take(total, self.usage)
        self.blocks.append(block)
        return [block.ptr + at for at in places]

    @property
    def input_bytes(self) -> int:
        """The input block's size (what :class:`DeviceInputs` uploads), 0 without one."""
        return self.input_block.nbytes if self.input_block is not None else 0

    def stage_inputs(self, batches: Sequence[Any], copier: Any, parts_of: Any = None) -> None:
        """Copy every batch's input into one pinned block; the batches' H2Ds then read it.
        The first ``FIRST_INPUT_BYTES`` are copied now; the rest in groups of
        ``INPUT_GROUP_BYTES`` on the copier's threads while the first batches run: call
        :meth:`wait_input` before batch ``pos``'s H2D (or :meth:`wait_inputs` for all).
        ``parts_of(batch)``: the parts a batch of several arrays is gathered from
        (records.Packed.parts), or None for one array (or when not given)."""
        sizes = [b.in_bytes for b in batches]
        places = self._places(sizes)
        self.input_block, self.input_batches = self.blocks[-1], list(batches)
        copies = [[(at, b.src_addr, n)] if (parts := parts_of and parts_of(b)) is None else
                  [(at + off, src, k) for off, src, k in parts] for b, at, n in zip(batches, places, sizes)]
        groups = self.input_groups = _groups(sizes, FIRST_INPUT_BYTES, INPUT_GROUP_BYTES)
        first_end = groups[0][1]
        copier.copy_many([c for cs in copies[:first_end] for c in cs])
        for start, end in groups[1:]:
            futures = copier.submit_many([c for cs in copies[start:end] for c in cs])
            self._inputs_pending.append((start, futures))
            self._copying += futures  # (waited for before the blocks go back, on any path)
        self._moved_from(batches)
        for b, at in zip(batches, places):
            b.src_addr = at

    def wait_input(self, pos: int) -> None:
        """Return once the input of the run's batch ``pos`` (and of those before it) is in the block."""
        pending = self._inputs_pending
        while pending and pending[0][0] <= pos:
            for f in pending.popleft()[1]:
                f.result()

    def wait_inputs(self) -> None:
        """Return once every input is in the block."""
        if self._inputs_pending:
            self.wait_input(self._inputs_pending[-1][0])

    def route_outputs(self, batches: Sequence[Any], dsts: Sequence[Any],
                      addresses: Sequence[int] | None = None) -> dict[int, int]:
        """Give each batch a place in one pinned block for its D2H (``dsts``: the caller's
        output arrays, in batch order; ``addresses``: theirs, if read already). Returns
        {batch index: pinned address}."""
        places = self._places([d.nbytes for d in dsts])
        self._moved_from(batches)
        if addresses is None:
            addresses = [host_address(d) for d in dsts]
        for b, d, a, at in zip(batches, dsts, addresses, places):
            self.outputs.append((a, at, d.nbytes))
            b.dst_addr, b.drain_bytes = at, 0
        return {b.index: at for b, at in zip(batches, places)}

    def place_output(self, dst: Any, estimate: int, dst_addr: int) -> int:
        """A tensor function's output ``dst`` (at host address ``dst_addr``) made after its
        compute (``run_batches`` without ``outs``), in batch order: its place in a pinned
        block, taken at the first call for ``estimate`` bytes (the run's rows times the
        larger of the first output's and an earlier run's largest row size). 0 when it does
        not fit (longer rows than those, the pinned pool full): the D2H then goes straight
        into ``dst``, correct but not asynchronous."""
        if self._lazy is None:
            self._lazy = [0, 0]
            try:  # (at most BULK_MAX_BYTES: the outputs past it go straight to their arrays)
                block = self.pool.take(max(_aligned(min(estimate, BULK_MAX_BYTES)), ALIGN), self.usage)
            except Exception:  # noqa: BLE001 - PinnedPoolFull or a refused pinning: not in bulk
                block = None
            if block is not None:
                self.blocks.append(block)
                self._lazy = [block.ptr, block.ptr + block.nbytes]
        at, end = self._lazy
        if at + dst.nbytes > end:
            self.outputs.append((0, 0, 0))  # (keeps outputs[i] batch i's, for drain_some)
            return 0
        self._lazy[0] = at + _aligned(dst.nbytes)
        self.outputs.append((dst_addr, at, dst.nbytes))
        return at

    def drain_some(self, done: int, copier: Any) -> None:
        """The first ``done`` batches' D2Hs have finished: once their outputs not yet
        copied reach ``DRAIN_GROUP_BYTES``, start copying them into the caller's arrays on
        one of the copier's threads, while the run goes on."""
        if done <= self._drained:
            return
        group = self.outputs[self._drained:done]
        self._pending_bytes += sum(n for _, _, n in group[self._counted - self._drained:])
        self._counted = done
        if self._pending_bytes >= DRAIN_GROUP_BYTES:
            self._copying += copier.submit_many(group)
            self._drained, self._pending_bytes = done, 0

    def drain_here(self, done: int, copier: Any) -> None:
        """Every batch is enqueued and the first ``done`` batches' D2Hs have finished: copy
        their outputs not yet copied into the caller's arrays now, this thread among the
        copier's (``copy_many``: a few megabytes split over its threads, a batch or two on
        this thread alone), as this thread only waits for the GPU here. Handed to the
        copier's threads alone, the caller then waited 170 us a run for the last one (29
        encoder batches, an H200 host, session 55); copied on this thread alone, the 5 MB
        finished when the run's last batches were enqueued took it 1.4 ms."""
        if done <= self._drained:
            return
        copier.copy_many(self.outputs[self._drained:done])
        self._drained = self._counted = done
        self._pending_bytes = 0

    @property
    def drained_early(self) -> int:
        """How many outputs were copied out during the run."""
        return self._drained

    def drain_outputs(self, copier: Any) -> None:
        """After the run's last D2H: the rest of the outputs into the caller's arrays."""
        self.wait_copies()
        self.drain_here(len(self.outputs), copier)

    def wait_copies(self) -> None:
        """Wait for the copies started by :meth:`drain_some` (before the blocks go back,
        and before a failed run returns: they write the caller's arrays)."""
        copying, self._copying = self._copying, []
        for f in copying:
            f.result()

    def cancel(self) -> None:
        """Before the run: the batches read and write the caller's arrays again (the ring
        stages them), and the blocks go back."""
        self.give_back()

    def _moved_from(self, batches: Sequence[Any]) -> None:
        self._before += [(b, b.src_addr, b.dst_addr, b.drain_bytes) for b in batches]

    def give_back(self) -> None:
        """The blocks go back to the pinned pool (no GPU copy may be in flight), and the
        batches moved into them read and write the caller's arrays again: a run done again
        with the same batches (a compute that turned serial, executor.py) stages them anew,
        not from a block the pool has handed out since."""
        self.wait_copies()
        while self.blocks:
            self.pool.give(self.blocks.pop())
        self.outputs = []
        for b, src, dst, drain in reversed(self._before):  # (the first move's "before" last: the caller's)
            b.src_addr, b.dst_addr, b.drain_bytes = src, dst, drain
        self._before = []


class DeviceInputs:
    """A run's bulk-staged inputs uploaded to the GPU a group at a time: one device
    block laid out as the pinned block, one H2D per group of batches (the groups
    :meth:`BulkStaging.stage_inputs` copies together: 256 KiB, then 1 MiB each) instead
    of one per batch. A batch's input is then already on the device when its turn
    comes: its front half allocates nothing and copies nothing.

    Why: for a run of many small batches the host, not the GPU, sets the pace, and each
    batch's H2D costs a driver call and its Python between the compute calls (11 us per
    batch inside a run of 127 encoder batches on an H100 host, session 17).

    A group's H2D goes on ``upload``, a stream with no compute on it (on a lane's stream
    it would wait behind that lane's queued batches, and every other lane with it), when
    the loop reaches the group's first batch (``address`` is called in batch order);
    ``event`` is recorded behind it, and every lane waits for it there, before its next
    batch. One event does for every group: a wait takes the event's state when it is
    enqueued."""

    def __init__(self, staging: BulkStaging, device_ptr: int, hot: Any, lanes: Sequence[Any], upload: Any,
                 event: Any):
        self.staging, self.device_ptr, self.hot = staging, device_ptr, hot
        self.lanes, self.upload, self.event = list(lanes), upload, event
        self.pinned_ptr = staging.input_block.ptr
        self._groups = collections.deque(staging.input_groups)
        self._next = 0  # the first batch position whose group is not uploaded yet
        self.uploads = 0

    def address(self, pos: int, b: Any) -> int:
        """Batch ``b`` (run position ``pos``)'s input on the device; its group is uploaded
        first if this is the group's first batch."""
        while pos >= self._next:
            self._upload_next()
        return self.device_ptr + (b.src_addr - self.pinned_ptr)

    def _upload_next(self) -> None:
        hot = self.hot
        start, end = self._groups.popleft()
        self.staging.wait_input(start)  # its memmove into the pinned block is done
        batches = self.staging.input_batches
        first, last = batches[start], batches[end - 1]
        lo = first.src_addr - self.pinned_ptr
        hi = last.src_addr - self.pinned_ptr + last.in_bytes
        hot.memcpy_htod(self.device_ptr + lo, self.pinned_ptr + lo, hi - lo, self.upload, pinned=True)
        hot.event_record(self.event, self.upload)
        for h in self.lanes:
            hot.stream_wait_event(h, self.event)
        self._next = end
        self.uploads += 1
