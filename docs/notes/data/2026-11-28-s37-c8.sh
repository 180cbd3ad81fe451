python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 300 $ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum,sm__cycles_active.avg,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,launch__cluster_dim_x,launch__grid_size python3 .dev/p250n.py > $OUT/p250n.csv 2> $OUT/p250n.err
echo "ncu rc=$?"; tail -3 $OUT/p250n.err
python3 .dev/ncusum.py $OUT/p250n.csv
