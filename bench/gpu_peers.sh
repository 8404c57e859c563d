#!/usr/bin/env bash
# On the GPU machine, one call: suites/memory_bound.yaml (torch, torch-compile, triton), the
# elementwise activations of bench/memory_bound.py, then suites/conv_peers.yaml (conv vs
# torch.compile default and max-autotune), as far as the time allows. Packs every run.json
# and log into $OUT/peers.tgz after each step: a step cut off loses nothing already measured.
# Usage (repository root, pydantic wheels in .whl/): PART=1 bash bench/gpu_peers.sh; PART=2 ...
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
work=/tmp/opbench-peers
mkdir -p "$work"
pack() { tar czf "$OUT/peers.tgz" -C "$work" .; }
step() {
    local name=$1; shift
    local start=$(date +%s)
    "$@" > "$work/$name.log" 2>&1
    echo "$name: exit $? in $(( $(date +%s) - start )) s" | tee -a "$work/steps.txt"
    pack
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > "$work/gpu.txt"
# PART=1: the memory-bound suite and activations; PART=2: conv peers (max-autotune is slow)
if [ "${PART:-1}" = 1 ]; then
    step memory_bound timeout 420 python3 -m opbench run suites/memory_bound.yaml --out "$work/reports"
    step activations timeout 120 python3 bench/memory_bound.py --only relu,gelu,silu --skip-extra --budget 60
else
    step conv_peers timeout 560 python3 -m opbench run suites/conv_peers.yaml --out "$work/reports"
fi
for s in memory_bound conv_peers; do cp "$work/reports/$s/latest/run.json" "$work/$s.run.json" 2>/dev/null; done
pack
for f in conv_peers memory_bound; do [ -f "$work/$f.log" ] && grep -v "^  " "$work/$f.log" | tail -60; done
[ -f "$work/activations.log" ] && tail -25 "$work/activations.log"
cat "$work/steps.txt"
