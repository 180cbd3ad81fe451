"""The gemm-prefill experiment's summary, rules, verdict and figure on hand-made results
(no GPU), shaped like session 58's H200 probes (p396): the transposed product about 1.15x
the unswapped build where the rule takes it, the rule about 0.85x cuBLAS. Each test moves
one number across a target and checks that the claim it feeds moves with it."""

from __future__ import annotations

import copy
import types

import pytest

from fullpipe.experiments import gemm_prefill as G
from fullpipe.experiments.claims import UNJUDGED, derive, with_claims
from fullpipe.experiments.result import Result


def _row(layer, tokens, layout, swapped, vs_cublas, vs_unswapped):
    cublas = 20.0 + tokens / 10
    rule = cublas / vs_cublas
    plain = rule * vs_unswapped
    return {"layer": layer, "tokens": tokens, "layout": layout, "m": tokens, "n": 4096, "k": 4096,
            "build": "swap" if swapped else "2x1-g8", "unswapped_build": "2x1-g8", "swapped": swapped,
            "cublas_us": cublas, "rule_us": rule, "unswapped_us": plain, "vs_cublas": vs_cublas,
            "unswapped_vs_cublas": cublas / plain, "vs_unswapped": vs_unswapped, "rel_err": 1.7e-3}


def result(gain: float = 1.15, vs_cublas: float = 0.86, rel_err: float = 1.7e-3) -> dict:
    """A result dict as run() writes it: per layout, two products the rule swaps (``gain``
    over the unswapped build) and one it does not, every rule ``vs_cublas``."""
    table = []
    for layout in G.LAYOUTS:
        table += [_row("qkv", 200, layout, True, vs_cublas, gain), _row("gate-up", 300, layout, True, vs_cublas, gain),
                  _row("o", 512, layout, False, vs_cublas, 1.0)]
    for row in table:
        row["rel_err"] = rel_err
    r = Result(G.NAME, G.CLAIM, UNJUDGED, {"name": "NVIDIA H200", "sm_count": 132}, {"tokens": [200, 300, 512]},
               G.summarize(table), table=table)
    return r.as_dict()


def claims(r: dict) -> dict[str, dict]:
    return {c["key"]: c for c in derive(r, live=True)}


def test_the_summary_takes_geometric_means_per_layout_over_the_products_it_swaps():
    r = result()
    m = r["metrics"]
    assert m["swapped_products"] == {"w.T": 2, "row-major": 2}
    assert m["swap_gain"]["w.T"] == pytest.approx(1.15) and m["swap_gain"]["row-major"] == pytest.approx(1.15)
    assert m["vs_cublas_all"] == pytest.approx(0.86)
    # the unswapped build against cuBLAS: the rule's ratio divided by its gain where it swaps
    assert m["unswapped_vs_cublas"]["w.T"] == pytest.approx(0.86 / 1.15 ** (2 / 3))
    assert G.geomean([1.0, 4.0]) == pytest.approx(2.0)


def test_the_transposed_product_is_judged_in_its_worse_layout():
    c = claims(result())
    assert c["gemm-prefill-swap"]["verdict"] == "supported" and c["gemm-prefill-swap"]["ratio"] == pytest.approx(1.15)
    r = result()
    r["table"] = [dict(x, vs_unswapped=0.95) if x["layout"] == "row-major" and x["swapped"] else x for x in r["table"]]
    r["metrics"] = G.summarize(r["table"])
    c = claims(r)
    assert c["gemm-prefill-swap"]["verdict"] == "not supported" and "worst layout: row-major" in c[
        "gemm-prefill-swap"]["bound"]
    assert claims(result(gain=1.05))["gemm-prefill-swap"]["verdict"] == "partly supported"


def test_against_cublas_the_rule_is_judged_over_every_product():
    assert claims(result(vs_cublas=0.92))["gemm-prefill-vs-cublas"]["verdict"] == "supported"
    assert claims(result(vs_cublas=0.86))["gemm-prefill-vs-cublas"]["verdict"] == "partly supported"
    assert claims(result(vs_cublas=0.7))["gemm-prefill-vs-cublas"]["verdict"] == "not supported"
    assert "unswapped" in claims(result())["gemm-prefill-vs-cublas"]["measured"]


def test_the_headline_is_the_summary_of_both_claims():
    r = with_claims(Result.from_dict(copy.deepcopy(result(gain=1.2, vs_cublas=0.95))), G.VERDICT_FROM)
    assert r.verdict == "supported"
    r = with_claims(Result.from_dict(copy.deepcopy(result(gain=1.2, vs_cublas=0.85))), G.VERDICT_FROM)
    assert r.verdict == "partly supported"


def test_a_layout_not_measured_is_missing_not_judged():
    r = result()
    r["metrics"]["swap_gain"] = {"w.T": None, "row-major": None}
    assert claims(r)["gemm-prefill-swap"]["verdict"] not in ("supported", "partly supported")


def test_the_figure_is_drawn_from_the_json(tmp_path):
    pytest.importorskip("matplotlib")
    drawn = G.figures(result(), tmp_path)
    (path,) = drawn.values()
    assert path.exists() and path.stat().st_size > 10_000


def test_without_an_sm_90a_gpu_or_pytorch_the_experiment_is_skipped(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    facts = types.SimpleNamespace(name="NVIDIA A100", arch="sm_80", sm_count=108, compute_capability=(8, 0),
                                  copy_engines=3)
    dev = types.SimpleNamespace(facts=facts, index=0)
    monkeypatch.setattr(G, "device_info", lambda d: {"name": d.facts.name})
    r = G.run(types.SimpleNamespace(device=dev, quick=True, progress=lambda f, m: None))
    assert r.verdict == "skipped" and "sm_90a" in r.notes[0]
