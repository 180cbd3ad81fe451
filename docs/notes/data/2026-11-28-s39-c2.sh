python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 200 $ncu --clock-control none --section LaunchStats --section SpeedOfLight python3 .dev/p265.py > $OUT/p265.txt 2> $OUT/p265.err; echo "ncu rc=$?"
grep -E "^  [a-zA-Z_0-9]+.*\(.*\)x\(|Duration|Cluster Size|Grid Size|Registers Per|Dynamic Shared" $OUT/p265.txt | grep -v "vectorized\|elementwise\|fill" | cut -c1-150
timeout 420 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
