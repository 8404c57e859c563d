#!/usr/bin/env bash
# On the GPU machine: run suites, profile them with ONNX Runtime there, and compare, end to end.
# Packs run.json files, logs and reports into $OUT/compare-<tag>.tgz.
# Usage: bash bench/gpu_compare.sh TAG SUITE...
set -u
tag=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
work=/tmp/opbench-compare/$tag
mkdir -p "$work"
for suite in "$@"; do
    name=$(basename "$suite" .yaml)
    start=$(date +%s)
    python3 -m opbench run "$suite" --out /tmp/opbench-reports > "$work/$name.run.log" 2>&1
    echo "$name run: exit $? in $(( $(date +%s) - start )) s"
    cp /tmp/opbench-reports/"$name"/latest/run.json "$work/$name.run.json" 2>/dev/null
    python3 -m opbench reference onnxruntime "$suite" --runs 5 --out "$work/$name.ort.json" > "$work/$name.ort.log" 2>&1
    echo "$name onnxruntime reference: exit $?"
    python3 -m opbench compare /tmp/opbench-reports/"$name"/latest --reference "$work/$name.ort.json" \
        --out "$work/$name-compare" > "$work/$name.compare.log" 2>&1
    echo "$name compare: exit $?"
    tail -25 "$work/$name.compare.log"
    tar czf "$OUT/compare-$tag.tgz" -C "$work" .
done
