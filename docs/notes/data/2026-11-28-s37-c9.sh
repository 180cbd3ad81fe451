python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 300 $ncu --clock-control none --cache-control none --launch-skip 0 --launch-count 4 -k regex:"gemm_hopper|nvjet" --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --print-details all python3 .dev/p250n.py > $OUT/p250-sections.txt 2> $OUT/p250-sections.err
echo "ncu rc=$?"; tail -3 $OUT/p250-sections.err
grep -E "gemm_hopper|nvjet|Stall|stall|Warp Cycles|Issued|Eligible|Active Warps|L2 Hit|Mem Busy|Max Bandwidth|smsp__pcsamp" $OUT/p250-sections.txt | head -120
