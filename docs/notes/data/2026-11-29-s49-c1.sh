#!/usr/bin/env bash
# Session 49, call 1: the torch pipeline GPU tests (0aebc93's tidy); the GEMM GPU tests with the 1 x 2 build;
# memcheck and synccheck of the 1 x 2 build's selftest; p308 (1 x 2 beside the rule's plans on 80 products).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_pipeline_torch.py > $OUT/tests-torch.log 2>&1; echo "torch tests rc $?"; tail -1 $OUT/tests-torch.log
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py -rf > $OUT/tests-gemm.log 2>&1; echo "gemm tests rc $?"; tail -3 $OUT/tests-gemm.log
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in memcheck synccheck; do extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
for bt in "" "--b-transposed"; do
timeout 60 $cs --tool $t $extra --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --build 1x2-g8 $bt > $OUT/$t$bt.log 2>&1; echo "$t $bt rc=$? ok=$(grep -c '^ok' $OUT/$t$bt.log) bad=$(grep -c '^BAD' $OUT/$t$bt.log) $(grep -E 'ERROR SUMMARY' $OUT/$t$bt.log | tail -1)"; done; done
timeout 240 python3 .dev/p308.py > $OUT/p308.log 2>&1; echo "p308 rc $?"; tail -4 $OUT/p308.log
