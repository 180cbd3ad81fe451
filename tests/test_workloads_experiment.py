"""The workloads experiment's rules and figures on a plausible result dict (no GPU).

The numbers are shaped like an H200 run's (pinned 50 GB/s each way at once, host
memmove 25 GB/s each way); each test moves one of them across a target and checks
that the claim it feeds moves with it, and that the experiment's verdict is the
summary of its VERDICT_FROM claims. tests/report judges the rules again on a
recorded run once there is one."""

from __future__ import annotations

import copy

import pytest

from fullpipe.experiments import workloads as W
from fullpipe.experiments.claims import UNJUDGED, derive, with_claims
from fullpipe.experiments.result import Result

GB = 1e9


def _workload(name: str, fullpipe_ms: float, peers_ms: dict, compute_ms: float, in_bytes: int,
              sweep: dict | None = None, auto_bytes: float | None = None) -> dict:
    best = min(peers_ms, key=peers_ms.get)
    w = {"describe": name, "items": 4096, "item_name": "rows", "in_bytes": in_bytes, "out_bytes": in_bytes,
         "compute_alone_ms": compute_ms, "copy_bound_ms": in_bytes / 25e6, "fullpipe_ms": fullpipe_ms,
         "bound_ms": max(compute_ms, in_bytes / 25e6) if name == "copy-heavy" else compute_ms,
         "peers_ms": dict(peers_ms), "peer_errors": {}, "best_peer": best, "best_peer_ms": peers_ms[best],
         "vs_best_peer": peers_ms[best] / fullpipe_ms, "enqueue_us": 18.0, "auto_chunk_bytes": auto_bytes,
         "sweep_ms": dict(sweep or {})}
    w["fullpipe_ratio"] = w["bound_ms"] / fullpipe_ms
    if sweep:
        b = min(sweep, key=sweep.get)
        w.update(best_fixed_chunk=b, best_fixed_ms=sweep[b], auto_vs_best_fixed=sweep[b] / fullpipe_ms)
    return w


def _table(workloads: dict) -> list[dict]:
    rows = []
    for name, w in workloads.items():
        if w.get("skipped"):
            continue
        for label, ms in [*w["peers_ms"].items(), (W.FULLPIPE, w["fullpipe_ms"])]:
            rows.append({"workload": name, "kind": "peer", "what": label,
                         "chunk_MiB": (w["auto_chunk_bytes"] or 0) / 2**20 if label == W.FULLPIPE else None,
                         "wall_ms": ms, "in_GB/s": w["in_bytes"] / (ms * 1e6), "items/s": 4096 / ms * 1e3,
                         "ratio_to_bound": w["bound_ms"] / ms, "enqueue_us": None, "max_row_error": 0.004})
        for chunk, ms in w["sweep_ms"].items():
            rows.append({"workload": name, "kind": "sweep", "what": f"{W.FULLPIPE}, chunk {chunk}",
                         "chunk_MiB": float(chunk[:-3]), "wall_ms": ms, "in_GB/s": None, "items/s": None,
                         "ratio_to_bound": w["bound_ms"] / ms, "enqueue_us": None, "max_row_error": 0.004})
    return rows


def result(**change) -> dict:
    """An H200-like result where every target is met; ``change`` overrides a workload's numbers."""
    gib = 1 << 30
    copy_ms = gib / 25e6  # 42.9 ms at the 25 GB/s memmove bound
    ws = {
        "copy-heavy": _workload("copy-heavy", copy_ms / 0.93, {"naive loop": 180.0, "hand-written pipeline": 110.0,
                                                              "DataLoader": 400.0}, 8.0, gib,
                                {"8MiB": 50.0, "16MiB": 47.0, "32MiB": 46.5, "64MiB": 48.0}, 16 * 2**20),
        "compute-bound": _workload("compute-bound", 300.0 / 0.97, {"naive loop": 340.0, "hand-written pipeline": 318.0,
                                                                  "DataLoader": 330.0}, 300.0, 616 << 20,
                                   {"16MiB": 312.0, "32MiB": 310.0, "64MiB": 311.0}, 32 * 2**20),
        "variable-length": _workload("variable-length", 80.0 / 0.96, {"naive loop": 120.0,
                                                                     "hand-written pipeline": 86.0,
                                                                     "DataLoader": 130.0}, 80.0, 4 << 20),
    }
    for name, w in change.items():
        ws[name] = w
    metrics = {"pinned_peak": {"h2d": 55.0, "d2h": 55.0, "both_each_way": 50.0},
               "host_memmove": {"threads": 5, "in_gbps": 30.0, "both_gbps_each_way": 25.0},
               "copy_bound_gbps_each_way": 25.0, "workloads": ws}
    return Result(W.NAME, W.CLAIM, UNJUDGED, {"name": "NVIDIA H200"}, {"quick": False}, metrics,
                  table=_table(ws)).as_dict()


