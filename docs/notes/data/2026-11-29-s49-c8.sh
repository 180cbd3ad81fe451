#!/usr/bin/env bash
# Session 49, call 8: p316 (fresh long-K products, seeds 316 and 317) for the rule with the 128 x 128 floor.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for s in 316 317; do P314_SEED=$s timeout 200 python3 .dev/p316.py > $OUT/p316-$s.log 2>&1; echo "p316 seed $s rc $?"; tail -2 $OUT/p316-$s.log; done
