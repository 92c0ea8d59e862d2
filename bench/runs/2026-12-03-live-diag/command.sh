#!/bin/bash
# Issue 27 diagnosis: which kernel raises "illegal instruction" (CUDA_LAUNCH_BLOCKING=1, eager), and whether the
# scaled dummy weights or the prebuilt JIT modules are the cause (SGLang's own dummy weights beside them).
export OVERLAY_EMULATE_SM120=1 PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch,triton,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"triton",triton.__version__)'
  git log --oneline -1 2>/dev/null; nvcc --version | tail -2; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
( PATCHKIT_CACHE=$PWD/build/bundle timeout -k 10 200 python3 -m pytest -q -rA tests/gpu/test_mma_decode_gpu.py -k every_triton_config > $OUT/configs-gpu.txt 2>&1; echo "== rc=$?" >> $OUT/configs-gpu.txt ) &
for T in pinned patched; do python3 -m serving.serve_cmd --install-only --bundle build/bundle --tree $T >> $OUT/install.txt 2>&1; echo "install/gate $T rc=$?"; done
export CUDA_LAUNCH_BLOCKING=1
for W in scaled sglang; do   # one after the other: two drivers side by side could pick the same free ports
  timeout -k 20 240 python3 -m bench.live_compare --bundle build/bundle --out $OUT/$W-weights --variants pinned,mma --eager \
      --dummy-init $W --batch 1 --output-len 32 --start-timeout 180 > $OUT/$W-weights.txt 2>&1; echo "== rc=$?" >> $OUT/$W-weights.txt
done
wait
tail -4 $OUT/configs-gpu.txt
for W in sglang scaled; do echo "##### $W weights"; tail -1 $OUT/$W-weights.txt
  grep -E 'healthy|FAIL|dummy weights|dispatcher entered|^\||servers that failed' $OUT/$W-weights.txt | cut -c1-200 | tail -14
  for f in $OUT/$W-weights/*-server.log; do echo "--- $(basename $f): $(grep -c 'illegal instruction' $f) illegal-instruction lines"
    grep -B30 -m1 -E 'illegal instruction' $f | grep -E 'File "|Error|error' | cut -c1-200 | tail -12; done; done
gzip -9 $OUT/*/*-server.log