def verdicts(r: dict) -> dict[str, str]:
    return {c["key"]: c["verdict"] for c in derive(r, live=True)}


def headline(r: dict) -> str:
    return with_claims(Result.from_dict(copy.deepcopy(r)), W.VERDICT_FROM).verdict


def test_every_target_met_is_supported():
    r = result()
    v = verdicts(r)
    assert set(v) == set(W.VERDICT_FROM) | {"workload-auto-chunk"}
    assert all(x == "supported" for x in v.values()), v
    assert headline(r) == "supported"


def test_copy_heavy_is_judged_against_the_slower_of_memmove_and_pinned():
    gib = 1 << 30
    # 0.85x of the memmove bound (25 GB/s each way); 0.43x of the pinned peak, which is not the bound here
    slow = _workload("copy-heavy", gib / 25e6 / 0.85, {"naive loop": 180.0, "hand-written pipeline": 110.0,
                                                       "DataLoader": 400.0}, 8.0, gib)
    v = verdicts(result(**{"copy-heavy": slow}))
    assert v["workload-copy-heavy"] == "partly supported"
    row = next(c for c in derive(result(**{"copy-heavy": slow}), live=True) if c["key"] == "workload-copy-heavy")
    assert row["ratio"] == pytest.approx(0.85)
    assert headline(result(**{"copy-heavy": slow})) == "partly supported"


def test_a_host_copy_faster_than_the_rings_threads_raises_the_copy_bound():
    """The hand-written peer's torch copy_ moved the bytes faster than the ring's threads
    (H200): the bound is then the faster method, and 0.93x of the ring-thread rate is
    only 0.58x of what the host showed it can do."""
    r = result()
    assert verdicts(r)["workload-copy-heavy"] == "supported"
    r["metrics"]["host_torch_copy"] = {"threads": 16, "each_way_gbps": 40.0}
    row = next(c for c in derive(r, live=True) if c["key"] == "workload-copy-heavy")
    assert row["ratio"] == pytest.approx(0.93 * 25 / 40)
    assert row["verdict"] == "not supported" and "torch copy_ (16 threads)" in row["bound"]
    r["metrics"]["host_torch_copy"] = {"threads": 16, "each_way_gbps": 20.0}  # slower: the ring's rate stays
    assert verdicts(r)["workload-copy-heavy"] == "supported"


def test_compute_bound_below_target_and_behind_a_peer():
    slow = _workload("compute-bound", 300.0 / 0.9, {"naive loop": 340.0, "hand-written pipeline": 318.0,
                                                    "DataLoader": 330.0}, 300.0, 616 << 20)
    v = verdicts(result(**{"compute-bound": slow}))
    assert v["workload-compute-bound"] == "partly supported"  # 0.90x compute alone
    assert v["workload-vs-peers"] == "partly supported"  # 0.95x the hand-written pipeline
    assert v["workload-variable-length"] == "supported"


def test_copy_heavy_needs_twice_the_best_peer():
    gib = 1 << 30
    close = _workload("copy-heavy", gib / 25e6 / 0.93, {"naive loop": 180.0, "hand-written pipeline": 70.0,
                                                        "DataLoader": 400.0}, 8.0, gib)
    v = verdicts(result(**{"copy-heavy": close}))
    assert v["workload-copy-heavy"] == "supported"
    assert v["workload-copy-heavy-2x"] == "partly supported"  # 70 / 46.1 = 1.52x
    assert headline(result(**{"copy-heavy": close})) == "partly supported"


