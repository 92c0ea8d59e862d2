#!/usr/bin/env bash
# CI's wall time, step by step, before and after, under the same conditions (issue 52 item 4).
#
#   bash measure.sh REPO DEST REV [REV...]     e.g. bash measure.sh ../../.. /tmp/ci-time cb969dc wip-ci cb969dc wip-ci
#
# REPO: a checkout to clone from (any path; the script names nothing absolute). DEST: where the results go.
# For each REV, one after another: a fresh `git clone` of REPO in a temporary directory, checked out at REV, then
# the steps of that REV's .ci/run one by one (its lines from the disk check on, comments dropped), each timed; the
# 1-minute load average sampled every 15 s. pip's cache is the user's own (or PIP_CACHE_DIR): warm it first with
# WARM=1, which builds every venv .ci/run builds once per REV in a throwaway clone, untimed, so that no timed run
# downloads a wheel. patchkit's cache (~/.cache/patchkit, or PATCHKIT_CACHE) is outside the clone too; WARM=1
# fills it as well (make check reads the pinned wheels). Give the REVs alternately (A B A B) to see the spread.
#
# Results in DEST: steps.tsv (rev, commit, step, exit code, seconds), log-N-REV.txt (all a run printed),
# load-N-REV.txt, machine.txt. A step that fails is recorded and the run goes on to the next step. DRY=1: clone,
# check the steps and time nothing but the clones (to try the script).
set -u
if [ $# -lt 3 ]; then echo "usage: bash measure.sh REPO DEST REV [REV...]" >&2; exit 2; fi
repo=$(cd "$1" && pwd) || { echo "measure.sh: expected a checkout at $1" >&2; exit 2; }
mkdir -p "$2" && dest=$(cd "$2" && pwd); shift 2

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

steps_of_ci_run() {   # the commands .ci/run runs after its checks of git and python, one a line
  sed -n '/^python3 .ci\/disk_check.py/,$p' "$1" | sed 's/ *#.*//' | sed '/^$/d'
}

{ echo "date $(date -u)"; echo "nproc $(nproc)"; free -g | sed -n 2p; python3 --version
  echo "pip cache: ${PIP_CACHE_DIR:-$(python3 -m pip cache dir 2>/dev/null)}"; } > "$dest/machine.txt"
printf 'rev\tcommit\tstep\trc\tseconds\n' > "$dest/steps.tsv"

if [ "${WARM:-}" = 1 ]; then
  for rev in "$@"; do
    warm=$(mktemp -d)
    git clone -q "$repo" "$warm/clone" && git -C "$warm/clone" checkout -q "$rev" &&
      (cd "$warm/clone" && make .venv-lint/.installed .venv/.installed .venv-triton38/.installed \
         .venv-triton39/.installed && python3 -m serving.install --cpu-test-venv .venv-serve --line 0.5.14 &&
         python3 apply.py check) > "$dest/warm-$rev.txt" 2>&1
    echo "warm $rev rc $?" >> "$dest/machine.txt"
    rm -rf "$warm"
  done
fi

n=0
for rev in "$@"; do
  n=$((n + 1))
  work=$(mktemp -d)
  git clone -q "$repo" "$work/clone" && git -C "$work/clone" checkout -q "$rev" || { echo "measure.sh: cannot check out $rev" >&2; exit 1; }
  commit=$(git -C "$work/clone" rev-parse --short HEAD)
  mapfile -t steps < <(steps_of_ci_run "$work/clone/.ci/run")
  # time, 1/5/15-minute load, MiB used on the RAM-backed file system (where CI's pytest files may go), MiB available
  # (the last two since 2026-12-07-ci-ram-tmp; the runs before it have the first four columns)
  ( while :; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg) shm_used_mib=$(df -m --output=used /dev/shm | tail -1 | tr -d ' ') mem_available_mib=$(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo)"; sleep 15; done ) > "$dest/load-$n-$rev.txt" &
  sampler=$!
  total_start=$(date +%s.%N)
  for step in "${steps[@]}"; do
    start=$(date +%s.%N)
    (cd "$work/clone" && echo "== $step" && if [ "${DRY:-}" = 1 ]; then echo "(DRY=1: not run)"; else bash -c "$step"; fi) \
      >> "$dest/log-$n-$rev.txt" 2>&1
    rc=$?
    printf '%s\t%s\t%s\t%s\t%s\n' "$rev" "$commit" "$step" "$rc" "$(since "$start")" >> "$dest/steps.tsv"
  done
  printf '%s\t%s\t%s\t%s\t%s\n' "$rev" "$commit" "total" "-" "$(since "$total_start")" >> "$dest/steps.tsv"
  kill "$sampler"
  rm -rf "$work"
done
column -t -s "$(printf '\t')" "$dest/steps.tsv"
