"""A long list of batches: run plainly (small batches only), pipelined, or pipelined with
the compute's calls on several threads, chosen by measuring.

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
list (:func:`list_key`) its runs alternate, pipelined first, until each way ran
``WARMUP + TRIALS`` times; the first ``WARMUP`` runs of each are not counted (a way's first
runs of a kind pay for its pinned blocks and the allocator's first blocks of those sizes;
on compute threads, the threads' own cuDNN plans). Each way's typical run counts, the
median of its measured runs, not its best: a pipelined run of a host-bound encoder took
514-902 µs a batch over nine rounds where the same list on threads took 490-566 (session
35, an H200 host; its calls and the staging threads take turns on the GIL), and a trial
that kept the best of two runs saw 525 against 506 and kept pipelined (0.72x compute alone
in the timed rounds, 0.99x on threads). Plain is kept from then on where its median run
took at most ``PLAIN_MARGIN`` of the best other way's time per batch. The margin is for
this host's noise: on an H100 host a run's time drifts up to 2x over seconds, and one
encoder round in four ran plainly faster than pipelined though the median of 11 said 1.18x
the other way (session 33, p226). ``pipe.retune()`` forgets the choices;
``stats.list_path`` says which way a run took and why.

The third way, ``THREADS``, is for a compute whose Python call sets the pace: the same
encoder layer on slower hosts ran at 0.65-0.83x compute alone pipelined, its call taking
660 µs a batch inside fullpipe for 521 µs a batch of compute alone, and at 0.98-1.02x with
its calls on 3 threads (session 33, 35; compute_threads.py says why threads help there
and hurt elsewhere). It is measured only where the executor says the calls may go to
threads (a PyTorch tensor function, ``compute_threads="auto"``, nothing per-thread in the
way) and the first measured pipelined run's calls took at least ``HOST_BOUND_SHARE`` of
its time; it is kept where its median run took at most ``THREADS_MARGIN`` of the pipelined
way's: at parity too, since the calls set the pace there, and one enqueueing thread takes
every hiccup of the host while three have slack. The trial's runs have read threads' gain
short each time it was checked against rounds timed after it: the resnet18 list 0.96x
pipelined in the trial, 0.69x after (session 36, p244); the encoder of ``bench workloads``
0.905x, then 0.83x (session 38); the same encoder 1.002x (497 against 496 µs a batch),
then 0.84x (session 43, an H200 host: pipelined 0.86x compute alone, threads 1.03x). The
margin was 0.9 until session 38, 0.95 until session 43.

The choice is not frozen: a trial's runs are a list's first, while allocators, caches and
threads warm up, and on a host whose speed drifts they have read the ways wrong both ways
(session 51, H200 hosts, the bench's encoder at --quick's size: a trial kept threads at 926
µs a batch against plain's 893, and threads then ran 993; another kept pipelined at 592
against threads' 618, and pipelined then ran 707 a batch where threads forced ran 603). So each way keeps the
median of its latest ``TRIALS`` measured runs: the chosen way's own runs renew its median at
every run, and now and then one run of another way renews that one's (``RECHECK_EVERY`` runs
after the choice, doubling up to ``RECHECK_MOST`` while that way stays slower by
``RECHECK_SLOWER``): the choice follows the latest medians by the same margins.

A way far slower than the best other in a measured run of the trial (``ABANDON_SLOWER``; not
pipelined, the baseline) is measured no more there, and rechecked only every ``RECHECK_MOST`` runs
after the choice: the trial runs a user's own work, and on a list of requests through a 2-layer
encoder the threads' windows ran 30-60x slower than pipelined ones (session 55), so that each of
the four threads runs the trial took cost seconds.

A long list of larger batches (more than 16, beyond the small batches' limits) never runs
plainly, but its calls may set the pace too: a resnet18 over 150 lists of 1-16 images
(1.2 MB a batch) ran 2702 µs a batch pipelined and 1821 on three threads (an H200 host,
session 36, p244). Its trial (``plain=False``) is pipelined alone until a measured run
says whether the calls set the pace, then pipelined against threads.

Session 33 (p226; H100 and H200 hosts, four machines): the trial kept plain for ``x * 2``
and the small MLP above (0.83-1.05x the naive loop, against 0.52-0.72x pipelined) and
pipelined for the encoder, a 2-layer GRU, a small CNN and a GPU-heavy MLP, each within
0.82-1.06x the faster of the two ways forced.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PLAIN, PIPELINED, THREADS = "plain", "pipelined", "threads"
WAYS = (PIPELINED, PLAIN, THREADS)  # (the order of the trial's runs, ties to the first)
WARMUP = 1  # runs of each way not measured
TRIALS = 3  # measured runs of each way before the choice (their median counts)
PLAIN_MARGIN = 0.85  # plain is kept where its median is at most this share of the best other way's
THREADS_MARGIN = 1.02  # threads are kept where their median is at most this share of the pipelined way's
HOST_BOUND_SHARE = 0.5  # the calls' share of a pipelined run's time from which threads are measured too
MAX_KINDS = 256  # kinds of list remembered (the oldest forgotten first)
RECHECK_EVERY = 16  # after the choice, another way runs once every this many runs of the kind ...
RECHECK_MOST = 256  # ... its interval doubling, up to this, while it stays this much slower:
RECHECK_SLOWER = 1.15
# A way (plain or threads) whose measured run in the trial took this many times the best other
# way's typical run is measured no more there: that run stands for its trial, and it runs again
# only RECHECK_MOST runs after the choice. Threads' first windows of 120 requests through a
# 2-layer fp16 encoder ran 29-39 ms a batch against pipelined's 0.6-1.0 (imap, an H200 host,
# session 55, u3/u4): each of the trial's four threads runs cost a user 1.5-4.6 s.
ABANDON_SLOWER = 3.0


def list_key(arrays: list[np.ndarray], library: str) -> tuple:
    """What a list's per-batch time depends on, besides the compute: its dtype, the kind of
    host array, and its batches' mean size within a factor of two."""
    mean = sum(a.nbytes for a in arrays) / len(arrays)
    return arrays[0].dtype.str, library, int(math.log2(max(mean, 1.0)))


