set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
python3 .dev/nvrtc_maps.py ours 2>&1 | tee $OUT/maps-ours.log
python3 .dev/nvrtc_maps.py theirs 2>&1 | tee $OUT/maps-theirs.log
ls -la /usr/local/cuda/lib64/libnvrtc* 2>&1 | head; python3 -c "import nvidia, os; print(nvidia.__path__)" 2>&1
find / -name 'libnvrtc*' -not -path '*/proc/*' 2>/dev/null | head -20
timeout 200 python3 .dev/p350.py 2>&1 | tee $OUT/p350.log
