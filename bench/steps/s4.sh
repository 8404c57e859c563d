#!/usr/bin/env bash
# The lead's closing calls of 2026-11-26, on whichever card comes. If this card's shipped table
# lacks the retune after the int8gemm merge (new int8-codes keys, Gluon GEMM candidates on the
# codes path), tune llama_quant/gemm/mlp and time the decode rules (the decode helper's fp16
# M = 1 rule was timed on an H200 only); otherwise (a fresh machine whose table is done) run
# the first runs of the suites not yet checked cold (s4_cold.tsv).
RETUNE="opbench plans tune suites/llama_quant.yaml suites/gemm.yaml suites/mlp.yaml"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
table=opbench/kernels/shipped/$(echo "$card" | sed 's/[^A-Za-z0-9]\+/_/g; s/^_//; s/_$//').json
if grep -qF "\"$RETUNE\"" "$table"; then
    exec bash bench/gpu_session.sh s4cold bench/steps/s4_cold.tsv
fi
exec bash bench/gpu_session.sh s4tune bench/steps/s4_tune.tsv
