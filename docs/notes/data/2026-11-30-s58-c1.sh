set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv; nproc; lscpu | grep "Model name"
python3 .dev/p393.py dict varlen varlen_small 2>&1 | tee $OUT/p393.log | grep -v Warning