def test_auto_chunk_within_five_percent_of_the_best_fixed_chunk():
    def with_auto(ms: float) -> dict:  # compute alone 302 ms at the peers' batches, 300 ms at 32 MiB
        return _workload("compute-bound", ms, {"naive loop": 340.0, "hand-written pipeline": 330.0,
                                               "DataLoader": 335.0}, 302.0, 616 << 20,
                         {"16MiB": 312.0, "32MiB": 300.0, "64MiB": 311.0}, 8 * 2**20)

    assert verdicts(result(**{"compute-bound": with_auto(314.0)}))["workload-auto-chunk"] == "supported"
    slower = result(**{"compute-bound": with_auto(317.0)})  # 1.057x the best fixed chunk
    assert verdicts(slower)["workload-auto-chunk"] == "partly supported"
    assert verdicts(slower)["workload-compute-bound"] == "supported"  # 0.953x compute alone
    # the auto-chunk claim is a further claim: it does not move the experiment's verdict
    assert headline(slower) == "supported"


def test_a_workload_not_run_says_so():
    r = result(**{"compute-bound": {"skipped": "torchvision could not be imported (ModuleNotFoundError)"}})
    rows = {c["key"]: c for c in derive(r, live=True)}
    assert rows["workload-compute-bound"]["verdict"] == "skipped"
    assert "torchvision" in rows["workload-compute-bound"]["measured"]
    assert rows["workload-vs-peers"]["verdict"] == "supported"
    assert "not run: compute-bound" in rows["workload-vs-peers"]["measured"]
    assert headline(r) == "partly supported"  # only part of the claim was tested


def test_figures_are_drawn_from_the_json(tmp_path):
    drawn = W.figures(result(), tmp_path)
    assert len(drawn) == 2
    for path in drawn.values():
        assert path.exists() and path.stat().st_size > 10_000


def test_a_failed_or_skipped_run_keeps_its_verdict():
    r = result()
    for kept in ("failed", "skipped"):
        res = Result.from_dict({**copy.deepcopy(r), "verdict": kept})
        assert with_claims(res, W.VERDICT_FROM).verdict == kept


def test_without_cuda_in_pytorch_the_experiment_is_skipped(monkeypatch):
    torch = pytest.importorskip("torch")
    from fullpipe.experiments import Context

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(W, "device_info", lambda dev: {"name": "test"})
    r = W.run(Context(device=object()))
    assert r.verdict == "skipped"
    assert "no CUDA" in r.notes[0]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_rounds_put_each_contender_in_every_position_and_after_every_other_equally_often(n):
    from collections import Counter

    from fullpipe.experiments.measure import in_turn, square_rounds

    names = [f"c{i}" for i in range(n)]
    cycle = square_rounds(n)
    rounds = [in_turn(names, r) for r in range(cycle)]
    assert all(sorted(order) == names for order in rounds)
    positions = Counter((pos, c) for order in rounds for pos, c in enumerate(order))
    assert set(positions.values()) == {cycle // n}  # every contender once per position (per n rounds)
    follows = Counter((a, b) for order in rounds for a, b in zip(order, order[1:]))
    assert len(follows) == n * (n - 1) and set(follows.values()) == {cycle // n}
    assert in_turn(names, cycle) == rounds[0] and in_turn(names[:1], 5) == names[:1] and in_turn([], 0) == []


def test_cheap_rounds_are_timed_up_to_a_whole_square_and_slow_ones_at_least_the_minimum():
    from fullpipe.experiments.measure import rounds_within

    # 5 contenders: a whole balanced square is 10 rounds
    assert rounds_within(5, round_s=0.135, budget_s=4.0, least=3) == 10  # copy-heavy sweep: all of it fits
    assert rounds_within(5, round_s=0.5, budget_s=4.0, least=3) == 8  # as many as fit
    assert rounds_within(4, round_s=1.2, budget_s=1.5, least=3) == 3  # resnet rounds: the minimum
    assert rounds_within(6, round_s=0.0, budget_s=1.0, least=3) == 6  # (a round too short to time)


def test_timed_rounds_plan_from_the_first_round_and_give_each_rounds_order():
    from fullpipe.experiments.measure import in_turn, timed_rounds

    names = [f"c{i}" for i in range(5)]
    got = [(r, rounds, order) for r, rounds, order in timed_rounds(names, 3, budget_s=60.0)]  # cheap: a whole square
    assert [r for r, _, _ in got] == list(range(10)) and got[0][1] == 3 and {n for _, n, _ in got[1:]} == {10}
    assert all(order == in_turn(names, r) for r, _, order in got)
    assert list(timed_rounds(names, 0, budget_s=60.0)) == []
