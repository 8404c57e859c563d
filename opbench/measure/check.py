"""Compare a backend's output with the high-precision reference. Knows nothing about timing.

Two limits, either failing fails the result:
- relative L2, ||out - ref|| / ||ref||, against the layer's tolerance: the error overall;
- max-abs, max |out - ref|, against tolerance x max|ref| (MAX_ABS_SCALE = 1): no single element
  may be off by more than the tolerance's share of the reference's largest value, so a few
  wildly wrong elements in a large tensor fail even when the L2 average hides them.
Unwritten elements (still holding the poison, see poison.py) and NaN/Inf fail too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from opbench.measure.poison import unwritten
from opbench.results.model import Correctness, broken_limits

if TYPE_CHECKING:
    import torch

# max_abs_limit = MAX_ABS_SCALE * tolerance * max|ref|. Rounding to the output dtype costs at
# most half an ulp of the largest element (fp16 2.4e-4, bf16 2.0e-3 of max|ref|, a tenth of
# their tolerances); the kernels measured stay below a third of the limit (docs/suite-format.md).
MAX_ABS_SCALE = 1.0


def compare_outputs(
    out: torch.Tensor,
    ref: torch.Tensor,
    tolerance: float,
    reference: str,
    loose_tolerance: bool = False,
    tolerance_of: str | None = None,
) -> Correctness:
    """`out` against `ref` (same shape): relative L2, max-abs, NaN/Inf and unwritten counts,
    and one reason per failed limit in `failures`. `tolerance_of`: the fused group's member
    whose tolerance this is (recorded and named in the failures)."""
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
    ref_max = float(r.abs().max().item()) if r.numel() else 0.0
    if nonfinite:
        rel = float("nan")
    result = Correctness(
        rel_l2=rel,
        max_abs=max_abs,
        nonfinite=nonfinite,
        tolerance=tolerance,
        reference=reference,
        max_abs_limit=MAX_ABS_SCALE * tolerance * ref_max,
        unwritten=unwritten(out),
        loose_tolerance=loose_tolerance,
        tolerance_of=tolerance_of,
    )
    return replace(result, failures=reasons(result, out.numel()))


def reasons(c: Correctness, numel: int, what: str = "") -> tuple[str, ...]:
    """One line per limit `c` breaks, each prefixed with `what` (e.g. "second input: ")."""
    return tuple(what + line for line in broken_limits(c, numel))


def with_failures(c: Correctness, more: tuple[str, ...]) -> Correctness:
    """`c` with the reasons of further checks (second input, last call) added."""
    return replace(c, failures=c.failures + more) if more else c


def combine(named: list[tuple[str, Correctness]]) -> Correctness:
    """One record for several outputs checked each on its own (a model's outputs): the
    figures of the output furthest from its limits, NaN/Inf and unwritten counts summed, and
    every output's failures, each prefixed with `output 'name': ` when there are several."""
    if len(named) == 1:
        return named[0][1]

    def badness(c: Correctness) -> float:
        worst = c.rel_l2 / c.tolerance if c.rel_l2 == c.rel_l2 else float("inf")
        if c.max_abs_limit:
            worst = max(worst, c.max_abs / c.max_abs_limit)
        return worst + (float("inf") if c.nonfinite or c.unwritten else 0.0)

    worst = max((c for _, c in named), key=badness)
    return replace(
        worst,
        nonfinite=sum(c.nonfinite for _, c in named),
        unwritten=sum(c.unwritten for _, c in named),
        failures=tuple(f"output {name!r}: {f}" for name, c in named for f in c.failures),
        loose_tolerance=any(c.loose_tolerance for _, c in named),
    )
