"""A long list of small batches: run plainly or pipelined, chosen by measuring both.

``run_batches`` runs a short list plainly (plain.py: every batch on the caller's stream,
one wait at the end) and a long one pipelined (three streams, the staging ring, events).
Over a long list of small batches neither is always faster, and nothing in the list says
which will be (session 32, p225, an H100 host, µs a batch):

    x * 2, 400 batches of 64 KiB          pipelined 120.5   plain  78.2
    MLP 512-2048-512, 300 batches         pipelined 142.6   plain 104.2
    an encoder layer, 127 token batches   pipelined 505.0   plain 578.2

Plain wins where the GPU does little per batch and the pipeline's host time per batch is
the cost; pipelined wins where the batches' kernels overlap on three streams. Their bytes
do not tell them apart (the encoder's inputs are small too), nor do the stage timings (a
host-bound call stretches its compute span). So the pipeline measures: for each kind of
list (:func:`list_key`) its runs alternate, pipelined first, until each path ran
``WARMUP + TRIALS`` times; the first ``WARMUP`` runs of each are not counted (a path's first
runs of a kind pay for its pinned blocks and the allocator's first blocks of those sizes).
Plain is kept from then on where its best run took at most ``PLAIN_MARGIN`` of the
pipelined path's best time per batch, else pipelined. The margin is for this host's noise:
on an H100 host a run's time drifts up to 2x over seconds, and one encoder round in four
ran plainly faster than pipelined though the median of 11 said 1.18x the other way (session
33, p226). ``pipe.retune()`` forgets the choices; ``stats.list_path`` says which path a run
took and why.

Session 33 (p226; H100 and H200 hosts, four machines): the trial kept plain for ``x * 2``
and the small MLP above (0.83-1.05x the naive loop, against 0.52-0.72x pipelined) and
pipelined for the encoder, a 2-layer GRU, a small CNN and a GPU-heavy MLP, each within
0.82-1.06x the faster of the two ways forced.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

PLAIN, PIPELINED = "plain", "pipelined"
WARMUP = 1  # runs of each path not measured
TRIALS = 2  # measured runs of each path before the choice (the best counts)
PLAIN_MARGIN = 0.85  # plain is kept where its best is at most this share of the pipelined path's best
MAX_KINDS = 256  # kinds of list remembered (the oldest forgotten first)


def list_key(arrays: list[np.ndarray], library: str) -> tuple:
    """What a list's per-batch time depends on, besides the compute: its dtype, the kind of
    host array, and its batches' mean size within a factor of two."""
    mean = sum(a.nbytes for a in arrays) / len(arrays)
    return arrays[0].dtype.str, library, int(math.log2(max(mean, 1.0)))


class ListPaths:
    """The measured choice between the plain and the pipelined path, per kind of list."""

    def __init__(self) -> None:
        # per kind of list: per path, the runs seen and the µs per batch of those measured
        self._runs: dict[tuple, dict[str, list[float]]] = {}
        self._seen: dict[tuple, dict[str, int]] = {}

    def next_path(self, key: tuple) -> str:
        """The path to run this list on: the one chosen, or during the trial the next to measure."""
        seen = self._seen.get(key)
        if seen is None:
            return PIPELINED
        done = self._chosen(self._runs[key])
        if done is not None:
            return done
        return PLAIN if seen[PLAIN] < seen[PIPELINED] else PIPELINED

    def record(self, key: tuple, path: str, seconds: float, batches: int) -> None:
        """A run of ``batches`` on ``path`` took ``seconds`` (the call, end to end); counted
        only during the trial, and measured after the path's warm-up runs."""
        runs = self._runs.get(key)
        if runs is None:
            if len(self._runs) >= MAX_KINDS:
                oldest = next(iter(self._runs))
                del self._runs[oldest], self._seen[oldest]
            runs = self._runs[key] = {PLAIN: [], PIPELINED: []}
            self._seen[key] = {PLAIN: 0, PIPELINED: 0}
        if self._chosen(runs) is not None:
            return
        seen = self._seen[key]
        seen[path] += 1
        if seen[path] > WARMUP and len(runs[path]) < TRIALS:
            runs[path].append(seconds * 1e6 / max(batches, 1))

    def in_trial(self, key: tuple) -> bool:
        runs = self._runs.get(key)
        return runs is None or self._chosen(runs) is None

    def describe(self, key: tuple, path: str, trial: bool) -> dict[str, Any]:
        """For ``stats.list_path``, once a run is recorded: the path it took, whether it was
        a run of the trial (``trial``) or the choice, the choice once made (``chosen``), and
        the trial's best µs per batch of each path."""
        runs = self._runs.get(key, {PLAIN: [], PIPELINED: []})
        out: dict[str, Any] = {"path": path}
        if trial:
            seen = self._seen.get(key, {PLAIN: 0, PIPELINED: 0})
            out["source"] = f"trial run {seen[PLAIN] + seen[PIPELINED]} of {2 * (WARMUP + TRIALS)}"
            chosen = self._chosen(runs)
            if chosen is not None:
                out["source"] += f": from now on {chosen}"
                out["chosen"] = chosen
        else:
            out["source"] = "chosen by the trial (the faster per batch)"
            out["chosen"] = path
        for p in (PLAIN, PIPELINED):
            if runs[p]:
                out[f"{p}_us_per_batch"] = round(min(runs[p]), 1)
        return out

    def clear(self) -> None:
        self._runs.clear()
        self._seen.clear()

    @staticmethod
    def _chosen(runs: dict[str, list[float]]) -> str | None:
        if len(runs[PLAIN]) < TRIALS or len(runs[PIPELINED]) < TRIALS:
            return None
        return PLAIN if min(runs[PLAIN]) <= PLAIN_MARGIN * min(runs[PIPELINED]) else PIPELINED
