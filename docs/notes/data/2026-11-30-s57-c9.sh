#!/usr/bin/env bash
# Session 57, call 9: the final rule: a user's Llama-3-8B projection stack through gemm() (p391), the layer shapes at
# 384-1024 rows against the rule before the session (p389)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 200 python3 .dev/p391_model.py 100,200,300,384,448,512,777,1000 > $OUT/p391.log 2>&1; echo "p391 rc $?"; tail -8 $OUT/p391.log
timeout 150 python3 .dev/p389.py layers 384,448,512,640,768,1024 > $OUT/p389-layers3.log 2>&1; echo "layers rc $?"; grep -hE "SUMMARY|WRONG" $OUT/p389-layers3.log | grep -v "(0)"
tar -czf $OUT_SAVE/c9.tgz -C /tmp/r .
