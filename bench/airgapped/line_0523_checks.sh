#!/usr/bin/env bash
# The 0.5.23 line's GPU checks on the GPU machine, in one run from the repository root:
#
#   bash bench/airgapped/line_0523_checks.sh RESULTS_DIR
#
# 1. P1's GPU tests (tests/line_0_5_23/gpu: the line's own flash_mla_with_kvcache_sm120 with `mma` against its
#    per-head kernel and float64, the CUDA-graph capture, the two pull requests' kernels, one per file), under the
#    machine's Triton and under the line's triton 3.8;
# 2. field-check's kernel rows of the line out of the tree slice (tests/line_0_5_23/gpu/field_check_slice.py),
#    under triton 3.8;
# 3. the V4.1-Flash candidate layers' GPU timing (bench/kernels/v41_candidate_gpu.py).
#
# It needs, beside the checkout (docs/gpu_box.md, "What to copy"):
#   build/p1-slice-0.5.23      make apply LINE=0.5.23 && python -m tests.line_0_5_23.p1_tree slice build/site-0.5.23 build/p1-slice-0.5.23
#   build/carry-slice-0.5.23   make carry-slice LINE=0.5.23
#   build/carry-triton-3.8.0   make carry-triton CARRY_ARCHS=90     (triton 3.8.0, SGLang 0.5.23's; sm_90's ptxas alone)
#   TVM_FFI_WHEEL              the apache-tvm-ffi cp312 wheel the release's register_custom_op imports (a path)
# Writes into RESULTS_DIR: commands.txt (every command, as run), machine.txt, one log per step; prints the
# summaries last. FIELD_BUDGET (seconds of field-check's kernel rows, default 100), V41_BUDGET (seconds of the
# candidate layers' shapes, default 150).
set -u
RESULTS=${1:-}
if [ -z "$RESULTS" ] || [ $# -ne 1 ]; then
    echo "usage: bash bench/airgapped/line_0523_checks.sh RESULTS_DIR (expected one output folder, found $# arguments)" >&2; exit 2
fi
for need in build/p1-slice-0.5.23/SLICE.sha256 build/carry-slice-0.5.23/manifest.json \
            build/carry-triton-3.8.0/manifest.json "${TVM_FFI_WHEEL:-TVM_FFI_WHEEL unset}"; do
    if [ ! -f "$need" ]; then
        echo "line_0523_checks: expected $need (see the head of bench/airgapped/line_0523_checks.sh), found no such file" >&2; exit 2
    fi
done
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/line-0523.XXXXXX")     # installed payloads: not results, not in RESULTS
T38=$WORK/triton-3.8.0
SLICE=$WORK/slice-0.5.23
SITE=$WORK/site
export PYTHONUNBUFFERED=1
: > "$RESULTS/commands.txt"

step() {   # step NAME TIMEOUT_S LOG COMMAND...: record the command, run it bounded, say how it ended
    local name=$1 limit=$2 log=$3; shift 3
    { printf '%q ' "$@"; echo; } >> "$RESULTS/commands.txt"     # quoted: a line pastes back as it ran
    local start=$SECONDS
    timeout -k 15 "$limit" "$@" > "$log" 2>&1
    local rc=$?
    echo "[line_0523_checks] $name: rc=$rc in $((SECONDS - start)) s ($log)"
    return $rc
}

S=$SECONDS
{ nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader; git log --oneline -1 2>/dev/null || true
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} > "$RESULTS/machine.txt" 2>&1
cat "$RESULTS/machine.txt"
step install-tvm-ffi 60 "$RESULTS/install-tvm-ffi.txt" python3 -m pip install -q --no-index --no-deps --target "$SITE" "$TVM_FFI_WHEEL" || exit 1
step install-slice 30 "$RESULTS/install-slice.txt" python3 -m bench.airgapped.carry install build/carry-slice-0.5.23 --into "$SLICE" || exit 1
step install-triton 120 "$RESULTS/install-triton.txt" python3 -m bench.airgapped.carry install build/carry-triton-3.8.0 --into "$T38" || exit 1
BASE=$SITE${PYTHONPATH:+:$PYTHONPATH}

step "p1 tests, machine's triton" 170 "$RESULTS/p1-gpu-tests-triton-box.txt" env PYTHONPATH="$BASE" \
    P1_TREE=build/p1-slice-0.5.23 python3 -m pytest -q -rA -p no:cacheprovider tests/line_0_5_23/gpu
step "p1 tests, triton 3.8" 170 "$RESULTS/p1-gpu-tests-triton-3.8.0.txt" env PYTHONPATH="$T38:$BASE" \
    P1_TREE=build/p1-slice-0.5.23 python3 -m pytest -q -rA -p no:cacheprovider tests/line_0_5_23/gpu
step "field-check kernel rows, triton 3.8" 200 "$RESULTS/field-check-0.5.23.txt" env PYTHONPATH="$T38:$BASE" \
    python3 -m tests.line_0_5_23.gpu.field_check_slice build/p1-slice-0.5.23 "$RESULTS/field-check-0.5.23" "${FIELD_BUDGET:-100}"
step "v41 candidate layers" $((${V41_BUDGET:-150} + 60)) "$RESULTS/v41-candidate-gpu.txt" env PYTHONPATH="$BASE" \
    python3 -m bench.kernels.v41_candidate_gpu "$RESULTS/v41-candidate" --slice build/carry-slice-0.5.23 --budget "${V41_BUDGET:-150}"
rm -rf "$WORK"
echo "[line_0523_checks] wall $((SECONDS - S)) s"

for f in "$RESULTS"/p1-gpu-tests-*.txt "$RESULTS"/field-check-0.5.23.txt; do
    echo "== $(basename "$f")"; grep -E '^(FAILED|ERROR)|passed|failed|skipped' "$f" | tail -8
done
echo "== v41-candidate-gpu.txt"; grep -E '^\|' "$RESULTS/v41-candidate-gpu.txt" | head -30
