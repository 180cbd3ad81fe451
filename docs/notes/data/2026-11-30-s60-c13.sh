python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r13; export OUT=/tmp/r13
timeout 250 python3 -m pytest -q tests/gpu/test_report.py > $OUT/tests-report-h200.log 2>&1; echo "report tests rc $?"; tail -3 $OUT/tests-report-h200.log
ps aux | grep -c "[s]pec_from_file_location"
tar -czf $OUT_SAVE/c13.tgz -C /tmp/r13 .
