#!/bin/bash
cd /tmp/loop45
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
pass=0; fail=0
for i in $(seq 1 20); do
  if /work/main/.venv/bin/python -m pytest -q -p no:cacheprovider tests/serving/test_shadow_decode.py tests/serving/test_serve_smoke.py tests/bench/test_decode_share.py > /tmp/loop45-$i.log 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); fi
  echo "run $i: $(tail -1 /tmp/loop45-$i.log) load $(cut -d' ' -f1 /proc/loadavg)"
done
echo "passes $pass fails $fail end $(date -u +%FT%TZ)"
