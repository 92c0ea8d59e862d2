#!/usr/bin/env bash
# Same-condition CI timing: fresh clone, empty pip cache, one at a time, load sampled every 30 s.
set -u
for rev in "$@"; do
  d=/work/citime/clone-$rev; rm -rf "$d"; git clone -q /work/main "$d" && git -C "$d" checkout -q "$rev"
  cache=$(mktemp -d /work/citime/pipcache-XXXX)
  ( while true; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done ) > /work/citime/load-$rev.txt &
  lp=$!
  start=$(date +%s); echo "rev $rev start $(date -u)" > /work/citime/result-$rev.txt
  (cd "$d" && PIP_CACHE_DIR=$cache bash .ci/run) > /work/citime/log-$rev.txt 2>&1; rc=$?
  end=$(date +%s); kill $lp
  echo "rev $rev rc $rc wall_s $((end-start)) end $(date -u)" >> /work/citime/result-$rev.txt
  rm -rf "$cache"
done
