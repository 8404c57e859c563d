"""The device ceilings a roofline is drawn under, and how close a layer comes to them.

Measured peaks come from run.env["peaks"] ({"tflops", "gbps", "label"}), written by the run on
its own device. Without them a GPU run falls back to its device's nominal figures, labelled
as such; a CPU run, or a GPU this table does not know, gets no roofs at all.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opbench.compare.model import Peaks

# Nominal figures, by a substring of the GPU's name: dense bf16 tensor-core TFLOP/s and HBM
# GB/s. The H200 pair is what this project measured there (bf16 GEMM, device-to-device copy);
# the others are the vendors' datasheet figures.
NOMINAL: tuple[tuple[str, float, float, str], ...] = (
    ("H200", 790.0, 4270.0, "~790 TFLOP/s bf16 dense, 4.27 TB/s copy (measured once by opbench)"),
    ("H100", 989.0, 3350.0, "989 TFLOP/s bf16 dense, 3.35 TB/s (SXM datasheet)"),
    ("A100", 312.0, 2039.0, "312 TFLOP/s bf16 dense, 2.04 TB/s (80 GB SXM datasheet)"),
    ("L40S", 362.0, 864.0, "362 TFLOP/s bf16 dense, 864 GB/s (datasheet)"),
)


def nominal_peaks(gpu_name: str) -> Peaks | None:
    for key, tflops, gbps, what in NOMINAL:
        if key.casefold() in gpu_name.casefold():
            return Peaks(
                tflops=tflops,
                gbps=gbps,
                label=f"nominal {key}, not measured in this run: {what}",
                measured=False,
            )
    return None


def peaks_from_env(env: Mapping[str, Any], device: str = "cuda") -> Peaks | None:
    """The run's measured peaks, else its GPU's nominal ones; None on a CPU run without
    measured peaks, or on a GPU with no nominal figures here."""
    peaks = env.get("peaks") if isinstance(env, Mapping) else None
    if isinstance(peaks, Mapping):
        try:
            tflops, gbps = float(peaks["tflops"]), float(peaks["gbps"])
        except (KeyError, TypeError, ValueError):
            tflops = gbps = 0.0
        if tflops > 0 and gbps > 0:
            label = str(
                peaks.get("label")
                or f"{env.get('gpu_name') or env.get('gpu') or 'device'} peaks measured by this run"
            )
            return Peaks(tflops=tflops, gbps=gbps, label=label, measured=True)
    if device == "cpu":
        return None
    name = env.get("gpu_name") or env.get("gpu") if isinstance(env, Mapping) else None
    return nominal_peaks(str(name)) if name else nominal_peaks("H200")


def roof_tflops(peaks: Peaks, intensity: float) -> float:
    """The attainable TFLOP/s at an arithmetic intensity (FLOP/byte): min(compute, slope)."""
    return min(peaks.tflops, intensity * peaks.gbps / 1e3)


def roof_fraction(
    peaks: Peaks | None, flops: int, nbytes: int, tflops: float | None, gbps: float | None
) -> float | None:
    """How much of the attainable rate a layer reaches (0..1+): its TFLOP/s against the roof at
    its intensity; for ops that only move data, its GB/s against the bandwidth."""
    if peaks is None:
        return None
    if flops and nbytes and tflops:
        return tflops / roof_tflops(peaks, flops / nbytes)
    if nbytes and gbps:
        return gbps / peaks.gbps
    return None
