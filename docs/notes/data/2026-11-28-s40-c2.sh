python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p272.py 2>&1 | tee $OUT/p272.log
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for m in 258 384; do
timeout 120 $ncu --clock-control none -k regex:"gemm_hopper" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct python3 .dev/p272.py --ncu $m > $OUT/p272-ncu-$m.txt 2>&1; echo "ncu $m rc=$?"
grep -E "Duration|hmma|dram__bytes|lts__t_sec|DRAM Throughput|L2 Hit|Stall|Warp Cycles Per Issued" $OUT/p272-ncu-$m.txt | cut -c1-140
done
