"""The recorded results the report tests render and judge: tests/data/report/results.json
(a full `fullpipe report` on an H200) with the results of experiments recorded after it
appended (each file's ``provenance`` says where its numbers come from)."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
# Later runs of experiments that results.json does not hold, in the order they are added.
LATER = ("results-2026-11-23.json", "results-2026-11-26-workloads.json", "results-2026-11-24-attention.json",
         "results-2026-11-26-multi-gpu.json", "results-2026-11-23-two-level.json",
         "results-2026-11-23-two-level-decode.json", "results-2026-11-30-gemm-prefill.json")
# Experiments registered before their first recorded run (their rules and figure are tested
# on hand-made results in tests/test_<name>_experiment.py). The tests that need every
# experiment's recorded numbers leave these out; when a run's results file joins LATER, the
# name goes from here (tests/report/test_claims.py fails while a name is in both).
AWAITING_RECORD: tuple[str, ...] = ()


def load_doc() -> dict:
    """results.json's document, its results followed by those of the LATER files."""
    doc = json.loads((DATA / "results.json").read_text())
    for name in LATER:
        more = json.loads((DATA / name).read_text())["results"]
        doc["results"] += more
        doc["experiments"] += [r["experiment"] for r in more]
    return doc
