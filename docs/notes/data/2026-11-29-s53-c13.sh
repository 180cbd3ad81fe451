#!/usr/bin/env bash
# Session 53, call 13: the torch-import failure: kernel cache warmed by another process first; which step (module
# loaded, MixKernel built, a run), and what is broken (f-strings, schema inference, the C++ schema parser).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 -c "from fullpipe.cuda.device import Device; from fullpipe.pipeline.workload import MixKernel; MixKernel(Device(0))" && echo "cache warmed"
for s in load kernel run; do
  echo "== STEP=$s"; STEP=$s timeout 60 python3 -m pytest -q -s -p no:cacheprovider .dev/gt/test_torch_after.py 2>&1 | grep -E "fstring|import torch|infer_schema:|parse_schema|passed|failed" | head -8
done
echo "== outside pytest (python -c)"; STEP=run python3 -c "
import sys; sys.path.insert(0, '.dev/gt'); import test_torch_after as t; t.test_a_fullpipe_work(); t.test_b_import_torch()" 2>&1 | grep -E "fstring|import torch|infer_schema:|parse_schema|Error" | head -6
