#!/usr/bin/env bash
# P1 and P3 at DeepSeek-V4.1-Flash's rows (bench/kernels/v41_rows.py), on the GPU machine, in one run from the repository root:
#
#   bash bench/airgapped/v41_rows.sh RESULTS_DIR
#
# It needs, beside the checkout (bench/notes/gpu_runs.md, "P1 and P3 at V4.1-Flash's rows"):
#   build/carry-triton-3.8.0   make carry-triton CARRY_ARCHS=90      (triton 3.8.0, SGLang 0.5.23's; sm_90's ptxas alone)
#   build/carry-peer-0.7.2     make carry-peers CARRY_PEERS=0.7.2     (FlashInfer 0.7.2's sm_120 attention for sm_90a)
#   build/carry-slice-0.5.23   make carry-slice LINE=0.5.23           (the files of both 0.5.23 trees the benches read)
# Writes into RESULTS_DIR: commands.txt (every command, as run), machine.txt, p1.txt + p1/ (bench.kernels.triton_lines:
# ours under the machine's Triton and under 3.8 beside FlashInfer, each run's log and JSON), mhc-*.txt
# (bench.kernels.bench_mhc_pre per Triton and model shape); prints the tables last.
# V41_HEADS (default 8,16: TP 8 and 4), MHC_SHAPES (default 4096x4: hidden x hc_mult, DeepSeek-V4-Flash's; add
# V4.1-Flash's from its config.json), P1_BUDGET (seconds for the P1 runs, default 285).
set -u
RESULTS=${1:-}
if [ -z "$RESULTS" ] || [ $# -ne 1 ]; then
    echo "usage: bash bench/airgapped/v41_rows.sh RESULTS_DIR (expected one output folder, found $# arguments)" >&2; exit 2
fi
for need in build/carry-triton-3.8.0/manifest.json build/carry-peer-0.7.2/manifest.json \
            build/carry-slice-0.5.23/manifest.json; do
    if [ ! -f "$need" ]; then
        echo "v41_rows: expected $need (see the head of bench/airgapped/v41_rows.sh), found no such file" >&2; exit 2
    fi
done
HEADS=${V41_HEADS:-8,16}
SHAPES=${MHC_SHAPES:-4096x4}
BUDGET=${P1_BUDGET:-285}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/v41-rows.XXXXXX")     # installed payloads: not results, not in RESULTS
T38=$WORK/triton-3.8.0
PEER=$WORK/peer-0.7.2
SLICE=$WORK/slice-0.5.23
export PYTHONUNBUFFERED=1
: > "$RESULTS/commands.txt"

step() {   # step NAME TIMEOUT_S LOG COMMAND...: record the command, run it bounded, say how it ended
    local name=$1 limit=$2 log=$3; shift 3
    { printf '%q ' "$@"; echo; } >> "$RESULTS/commands.txt"     # quoted: a line pastes back as it ran
    local start=$SECONDS
    timeout -k 15 "$limit" "$@" > "$log" 2>&1
    local rc=$?
    echo "[v41_rows] $name: rc=$rc in $((SECONDS - start)) s ($log)"
    return $rc
}

S=$SECONDS
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null || true
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
} > "$RESULTS/machine.txt" 2>&1
cat "$RESULTS/machine.txt"
step install-slice 30 "$RESULTS/install-slice.txt" python3 -m bench.airgapped.carry install build/carry-slice-0.5.23 --into "$SLICE" || exit 1
step install-triton 120 "$RESULTS/install-triton.txt" python3 -m bench.airgapped.carry install build/carry-triton-3.8.0 --into "$T38" || exit 1
step install-peer 60 "$RESULTS/install-peer.txt" python3 -m bench.airgapped.carry install build/carry-peer-0.7.2 --into "$PEER" || exit 1

# P1: ours under the machine's Triton (the baseline, alone), then under 3.8 beside FlashInfer 0.7.2 (its decode
# kernel up to 64 rows, its prefill path above, as 0.5.23's flash_mla_with_kvcache_sm120 routes them); same inputs.
step p1 $((BUDGET + 30)) "$RESULTS/p1.txt" python3 -m bench.kernels.triton_lines --line 0.5.23 --triton "$T38" --peer "$PEER" --out "$RESULTS/p1" \
    --rows v41 --heads "$HEADS" --extra-topks 512,1024 --tree "$SLICE/patched" --box-without-peer --budget "$BUDGET"

# P3: the fused MHC-pre against hc_pre_torch_impl (fp32) at the reached call's shape, eager and CUDA graph, per Triton.
for shape in ${SHAPES//,/ }; do
    hidden=${shape%x*}; hc=${shape#*x}
    for tri in box 3.8.0; do
        pp=${PYTHONPATH:-}; [ "$tri" = box ] || pp=$T38${PYTHONPATH:+:$PYTHONPATH}
        step "mhc $shape triton-$tri" 75 "$RESULTS/mhc-${shape}-triton-$tri.txt" env PYTHONPATH="$pp" python3 -m bench.kernels.bench_mhc_pre \
            --rows v41 --hidden "$hidden" --hc-mult "$hc" --compile-tokens '' --iters 50 --repeats 3 \
            --pristine-root "$SLICE/pristine" --patched-root "$SLICE/patched"
    done
done
rm -rf "$WORK"
echo "[v41_rows] wall $((SECONDS - S)) s"

# The tables last: P1 merged (ours per Triton, FlashInfer per SM plan, errors vs float64), its rule and routing lines;
# then P3 per Triton and shape.
grep -E '^(\[lines\]|[a-z0-9._-]+: [0-9]+ rows)|failed|Error' "$RESULTS/p1.txt" | cut -c1-200 | head -12
python3 -m bench.kernels.triton_lines --report "$RESULTS/p1" 2>&1 | grep -E '^(\||rule|  misses|run to run|routing)'
for f in "$RESULTS"/mhc-*.txt; do echo "== $(basename "$f")"; grep -E '^(date|x \[|\|)' "$f"; done
