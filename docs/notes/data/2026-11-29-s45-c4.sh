#!/usr/bin/env bash
# Session 45, call 4: chunk='auto''s first choice keeps the largest probe size (within 5 %) where new shapes
# are costly: pipeline GPU tests, p296 (first runs, fresh processes: auto and the naive loop), p295 (steady).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py tests/gpu/test_threads.py -rf > $OUT/tests.log 2>&1; echo "pipeline tests rc $?"; tail -2 $OUT/tests.log
P296_WAYS=auto,naive timeout 200 python3 .dev/p296.py > $OUT/p296.log 2>&1; echo "p296 rc $?"; grep -E "RESULT|failed|Error" $OUT/p296.log | cut -c1-300
timeout 170 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"; grep -E "RESULT|Error|error" $OUT/p295.log | cut -c1-280
