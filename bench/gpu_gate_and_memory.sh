#!/usr/bin/env bash
# On the GPU machine, one call: (1) suites/memory_bound.yaml through `opbench run` (torch,
# torch-compile, triton), (2) the regression gate demonstration of issue #8: two runs of the
# same code gate with exit 0; a run with the test-only layernorm slowdown gates with exit 1.
# Everything (run.json files, logs, baseline, JUnit) is packed into $OUT/gate-memory.tgz after
# each step, so a step cut off by the time limit loses nothing already measured.
# Usage (repository root, pydantic wheels in .whl/): bash bench/gpu_gate_and_memory.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
work=/tmp/opbench-gpu
mkdir -p "$work"
pack() { tar czf "$OUT/gate-memory.tgz" -C "$work" .; }
step() {  # step NAME COMMAND...: run, log, time, report the exit code
    local name=$1; shift
    local start=$(date +%s)
    "$@" > "$work/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$work/steps.txt"
    pack
    return 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$work/gpu.txt"
cat "$work/gpu.txt"

# (1) memory-bound suite
step memory_bound timeout 330 python3 -m opbench run suites/memory_bound.yaml --out "$work/reports"
cp "$work/reports/memory_bound/latest/run.json" "$work/memory_bound.run.json" 2>/dev/null
tail -45 "$work/memory_bound.log"

# (2) gate: baseline from run A; run B (same code) must pass; run C (slowed layernorm) must fail
g="$work/gate"
mkdir -p "$g"
for tag in A B; do
    step "gate_run_$tag" timeout 150 python3 -m opbench run suites/transformer.yaml --backend triton --out "$g/$tag"
done
step gate_baseline python3 -m opbench compare "$g/A/transformer/latest" --update-baseline --baseline-out "$g/baseline.json"
step gate_same python3 -m opbench compare "$g/B/transformer/latest" --baseline "$g/baseline.json" --junit "$g/same.junit.xml"
OPBENCH_TEST_SLOW_LAYERNORM=1 step gate_run_C timeout 150 python3 -m opbench run suites/transformer.yaml --backend triton --out "$g/C"
# run C records OPBENCH_TEST_SLOW_LAYERNORM in env["opbench_vars"]: without --allow-env-change
# its fingerprint differs from the baseline's and the gate stops at exit 4 (docs/ci.md)
step gate_slowed python3 -m opbench compare "$g/C/transformer/latest" --baseline "$g/baseline.json" --junit "$g/slowed.junit.xml" --allow-env-change
for name in gate_same gate_slowed; do echo "== $name"; cat "$work/$name.log"; done
cat "$work/steps.txt"
