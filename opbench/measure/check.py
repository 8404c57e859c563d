"""Compare a backend's output with the high-precision reference. Knows nothing about timing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opbench.results.model import Correctness

if TYPE_CHECKING:
    import torch


def compare_outputs(
    out: torch.Tensor, ref: torch.Tensor, tolerance: float, reference: str
) -> Correctness:
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(
            f"output shape {list(out.shape)} differs from the reference's {list(ref.shape)}"
        )
    ref = ref.to(out.device)
    work = (
        torch.float64 if ref.dtype == torch.float64 or out.device.type == "cpu" else torch.float32
    )
    o = out.detach().to(work)
    r = ref.to(work)
    finite = torch.isfinite(o)
    nonfinite = int((~finite).sum().item())
    diff = torch.where(finite, o - r, torch.zeros_like(o))
    ref_norm = float(torch.linalg.vector_norm(r).item())
    err_norm = float(torch.linalg.vector_norm(diff).item())
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    max_abs = float(diff.abs().max().item()) if diff.numel() else 0.0
    if nonfinite:
        rel = float("nan")
    return Correctness(
        rel_l2=rel, max_abs=max_abs, nonfinite=nonfinite, tolerance=tolerance, reference=reference
    )
