python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 .dev/p257.py 2>&1 | tee $OUT/p257.log
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 300 $ncu --clock-control none --cache-control none -k regex:"gemm_hopper" --launch-skip 2 --launch-count 2 \
  --section SpeedOfLight --section WarpStateStats --print-details all python3 .dev/p257n.py > $OUT/p257n.txt 2> $OUT/p257n.err
echo "ncu rc=$?"; tail -2 $OUT/p257n.err
grep -E "^  [a-z_0-9]+.*\(|Duration|SM Frequency|Pipe Tensor Cycles|Lts2xbar|Data Bank|Lsu Wavefronts|Xbar2l1tex Read Sectors  |Issue Active|Stall|stall" $OUT/p257n.txt | cut -c1-140 | head -60
