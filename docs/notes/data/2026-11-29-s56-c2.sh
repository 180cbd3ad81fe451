#!/usr/bin/env bash
# Session 56, call 2: which swap widths the device's NVRTC compiles (each in its own process), nvcc on a failing one
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 -c "from cuda.bindings import nvrtc; print('nvrtc', nvrtc.nvrtcVersion())"
for w in 80 96 112 128 144 160 176 192 208 224 240 256; do for v in "128 2" "128 1" "64 1"; do echo "$w $v"; done; done > /tmp/jobs
cat /tmp/jobs | xargs -P 12 -L 1 sh -c 'timeout 120 python3 .dev/p381_compile.py $0 $1 $2 > /tmp/c-$0-$1-$2.log 2>&1; echo "m=$0 tm=$1 cm=$2 rc=$?"' | sort -n -t= -k2 | tee $OUT/compile.log
grep -h "OK" /tmp/c-*.log | sort | tee -a $OUT/compile.log | head -5
# nvcc (offline ptxas) on the 144-wide build
inc=$(python3 -c "from fullpipe.cuda import compiler; print(' '.join('-I'+str(d) for d in compiler.include_dirs()))")
timeout 120 nvcc -arch=sm_90a -cubin -Xptxas -v -DTILE_N=144 -DSWAP_AB=1 -DB_K_MAJOR=1 -DSTAGES=5 -DCLUSTER_M=2 $inc -o /tmp/x.cubin src/fullpipe/kernels/gemm_hopper_persistent.cu > $OUT/nvcc144.log 2>&1; echo "nvcc 144 rc $?"; tail -5 $OUT/nvcc144.log
