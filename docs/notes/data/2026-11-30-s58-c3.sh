python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 .dev/p395.py rowmajor dict varlen varlen_small 2>&1 | grep -v Warning | tee $OUT/p395.log
