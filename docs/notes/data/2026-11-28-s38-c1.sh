python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# launches: per size 2 rounds x (cuBLAS + builds); profile the second round's
timeout 400 $ncu --clock-control none --cache-control none -k regex:"gemm_hopper|nvjet" --launch-skip 3 --launch-count 3 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --print-details all python3 .dev/p256.py > $OUT/p256a.txt 2> $OUT/p256a.err
echo "ncu a rc=$?"; tail -2 $OUT/p256a.err
timeout 300 $ncu --clock-control none --cache-control none -k regex:"gemm_hopper|nvjet" --launch-skip 8 --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --print-details all python3 .dev/p256.py > $OUT/p256b.txt 2> $OUT/p256b.err
echo "ncu b rc=$?"; tail -2 $OUT/p256b.err
grep -E "^  [a-z_0-9]+.*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L1: |L2: |SM: |Shared|Bank|Wavefronts|DRAM: |TMA|Tensor|GMMA" $OUT/p256a.txt $OUT/p256b.txt | cut -c1-160 | head -150
