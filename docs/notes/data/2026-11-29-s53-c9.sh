#!/usr/bin/env bash
# Session 53, call 9: which step before `import torch` breaks torch's schema parser (r1.py), one process each.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for s in none pathfinder nvrtc mix run; do timeout 60 python3 .dev/r1.py $s 2>&1 | grep -v Warning | tail -6; done
