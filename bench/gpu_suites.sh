#!/usr/bin/env bash
# Run suites on the GPU machine and pack every run.json and log into $OUT/runs-<tag>.tgz.
# Usage: bash bench/gpu_suites.sh TAG SUITE... (pydantic wheels in .whl/, see docs/performance.md)
set -u
tag=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
work=/tmp/opbench-runs/$tag
mkdir -p "$work"
for suite in "$@"; do
    name=$(basename "$suite" .yaml)
    start=$(date +%s)
    python3 -m opbench run "$suite" --out /tmp/opbench-reports > "$work/$name.log" 2>&1
    echo "$name: exit $? in $(( $(date +%s) - start )) s"
    cp /tmp/opbench-reports/"$name"/latest/run.json "$work/$name.run.json" 2>/dev/null
    tar czf "$OUT/runs-$tag.tgz" -C "$work" .
done
