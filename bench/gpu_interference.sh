#!/usr/bin/env bash
# Issue #9's interference measurement, on as many GPUs as the machine has (N): one suite run
# three ways, 1 GPU, N GPUs under torchrun (ranks time concurrently), N GPUs with
# --exclusive-timing; wall time of each, then per-layer median differences against 1 GPU.
# A warm-up pass first fills the compile and plan caches, so no mode pays them alone.
# Usage (repository root, pydantic wheels in .whl/): bash bench/gpu_interference.sh SUITE
# A device call lasts at most 10 minutes: give each call some of the steps, in this order,
# with STEPS="warmup one_gpu" then STEPS="concurrent exclusive compare" (default: all).
# /tmp/opbench-interference survives between calls only while the machine stays warm.
set -u
suite=$1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
n=$(nvidia-smi -L | wc -l)
name=$(basename "$suite" .yaml)
work=/tmp/opbench-interference
mkdir -p "$work"
pack() { tar czf "$OUT/interference.tgz" -C "$work" .; }
step() {
    local tag=$1; shift
    local start=$(date +%s.%N)
    "$@" > "$work/$tag.log" 2>&1
    local rc=$?
    local end=$(date +%s.%N)
    printf '%s: exit %s in %.1f s\n' "$tag" "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" | tee -a "$work/steps.txt"
    cp "$work/$tag/$name/latest/run.json" "$work/$tag.run.json" 2>/dev/null
    pack
}
nvidia-smi -L | tee "$work/gpus.txt"
steps=${STEPS:-warmup one_gpu concurrent exclusive compare}
wants() { [[ " $steps " == *" $1 "* ]]; }
torchrun=(python3 -m torch.distributed.run --standalone --nproc-per-node="$n" -m opbench run "$suite")
wants warmup && step warmup timeout 280 "${torchrun[@]}" --quick --out "$work/warmup"
wants one_gpu && step one_gpu timeout 500 python3 -m opbench run "$suite" --out "$work/one_gpu"
wants concurrent && step concurrent timeout 280 "${torchrun[@]}" --out "$work/concurrent"
wants exclusive && step exclusive timeout 280 "${torchrun[@]}" --exclusive-timing --out "$work/exclusive"
wants compare || exit 0
python3 bench/interference.py "$work/one_gpu.run.json" "$work/concurrent.run.json" "$work/exclusive.run.json" | tee "$work/interference.txt"
python3 bench/interference.py "$work/one_gpu.run.json" "$work/concurrent.run.json" "$work/exclusive.run.json" --min-ms 0 | tail -2 | tee -a "$work/interference.txt"
pack
cat "$work/steps.txt"
