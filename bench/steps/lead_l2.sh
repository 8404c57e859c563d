#!/usr/bin/env bash
# The lead's second call of 2026-11-25 (late): the step file for the card that came.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    exec bash bench/gpu_session.sh l2h200 bench/steps/lead_l2_h200.tsv
fi
exec bash bench/gpu_session.sh l2h100 bench/steps/lead_l2_h100.tsv
