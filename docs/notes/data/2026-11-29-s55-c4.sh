#!/usr/bin/env bash
# Session 55, call 4: p372 (the variable-length list by way on this host); py-spy over p370's runs
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader; lscpu | grep "Model name"; nproc
timeout 200 python3 .dev/p372.py 2>&1 | grep -E "RESULT|Error|error" | tee $OUT/p372.log
sed -i 's/^    timed_loop()/    timed_loop()/' .dev/p370.py
timeout 150 /tmp/site/bin/py-spy record --threads --idle -r 1000 --nonblocking -f raw -o $OUT/spy.txt -- python3 .dev/p366.py 200 > $OUT/spy.log 2>&1; echo "spy rc $?"; grep RESULT $OUT/spy.log
python3 .dev/spyset.py $OUT/spy.txt 200 30 > $OUT/spyset.txt; head -45 $OUT/spyset.txt
