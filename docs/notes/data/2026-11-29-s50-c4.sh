#!/usr/bin/env bash
# Session 50, call 4: p323 (held-out short-K products: the rule before and after), p321 (gemm()'s host time in
# pieces), p320 (the models' shapes again, under the new rule).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 260 python3 .dev/p323.py > $OUT/p323.log 2>&1; echo "p323 rc $?"
timeout 100 python3 .dev/p321.py > $OUT/p321.log 2>&1; echo "p321 rc $?"
P320_BUDGET_S=100 timeout 150 python3 .dev/p320.py > $OUT/p320.log 2>&1; echo "p320 rc $?"
tail -3 $OUT/p323.log; head -20 $OUT/p321.log; tail -4 $OUT/p320.log
