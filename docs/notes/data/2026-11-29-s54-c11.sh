#!/usr/bin/env bash
# Session 54, call 11: p369 (workload A's MLP call: one stream against three, own tensors against views)
export PYTHONUNBUFFERED=1
timeout 120 python3 .dev/p369.py 2>&1 | grep RESULT
