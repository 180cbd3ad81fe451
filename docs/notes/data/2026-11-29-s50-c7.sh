#!/usr/bin/env bash
# Session 50, call 7: p326 (held-out products of 129-256 rows and long K: the one-cluster-row rule before and after);
# the transposed-B GPU tests (activations with leading dimensions among them).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p326.py > $OUT/p326.log 2>&1; echo "p326 rc $?"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm_transposed_b.py -rf > $OUT/tests-transposed.log 2>&1; echo "transposed tests rc $?"; tail -3 $OUT/tests-transposed.log
tail -3 $OUT/p326.log
