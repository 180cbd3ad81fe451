#!/usr/bin/env bash
# Session 47, call 8: the branch with the memory read as both sizes' probes read it, and models carried to another
# staging taken from complete probes: torch pipeline GPU tests, p295 (nine models), p301 (ViT-B/16 every run).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 90 python3 -m pytest -q -x tests/gpu/test_pipeline_torch.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log
timeout 170 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"
timeout 40 python3 .dev/p301.py vit_b_16 > $OUT/p301.log 2>&1; echo "p301 rc $?"
grep -E "RESULT|Error" $OUT/p295.log | cut -c1-250
grep -E "round|RESULT|Error" $OUT/p301.log | cut -c1-200
