#!/usr/bin/env bash
# One device call, many steps: each step's output goes to its own log, every run.json and JSON
# a step writes under $WORK is packed into $OUT/results-<tag>.tgz after each step, so a call
# cut short by its time limit still brings back what finished.
# Usage: bash bench/gpu_session.sh TAG STEPFILE   (STEPFILE: lines "name<TAB>seconds<TAB>command")
# pydantic wheels must be in .whl/ (see docs/performance.md).
set -u
tag=$1; steps=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
export WORK=/tmp/opbench-session/$tag
mkdir -p "$WORK/logs"
summary="$OUT/summary-$tag.txt"
: > "$summary"
while IFS=$'\t' read -r name seconds command; do
    [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
    start=$(date +%s.%N)
    timeout "$seconds" bash -c "$command" > "$WORK/logs/$name.log" 2>&1
    rc=$?
    took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
    echo "$name: exit $rc in ${took} s" | tee -a "$summary"
    tail -n 25 "$WORK/logs/$name.log" | sed "s/^/  [$name] /" >> "$summary"
    tar czf "$OUT/results-$tag.tgz" -C "$WORK" . 2>/dev/null
done < "$steps"
