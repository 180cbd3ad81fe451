python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r1; export OUT=/tmp/r1
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
timeout 150 python3 -m pytest -q -x tests/gpu/test_gemm_tuning.py > $OUT/tests-h200.log 2>&1; echo "tests rc $?"; tail -4 $OUT/tests-h200.log
timeout 330 python3 .dev/u7.py > $OUT/u7-h200.log 2>&1; echo "u7 rc $?"
M=sm__pipe_tensor_op_gmma_cycles_active
timeout 80 ncu --clock-control none --nvtx --nvtx-include "p300x6144x4096/" --nvtx-include "p300x4096x4096/" --nvtx-include "p300x28672x4096/" --nvtx-include "p300x4096x14336/" --metrics gpu__time_duration.sum,sm__cycles_active.avg,$M.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y --csv python3 .dev/p406_ncu.py > $OUT/p406-ncu.csv 2> $OUT/p406-ncu.err; echo "ncu rc $?"
grep -vE "^==PROF==" $OUT/p406-ncu.csv | python3 -c "
import csv,sys
rows=[l for l in sys.stdin if l.startswith('\"')]
for r in csv.DictReader(rows):
    print(r['Kernel Name'][:44], r['Metric Name'][:50], r['Metric Value'])
" > $OUT/p406-table.txt 2>&1
cat $OUT/p406-table.txt | head -60
tail -30 $OUT/u7-h200.log
tar -czf $OUT_SAVE/c1.tgz -C /tmp/r1 .
