#!/bin/bash
cd /tmp/ci45a
export PIP_CACHE_DIR=/tmp/ci45a-pipcache
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s)
/usr/bin/time -f "make apply: %e s wall, %M KB maxrss" make apply > /tmp/ci45a-apply.log 2>&1; echo "apply rc=$?"
t1=$(date +%s); echo "make apply $((t1-t0)) s; build/ $(du -sh build | cut -f1); pip cache $(du -sh $PIP_CACHE_DIR 2>/dev/null | cut -f1)"
/usr/bin/time -f "make test: %e s wall" make test > /tmp/ci45a-test.log 2>&1; echo "test rc=$?"
t2=$(date +%s); echo "make test $((t2-t1)) s; venvs $(du -shc .venv .venv-triton38 .venv-triton39 | tail -1 | cut -f1); clone $(du -sh . | cut -f1); pip cache $(du -sh $PIP_CACHE_DIR | cut -f1) load $(cut -d' ' -f1-3 /proc/loadavg)"
PS4='+ $(date +%s) ' bash -x .ci/run > /tmp/ci45a-ci.log 2>&1; echo "ci rc=$?"
t3=$(date +%s); echo ".ci/run $((t3-t2)) s; clone $(du -sh . | cut -f1); pip cache $(du -sh $PIP_CACHE_DIR | cut -f1); end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
