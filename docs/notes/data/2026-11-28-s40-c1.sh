python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
timeout 200 python3 .dev/p271.py 2>&1 | tee $OUT/p271.log
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 300 $ncu --clock-control none -k regex:"gemm_hopper|nvjet" --launch-skip 4 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section SchedulerStats --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct python3 .dev/p271.py --ncu > $OUT/p271-ncu.txt 2> $OUT/p271-ncu.err; echo "ncu rc=$?"
grep -E "^  [a-zA-Z_0-9]+.*\(.*\)x\(|Duration|Grid Size|Cluster Size|gmma|hmma|dram__bytes|lts__t_sec|Memory Throughput|DRAM Throughput|Compute \(SM\)|L2 Hit|Stall|Warp Cycles Per Issued" $OUT/p271-ncu.txt | cut -c1-140