@dataclass
class _Trial:
    """One kind of list's trial: the runs seen and the µs per batch of those measured, per
    way; whether the threads' way is measured too (None until the first measured pipelined
    run says whether its calls set the pace); whether plain is a way (``plain``: not for
    lists of larger batches, which only the threads' way may beat)."""
    seen: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WAYS, 0))
    us: dict[str, list[float]] = field(default_factory=lambda: {w: [] for w in WAYS})
    threads: bool | None = None
    plain: bool = True
    after: int = 0  # runs since the choice (next_path's count)
    check_at: dict[str, int] = field(default_factory=dict)  # per other way: the run at which it runs again
    interval: dict[str, int] = field(default_factory=dict)  # ... and the runs until the next time after that
    checking: str | None = None  # the way next_path handed out as a check, until its run is recorded
    rechecks: int = 0

    def ways(self) -> tuple[str, ...]:
        return tuple(w for w in WAYS if (w != PLAIN or self.plain) and (w != THREADS or self.threads))

    def typical(self, way: str) -> float:
        """The way's typical µs per batch so far: the median of its measured runs."""
        return statistics.median(self.us[way])

    def chosen(self, threads_now: bool = True) -> str | None:
        """The way chosen once every way measured ran ``TRIALS`` times, else None; with
        ``threads_now`` False, the choice between the other two (the threads' way may not
        run this time)."""
        if self.threads is None or any(len(self.us[w]) < TRIALS for w in self.ways()):
            return None
        best, t = PIPELINED, self.typical(PIPELINED)
        if self.threads and threads_now and self.typical(THREADS) <= THREADS_MARGIN * t:
            best, t = THREADS, min(t, self.typical(THREADS))  # (threads taken at parity: the faster time counts)
        return PLAIN if self.plain and self.typical(PLAIN) <= PLAIN_MARGIN * t else best

    def recheck(self, path: str, us: float) -> None:
        """A run after the choice took ``us`` a batch on ``path``: the newest of the way's
        ``TRIALS`` runs counted. A run handed out as a check (next_path) sets when that way
        runs again: RECHECK_EVERY runs on, or twice its last interval (up to RECHECK_MOST)
        where it was RECHECK_SLOWER than the chosen way's median."""
        checked, self.checking = self.checking, None  # (a check whose run went another way is over too)
        if path == checked:
            self.rechecks += 1
            current = self.chosen()
            last = self.interval.get(path, RECHECK_EVERY)
            slower = current is not None and current != path and us > RECHECK_SLOWER * self.typical(current)
            self.interval[path] = min(2 * last, RECHECK_MOST) if slower else RECHECK_EVERY
            self.check_at[path] = self.after + self.interval[path]
        self.us[path] = (self.us[path] + [us])[-TRIALS:]


