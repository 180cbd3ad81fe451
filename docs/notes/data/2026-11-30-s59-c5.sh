python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r5; export OUT=/tmp/r5
M=$(ncu --query-metrics 2>/dev/null | grep -oE "^\s*sm__pipe_tensor_op_gmma_cycles_active" | head -1 | tr -d ' ')
echo "metric $M"
ncu --clock-control none --nvtx --nvtx-include "p512x6144x4096/" --nvtx-include "p1024x6144x4096/" --nvtx-include "p640x4096x14336/" --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg,$M.avg.pct_of_peak_sustained_elapsed,$M.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum --csv python3 .dev/p403_ncu.py > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc $?"
grep -vE "^==PROF==|^[0-9]+ [0-9]+ " $OUT/ncu.csv | python3 -c "
import csv,sys
rows=list(csv.DictReader(sys.stdin))
for r in rows:
    print(r['Kernel Name'][:40], r['Grid Size'], r['Metric Name'][:60], r['Metric Value'])
" | tee $OUT/ncu-table.txt | head -60
tar -czf $OUT_SAVE/c5.tgz -C /tmp/r5 .
