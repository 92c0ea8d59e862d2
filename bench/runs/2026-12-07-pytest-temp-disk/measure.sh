#!/usr/bin/env bash
# What pytest's temporary files take on disk, before and after they were bounded: the same test files, one
# process, run twice into a directory of their own (--basetemp):
#   before: tmp_path_retention_policy=all (pytest's default: every test's tmp_path stays after the run)
#   after:  the checkout's pytest.ini (policy "failed": a passed test's tmp_path goes as soon as it passes)
# A sampler records the directory's size and file count every 2 s (the peak); then what the run left.
#   bench/runs/2026-12-07-pytest-temp-disk/measure.sh RESULTS_DIR TEST_FILE...
# MODES="after" runs only the second; WORKERS=2 runs each as make test does (pytest-xdist, --dist loadfile).
set -u
modes=${MODES:-before after}
workers=${WORKERS:-0}
cd "$(dirname "$0")/../../.."
results=${1:?usage: measure.sh RESULTS_DIR TEST_FILE...}; shift
mkdir -p "$results" build
sample() {   # DIR LOG: size in bytes and file count every 2 s until killed
    while sleep 2; do
        [ -d "$1" ] && echo "$(date +%s) $(du -sb "$1" 2>/dev/null | cut -f1) $(find "$1" -type f 2>/dev/null | wc -l)" >> "$2"
    done
}
for mode in $modes; do
    tmp=build/pytest-tmp-measure-$mode
    opts=()
    [ "$mode" = before ] && opts=(-o tmp_path_retention_policy=all)
    : > "$results/samples-$mode.txt"
    sample "$tmp" "$results/samples-$mode.txt" & sampler=$!
    start=$(date +%s)
    .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadfile "${opts[@]}" --basetemp="$tmp" "$@" > "$results/pytest-$mode.txt" 2>&1
    rc=$?
    kill "$sampler"; wait "$sampler" 2>/dev/null
    left_bytes=$(du -sb "$tmp" | cut -f1); left_files=$(find "$tmp" -type f | wc -l)
    peak=$(sort -k2 -n "$results/samples-$mode.txt" | tail -1)
    echo "$mode: rc $rc, $(( $(date +%s) - start )) s; left after the run: $left_bytes bytes in $left_files files; peak sample (time bytes files): $peak" | tee -a "$results/summary.txt"
    du -sb "$tmp"/* 2>/dev/null | sort -n | tail -15 > "$results/largest-left-$mode.txt"   # its biggest producers
    rm -rf "$tmp"
done
