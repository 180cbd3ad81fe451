#!/usr/bin/env bash
# Session 53, call 11: the GIL test made robust (4 MiB pageable copies, a 2 ms interval for the hand-overs), 3 times;
# then test_pipeline.py whole.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for i in 1 2 3 4 5; do echo "gil test: $(timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_pipeline.py -k keep_the_gil 2>&1 | tail -1)"; done
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py > $OUT/tests.log 2>&1; echo "test_pipeline rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log
