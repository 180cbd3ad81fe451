python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p247.py 2>&1 | tee $OUT/p247.log
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 200 $ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,launch__grid_size,launch__cluster_dim_x,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active python3 .dev/p247n.py > $OUT/p247n.csv 2> $OUT/p247n.err
echo "ncu rc=$?"
python3 .dev/ncusum.py $OUT/p247n.csv | tail -30; tail -3 $OUT/p247n.err
