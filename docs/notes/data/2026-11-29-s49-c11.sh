#!/usr/bin/env bash
# Session 49, call 11: p318 (products of shorter K, 1024-6072, whose 128 x 256 tiles fill at most half the clusters;
# seed 318 to read, seed 319 held out until a rule is fitted on 318).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for s in 318 319; do P314_SEED=$s timeout 120 python3 .dev/p318.py > $OUT/p318-$s.log 2>&1; echo "p318 seed $s rc $?"; tail -2 $OUT/p318-$s.log; done
