#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 240 python3 docs/notes/data/2026-11-28-s32-p224.py 2>&1 | tee $OUT/p224.log
timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout 120 tests/gpu -k "imap or loader or DataLoader" > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
