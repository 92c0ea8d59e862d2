#!/bin/bash
# Call 4 (#11): make smoke on the tiny default (no overlap scheduler), pinned and patched, twice each, and the
# live test, side by side on the one H200 (each server a 64K-token KV pool, decode graphs up to batch 8).
export OVERLAY_EMULATE_SM120=1 PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch,triton,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"triton",triton.__version__)'
  cat .devrun/commit; nproc; } > $OUT/env.txt 2>&1
for T in pinned patched; do python3 -m serving.serve_cmd --install-only --bundle build/bundle --tree $T >> $OUT/install.txt 2>&1; echo "install/gate $T rc=$?"; done
run() {  # name tree port [make vars...]
  local name=$1 tree=$2 port=$3; shift 3
  ( timeout -k 20 450 make smoke BUNDLE=build/bundle TREE=$tree PYTHON=python3 PORT=$port GRAPH_MAX_BS=8 \
      SMOKE_TIMEOUT=400 SMOKE_LOG=$OUT/smoke-$name-server.log "$@" > $OUT/smoke-$name.txt 2>&1
    echo "== smoke $name rc=$? at $(date -u +%T)" >> $OUT/smoke-$name.txt ) &
}
K="--max-total-tokens 65536"
run pinned pinned 30000 SGLANG_ARGS="$K"
run patched patched 30001 SGLANG_ARGS="$K"
run pinned-rep2 pinned 30002 SGLANG_ARGS="$K"
run patched-rep2 patched 30003 SGLANG_ARGS="$K"
( OVERLAY_BUNDLE=build/bundle OVERLAY_LIVE_OUT=$OUT OVERLAY_LIVE_START_TIMEOUT=400 timeout -k 20 520 \
    python3 -m pytest -q -rA -s -p no:cacheprovider tests/gpu/test_server_live.py > $OUT/live.txt 2>&1
  echo "== live rc=$? at $(date -u +%T)" >> $OUT/live.txt ) &
wait
for f in $OUT/smoke-*.txt; do tail -n 1 $f; grep -E '^smoke: (healthy|FAIL|ok|generate|chat|GET|TTFT|decode)' $f | cut -c1-150 | tail -7; done
for f in $OUT/*-server.log; do echo "$(basename $f): $(grep -c 'illegal instruction' $f) illegal-instruction lines, $(grep -c 'Decode batch' $f) decode lines"; done
tail -n 1 $OUT/live.txt; grep -E 'PASSED|FAILED|ERROR|first differing|passed|failed' $OUT/live.txt | cut -c1-300 | tail -8
cd $OUT && gzip -9 *-server.log && tar czf run.tgz env.txt install.txt smoke-*.txt live*.txt live-*.json *-server.log.gz 2>/dev/null; rm -f smoke-*.txt *-server.log.gz live-*.json; ls -l
