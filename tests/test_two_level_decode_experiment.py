"""The decode experiment's rules, figure and pure helpers on hand-made results (no GPU):
each test moves one number across a target and checks that the claim it feeds moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from fullpipe.experiments import two_level_decode as T
from fullpipe.experiments.claims import UNJUDGED, derive
from fullpipe.experiments.result import Result
from fullpipe.models import StackConfig

MiB = 1 << 20


def result(both=40.0, compiled=22.0, static=2.0, layer_graph=0.85, layer_eager=0.5, pool=1.0, malloc=1.0,
           cache_mib=800.0, segments=0, with_compiled=True) -> dict:
    """Metrics shaped like measure_decode's: dynamic eager at 160 tokens/s, the rest as multiples."""
    eager = 160.0
    tps = {T.EAGER: eager, T.EAGER_STATIC: static * eager, T.LEVEL1: 20 * eager, T.LEVEL2: 12 * eager,
           T.BOTH: both * eager}
    if with_compiled:
        tps[T.COMPILED] = compiled * eager
    tps[T.LAYERWISE_EAGER] = layer_eager * tps[T.LEVEL2]
    tps[T.LAYERWISE_POOL] = pool * tps[T.LAYERWISE_EAGER]
    tps[T.LAYERWISE_MALLOC] = malloc * tps[T.LAYERWISE_EAGER]
    tps[T.LAYERWISE_GRAPH] = layer_graph * tps[T.BOTH]
    steps, B = 96, 8
    wall = {k: B * steps / v for k, v in tps.items()}
    ref = max((T.EAGER, T.EAGER_STATIC), key=lambda k: tps[k])
    m = {"batch": B, "lengths": [1000] * B, "steps": steps, "warmup": 9, "repeat": 3, "capacity": 2000,
         "tokens_per_s": tps, "wall_s": wall, "spread": {k: 0.01 for k in tps},
         "vs_eager": {k: wall[ref] / w for k, w in wall.items()}, "eager_reference": ref,
         "ms_per_step": {k: 1e3 * w / steps for k, w in wall.items()},
         "max_rel_err_vs_eager": {k: 0.016 for k in tps if k != T.EAGER}, "max_rel_err_bound": T.MAX_REL_ERR,
         "bound_ms_per_step": 0.5, "bytes_per_step": 2_400_000_000, "hbm_copy_bytes_per_s": 4.8e12,
         "matmul": "torch.matmul",
         "memory": {"cache_bytes": int(cache_mib * MiB), "cache_pages": 136, "page_bytes": 6 * MiB,
                    "static_cache_bytes": 1400 * MiB, "max_context_cache_bytes": 3072 * MiB,
                    "pool_allocations_in_timed_steps": 5, "pool_reserved_growth_in_timed_steps": 0,
                    "torch_new_segments_in_timed_steps": segments}}
    return Result(T.NAME, T.CLAIM, UNJUDGED, {"name": "NVIDIA H200"}, {"quick": False}, m,
                  table=T.table_rows(m)).as_dict()


def claims(r: dict) -> dict[str, dict]:
    return {c["key"]: c for c in derive(r, live=True)}


def test_decode_is_judged_against_the_faster_eager_form():
    c = claims(result(both=40, static=2))[T.DECODE_KEY]
    assert c["ratio"] == pytest.approx(20) and c["verdict"] == "supported"
    assert "PyTorch eager, static cache" in c["bound"] and "320 tokens/s" in c["bound"]
    # both levels 6400 tokens/s = 8 x 1000 / 1.25 ms per step: 0.40x the 0.5 ms memory bound
    assert "0.40× that bound" in c["measured"]
    assert claims(result(both=2.8, static=2))[T.DECODE_KEY]["verdict"] == "partly supported"  # 1.4x the static form
    assert claims(result(both=1.8, static=2))[T.DECODE_KEY]["verdict"] == "not supported"  # 0.9x
    assert claims(result(both=1.4, static=0.5))[T.DECODE_KEY]["verdict"] == "partly supported"  # dynamic is faster


def test_decode_against_the_compiled_peer():
    assert claims(result(both=40, compiled=22))[T.DECODE_COMPILED_KEY]["verdict"] == "supported"
    c = claims(result(both=20, compiled=22))[T.DECODE_COMPILED_KEY]
    assert c["verdict"] == "partly supported" and c["ratio"] == pytest.approx(20 / 22)
    c = claims(result(with_compiled=False))[T.DECODE_COMPILED_KEY]
    assert c["verdict"] == "skipped" and "did not run" in c["measured"]


def test_layerwise_and_the_allocator():
    assert claims(result(layer_graph=1.05))[T.LAYERWISE_KEY]["verdict"] == "supported"
    c = claims(result(layer_graph=0.84, layer_eager=0.49))[T.LAYERWISE_KEY]
    assert c["verdict"] == "not supported" and c["ratio"] == pytest.approx(0.84)
    assert claims(result(pool=1.3, malloc=1.0))[T.MALLOC_KEY]["verdict"] == "supported"
    c = claims(result(pool=0.93, malloc=0.91))[T.MALLOC_KEY]
    assert c["verdict"] == "not supported" and c["ratio"] == pytest.approx(0.93 / 0.91)


def test_kv_memory_and_steady_state():
    c = claims(result(cache_mib=800))[T.CACHE_MEMORY_KEY]
    assert c["verdict"] == "supported" and c["ratio"] == pytest.approx(800 / 1400)
    assert claims(result(cache_mib=1000))[T.CACHE_MEMORY_KEY]["verdict"] == "partly supported"
    assert claims(result())[T.NO_MALLOC_KEY]["verdict"] == "supported"
    assert claims(result(segments=1))[T.NO_MALLOC_KEY]["verdict"] == "not supported"


def test_bytes_per_step_by_hand():
    c = StackConfig(layers=2, width=256, heads=4, kv_heads=2, head_dim=64, ffn_width=512, vocab=1000)
    # weights but the embedding (1000 x 256 x 2 bytes) plus one row per sequence; K/V: 2 layers x
    # 2 x 2 heads x 64 x 2 bytes = 1024 bytes per token, of (10 + 4) + (20 + 4) tokens
    want = c.parameter_bytes - 1000 * 256 * 2 + 2 * 256 * 2 + (14 + 24) * 1024
    assert T.bytes_per_step(c, [10, 20], 4) == want


def test_table_and_figure(tmp_path: Path):
    r = result()
    rows = T.table_rows(r["metrics"])
    assert [x["form"] for x in rows][:3] == [T.EAGER, T.EAGER_STATIC, T.COMPILED]
    assert rows[0]["x eager"] == pytest.approx(0.5)  # the dynamic form against the faster static one
    figs = T.figures(r, tmp_path)
    assert all(p.exists() and p.stat().st_size > 10_000 for p in figs.values())
    assert "|" not in T.format_table(rows).splitlines()[0]
