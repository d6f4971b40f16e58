#!/usr/bin/env bash
# Runs the full-size demo (`bulkaction dev --demo`, what `make run` runs)
# DEMO_RUNS times (default 3) on each Redis kind, the in-process miniredis
# and a redis-server, one run at a time, and prints per run its exit
# status, its WARN lines (the miniredis notice aside), the load average
# when it started and the summary's last line: the makespan beside what the
# limits allow for the admissions it made, and their ratio. Timings depend
# on the machine: run it when nothing else is busy.
set -euo pipefail

bin=${BIN:-bin/bulkaction}
runs=${DEMO_RUNS:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for kind in miniredis redis-server; do
  for i in $(seq 1 "$runs"); do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    out="$dir/$kind-$i.txt"
    rc=0
    BULKACTION_DEV_DIR="$dir/dev" "$bin" dev --demo --redis "$kind" >"$out" 2>&1 || rc=$?
    warns=$(grep 'level=WARN' "$out" | grep -vc 'using the in-process miniredis' || true)
    line=$(grep '^makespan ' "$out" || echo "no makespan line")
    echo "$kind run $i: exit $rc, $warns WARN line(s), load $load: $line"
    if [ "$rc" -ne 0 ] || [ "$warns" -ne 0 ]; then
      grep 'level=WARN' "$out" | grep -v 'using the in-process miniredis' | head -5 || true
      tail -5 "$out"
    fi
  done
done
