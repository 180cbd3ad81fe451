#!/usr/bin/env bash
# Session 49, call 7: p314 (fresh long-K products, seeds 314 and 315) for the rows-off-the-sectors rule.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for s in 314 315; do P314_SEED=$s timeout 200 python3 .dev/p314.py > $OUT/p314-$s.log 2>&1; echo "p314 seed $s rc $?"; tail -2 $OUT/p314-$s.log; done