class ListPaths:
    """The measured choice of the way to run a long list, per kind of list."""

    def __init__(self) -> None:
        self._trials: dict[tuple, _Trial] = {}

    def next_path(self, key: tuple, may_thread: bool = False) -> str:
        """The way to run this list: the one chosen (now and then, once, another way, to
        renew its median: RECHECK_EVERY), or during the trial the next to measure
        (``may_thread``: whether its calls may go to threads this run; where not, the
        threads' way is left out of the trial, or not taken once chosen)."""
        t = self._trials.get(key)
        if t is None:
            return PIPELINED
        if not may_thread and t.threads and t.chosen() is None:
            t.threads = False  # (its trial goes on without it)
        done = t.chosen(threads_now=may_thread)
        if done is None:
            # (of the ways still measured, the fewest runs; ties to the first in WAYS)
            return min((w for w in t.ways() if len(t.us[w]) < TRIALS), key=lambda w: t.seen[w])
        t.after += 1
        for w in t.ways():  # (now and then one run of another way: its median renewed, _Trial.recheck)
            if w == done or (w == THREADS and not may_thread):
                continue
            # (a way first passed over here, as the one chosen before, runs again RECHECK_EVERY runs on)
            if t.after >= t.check_at.setdefault(w, t.after + RECHECK_EVERY):
                t.checking = w  # (its next time set now, in case this run records another way or none)
                t.check_at[w] = t.after + t.interval.get(w, RECHECK_EVERY)
                return w
        return done

    def record(self, key: tuple, path: str, seconds: float, batches: int, call_s: float | None = None,
               plain: bool = True) -> None:
        """A run of ``batches`` on ``path`` took ``seconds`` (the call, end to end); during the
        trial counted after the way's warm-up runs, after it as the way's newest run
        (_Trial.recheck). ``call_s``: a
        pipelined run's compute calls' time on the enqueueing thread, where they may go to
        threads (None where not). ``plain``: whether this kind of list may run plainly (its
        first run says, for the whole trial)."""
        t = self._trials.get(key)
        if t is None:
            if len(self._trials) >= MAX_KINDS:
                del self._trials[next(iter(self._trials))]  # (the oldest)
            t = self._trials[key] = _Trial(plain=plain)
        if t.chosen() is not None:  # (after the choice: the way's latest runs renew its median)
            t.recheck(path, seconds * 1e6 / max(batches, 1))
            return
        t.seen[path] += 1
        if t.seen[path] > WARMUP and len(t.us[path]) < TRIALS:
            us = seconds * 1e6 / max(batches, 1)
            t.us[path].append(us)
            if path == PIPELINED and t.threads is None:
                t.threads = call_s is not None and call_s >= HOST_BOUND_SHARE * seconds
            best_other = min((t.typical(w) for w in t.ways() if w != path and t.us[w]), default=None)
            if path != PIPELINED and best_other is not None and us > ABANDON_SLOWER * best_other:
                t.us[path] += [us] * (TRIALS - len(t.us[path]))  # (its trial over: ABANDON_SLOWER)
                t.check_at[path] = t.interval[path] = RECHECK_MOST

    def in_trial(self, key: tuple) -> bool:
        t = self._trials.get(key)
        return t is None or t.chosen() is None

    def describe(self, key: tuple, path: str, trial: bool) -> dict[str, Any]:
        """For ``stats.list_path``, once a run is recorded: the way it took, whether it was
        a run of the trial (``trial``) or the choice, the choice once made (``chosen``), and
        the trial's typical (median) µs per batch of each way."""
        t = self._trials.get(key, _Trial())
        out: dict[str, Any] = {"path": path}
        if trial:  # (the threads' runs counted also where they left the trial; a way measured no more: its runs)
            runs = sum(t.seen[w] if len(t.us[w]) >= TRIALS else WARMUP + TRIALS for w in t.ways()) + (
                0 if t.threads else t.seen[THREADS])
            out["source"] = f"trial run {sum(t.seen.values())} of {runs}"
            chosen = t.chosen()
            if chosen is not None:
                out["source"] += f": from now on {chosen}"
                out["chosen"] = chosen
        else:
            out["source"] = ("chosen by each way's latest runs (per batch: the faster, threads at parity; another "
                             f"way run again every {RECHECK_EVERY}-{RECHECK_MOST} runs: {t.rechecks} so far)")
            out["chosen"] = t.chosen() or path
        for w in WAYS:
            if t.us[w]:
                out[f"{w}_us_per_batch"] = round(t.typical(w), 1)
        return out

    def clear(self) -> None:
        self._trials.clear()
