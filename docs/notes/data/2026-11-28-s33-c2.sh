#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m pytest -q -p no:cacheprovider --timeout 90 tests/gpu/test_pipeline_torch.py -k "long_list or short_list or encoder_layer" > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "passed|failed|Error|assert" $OUT/tests.log | tail -8
timeout 230 python3 .dev/p226.py 2>&1 | tee $OUT/p226.log | grep -v "^  [a-z]" | tail -40
timeout 60 /tmp/site/bin/py-spy record -r 200 --nonblocking -f raw -o $OUT/spy.txt -- python3 .dev/p227.py 10 > $OUT/spy.log 2>&1; echo "spy rc $?"; cat $OUT/spy.log | tail -2
python3 docs/notes/data/2026-11-28-s32-spyagg.py (its marker s32-p222 changed to p227) $OUT/spy.txt 25 > $OUT/agg.txt; gzip $OUT/spy.txt; head -60 $OUT/agg.txt
