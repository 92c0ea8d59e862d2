#!/bin/bash
# P1 and P3 under triton 3.9 (carried) beside the GPU machine's own Triton, FP fusion on and off, on an
# air-gapped GPU machine. Run from the repository root; writes its raw output into RESULTS_DIR:
#
#     bash bench/airgapped/run_triton39.sh RESULTS_DIR
#
# Needs, beside the checkout (bench/notes/gpu_runs.md, "P1 and P3 under triton 3.9"):
#   build/carry-triton-3.9.0     make carry-triton CARRY_TRITON=3.9.0
#   build/release-slice-0.5.14   python3 -m bench.airgapped.release_slice --line 0.5.14 (the release's register_custom_op)
# Bounded to about 460 s (the timeouts below), Triton's first compiles included.
set -u
PAYLOAD=build/carry-triton-3.9.0
SLICE=build/release-slice-0.5.14
if [ $# -ne 1 ]; then
  echo "usage: bash bench/airgapped/run_triton39.sh RESULTS_DIR (expected one argument, found $#)" >&2; exit 2
fi
for need in "$PAYLOAD/manifest.json" "$SLICE/sglang/srt/utils/custom_op.py"; do
  [ -f "$need" ] || { echo "expected $need (bench/notes/gpu_runs.md, \"P1 and P3 under triton 3.9\"), found no such file" >&2; exit 2; }
done
RESULTS=$1
T39=${TMPDIR:-/tmp}/carry-triton-3.9.0
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1
START=$SECONDS

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  git log --oneline -1 2>/dev/null || true
  python3 -c "import platform, torch, triton; print('python', platform.python_version(), '| torch', torch.__version__, '| triton (the machine\'s)', triton.__version__)"
} > "$RESULTS/env.txt" 2>&1

python3 -m bench.airgapped.carry install "$PAYLOAD" --into "$T39" >> "$RESULTS/env.txt" 2>&1 || { cat "$RESULTS/env.txt"; exit 1; }
# The carried release imports first, and compiles for sm_90 with the ptxas its own get_ptxas picks.
PYTHONPATH="$T39" python3 -c "
import triton
from triton.backends.nvidia.compiler import get_ptxas
tool = get_ptxas(90)
print('carried triton', triton.__version__, triton.__file__)
print('ptxas for sm_90:', tool.path, '|', tool.version)
" >> "$RESULTS/env.txt" 2>&1
echo "installed in $((SECONDS - START)) s" >> "$RESULTS/env.txt"
# One small kernel compiled and run under 3.9 first. Its ptxas may be newer than this machine's driver accepts;
# then the runs below use the machine's own ptxas (TRITON_PTXAS_BLACKWELL_PATH, Triton's own switch) and say so.
cat > "$T39/smoke_kernel.py" <<'PY'
import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=o < n) + 1.0, mask=o < n)


x = torch.arange(1000, device="cuda", dtype=torch.float32)
y = torch.empty_like(x)
_add_one[(8,)](x, y, 1000, BLOCK=128, enable_fp_fusion=True)
torch.cuda.synchronize()
assert torch.equal(y, x + 1), "wrong result"
print("triton", triton.__version__, ": a kernel compiled and ran")
PY
if ! PYTHONPATH="$T39" python3 "$T39/smoke_kernel.py" >> "$RESULTS/env.txt" 2>&1; then
  export TRITON_PTXAS_BLACKWELL_PATH=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
  echo "the carried ptxas failed (above); the runs use the machine's: $TRITON_PTXAS_BLACKWELL_PATH" >> "$RESULTS/env.txt"
  PYTHONPATH="$T39" python3 "$T39/smoke_kernel.py" >> "$RESULTS/env.txt" 2>&1
fi
cat "$RESULTS/env.txt" | cut -c1-300 | tail -40

# P1: bench_mma_decode under the machine's Triton, then under 3.9, same seeded inputs, each also with the other
# FP fusion setting (window 128 + extra 512 at 8/16/32/64 heads x batch 1-128, top-k 2048 at 8 and 64 heads).
timeout -k 15 230 python3 -m bench.kernels.triton_lines --line 0.5.14 --triton "$T39" --fp-fusion both --release-tree "$SLICE" \
    --out "$RESULTS/p1" --budget 210 > "$RESULTS/p1.txt" 2>&1
echo "p1 rc=$? at $((SECONDS - START)) s"

# P3: the fused MHC-pre kernel's two routes, FP fusion on and off, under each Triton.
for T in machine 3.9; do
  PP=$([ "$T" = 3.9 ] && echo "$T39")
  PYTHONPATH=$PP timeout -k 10 80 python3 -m bench.kernels.bench_mhc_pre --line 0.5.14 --kernel-only --fp-fusion both \
      --release-tree "$SLICE" --tokens 1,4,16,64,256,1024,4096 > "$RESULTS/mhc-$T.txt" 2>&1
  echo "mhc ($T) rc=$? at $((SECONDS - START)) s"
done

# Triton 3.9 warns at a compile whose FP fusion is left to its default: none of the kernels above should.
echo "TRITON_DEFAULT_FP_FUSION warnings under 3.9: $(cat "$RESULTS"/p1/triton-3.9*/*.txt "$RESULTS/mhc-3.9.txt" 2>/dev/null | grep -c TRITON_DEFAULT_FP_FUSION)"
grep -E '^\[lines\]|Error|Traceback|^[a-z0-9._-]+: [0-9]+ rows' "$RESULTS/p1.txt" | cut -c1-220 | head -12
grep -E '^(\||FP fusion|rule)' "$RESULTS/p1.txt"
for T in machine 3.9; do grep -E '^(\||date|FP fusion|Traceback|[A-Za-z]*Error)' "$RESULTS/mhc-$T.txt"; done
tar cJf "$RESULTS/p1.tar.xz" -C "$RESULTS" p1 && rm -rf "$RESULTS/p1"
echo "wall $((SECONDS - START)) s"
