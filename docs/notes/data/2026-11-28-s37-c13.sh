python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 300 $ncu --clock-control none --cache-control none --launch-count 2 -k regex:"gemm_hopper|nvjet" --section SourceCounters --section WarpStateStats -o $OUT/p253 -f python3 .dev/p250n.py > $OUT/p253.err 2>&1
echo "ncu rc=$?"; tail -2 $OUT/p253.err
timeout 120 $ncu -i $OUT/p253.ncu-rep --page source --print-source sass --csv > $OUT/p253-sass.csv 2> $OUT/p253-sass.err
echo "export rc=$?"; ls -la $OUT; head -c 600 $OUT/p253-sass.csv
