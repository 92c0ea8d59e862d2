#!/bin/bash
# Call 1 (#11): install the bundle, then make smoke (pinned, patched) and tests/gpu/test_server_live.py at once
# on the one H200 (each server with a 64K-token KV pool so they share the GPU), CUDA graphs on.
export OVERLAY_EMULATE_SM120=1 PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch,triton,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"triton",triton.__version__)'
  git log --oneline -1 2>/dev/null || cat .devrun/commit; nproc; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
for T in pinned patched; do (time python3 -m serving.serve_cmd --install-only --bundle build/bundle --tree $T) >> $OUT/install.txt 2>&1; echo "install/gate $T rc=$?"; done
grep -E '^(doctor|serve_cmd|bundle|real|error)' $OUT/install.txt | cut -c1-200
port=30000
for T in pinned patched; do
  ( timeout -k 30 480 make smoke BUNDLE=build/bundle TREE=$T PYTHON=python3 PORT=$port GRAPH_MAX_BS=8 \
      SGLANG_ARGS="--max-total-tokens 65536" SMOKE_TIMEOUT=420 SMOKE_LOG=$OUT/smoke-$T-server.log > $OUT/smoke-$T.txt 2>&1
    echo "== smoke $T rc=$? at $(date -u +%T)" >> $OUT/smoke-$T.txt ) &
  port=$((port+1))
done
( OVERLAY_BUNDLE=build/bundle OVERLAY_LIVE_OUT=$OUT OVERLAY_LIVE_START_TIMEOUT=330 timeout -k 30 530 \
    python3 -m pytest -q -rA -s -p no:cacheprovider tests/gpu/test_server_live.py > $OUT/live.txt 2>&1
  echo "== live rc=$? at $(date -u +%T)" >> $OUT/live.txt ) &
wait
for T in pinned patched; do tail -n 1 $OUT/smoke-$T.txt; grep -E '^(smoke|doctor): ' $OUT/smoke-$T.txt | cut -c1-200 | tail -14; done
tail -n 1 $OUT/live.txt; grep -E 'PASSED|FAILED|ERROR|first differing|passed|failed' $OUT/live.txt | cut -c1-300 | tail -8
grep -h 'overlay-boxhooks' $OUT/*-server.log | sed 's/ (pid [0-9]*)//' | sort | uniq -c | cut -c1-160 | head -12
n=$(ls build/bundle-site/jit-cache | wc -l); echo "jit modules: $n"; [ "$n" -gt 22 ] && tar czf $OUT/jit-cache.tgz -C build/bundle-site jit-cache
cd $OUT && gzip -9 *-server.log && tar czf run.tgz env.txt install.txt smoke-*.txt live*.txt live-*.json *-server.log.gz 2>/dev/null; ls -l $OUT | head -30
