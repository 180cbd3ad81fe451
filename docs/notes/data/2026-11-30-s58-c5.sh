python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
git log --oneline | head -1 > $OUT/head.txt
python3 .dev/p396.py seed:411:40 2>&1 | grep -v Warning | tee $OUT/p396-411.log | tail -6
python3 .dev/p398_model.py 100,200,300,384,512,768,1000 2>&1 | grep -v Warning | tee $OUT/p398.log
for tool in memcheck synccheck racecheck; do
  compute-sanitizer --tool $tool python3 .dev/p397_san.py > $OUT/san-$tool.log 2>&1; echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race" $OUT/san-$tool.log | sort | uniq -c | head -5
done
cat $OUT/san-memcheck.log | grep -E "^[0-9]" 
tar -czf $OUT_SAVE/c5.tgz -C /tmp/r .
