"""The target gate's exit code, from the verdicts a comparison prints (docs/compare.md's table):
every verdict shown, a row's or a model's, maps to one code, so the exit code can never
contradict what the terminal and the reports say.

    3  a row or a model of the gated backend is ERROR (the layer crashed, or was timed with
       no samples), or a compared layer failed its correctness check (a FAIL "incorrect"),
       or the run is incomplete (it lacks results: whatever they hold is not judged)
    1  a row or a model of the gated backend FAILs its target (unless --no-gate)
    0  otherwise: PASS, UNCERTAIN, NOT-MEASURED and MISSING never fail

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opbench.compare.model import Comparison, ComparisonRow, ModelSummary, Verdict
from opbench.errors import ExitCode
from opbench.results.model import LayerResult

SHOWN = 5  # names listed per line


@dataclass(frozen=True)
class TargetOutcome:
    """The exit code and, one per line, what set it (empty for exit 0)."""

    code: int
    lines: tuple[str, ...] = ()


def _incorrect(row: ComparisonRow) -> bool:
    return row.primary.verdict == Verdict.FAIL and row.primary.correct is False


def failing_rows(comparison: Comparison) -> list[ComparisonRow]:
    """Rows of the gated backend that FAIL their target on speed (NOT-MEASURED, MISSING and
    UNCERTAIN rows never do: they are no measured miss)."""
    return [
        row
        for row in comparison.rows
        if row.primary.verdict == Verdict.FAIL and not _incorrect(row)
    ]


def failing_models(comparison: Comparison) -> list[ModelSummary]:
    return [m for m in comparison.models if m.verdict == Verdict.FAIL]


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def target_outcome(
    comparison: Comparison,
    crashed: Sequence[LayerResult] = (),
    gate: bool = True,
    incomplete: str | None = None,
) -> TargetOutcome:
    """The exit code of the comparison's verdicts. crashed: results of the gated backend that
    errored or failed correctness (a layer exempt from matching is in no row, and still
    counts). incomplete: why the run lacks results (compare/completeness.py): exit 3 whatever
    the verdicts of what it holds. gate=False (--no-gate) turns exit 1 off, never exit 3."""
    outcome = _verdicts_outcome(comparison, crashed, gate)
    if incomplete is None:
        return outcome
    return TargetOutcome(ExitCode.LAYER_ERROR, (incomplete, *outcome.lines))


def _verdicts_outcome(
    comparison: Comparison, crashed: Sequence[LayerResult], gate: bool
) -> TargetOutcome:
    compared = {row.model for row in comparison.rows}
    bad_rows = [
        row for row in comparison.rows if row.primary.verdict == Verdict.ERROR or _incorrect(row)
    ]
    broken = [f"{row.model}/{row.label}" for row in bad_rows]
    broken += [f"model {m.model}" for m in comparison.models if m.verdict == Verdict.ERROR]
    shown = {(row.model, layer) for row in bad_rows for layer in row.layers}
    broken += [
        f"{r.model}/{'+'.join(r.members)}"
        for r in crashed
        if r.model in compared and not all((r.model, m) in shown for m in r.members)
    ]
    if broken:
        return TargetOutcome(
            ExitCode.LAYER_ERROR,
            (
                f"{len(broken)} {comparison.backend} result(s) crashed or failed correctness: "
                f"{_listed(broken)}",
            ),
        )
    rows = failing_rows(comparison)
    models = failing_models(comparison)
    if not rows and not models:
        return TargetOutcome(ExitCode.OK)
    parts = []
    if rows:
        parts.append(
            f"{len(rows)} layer(s) FAIL ({_listed([f'{r.model}/{r.label}' for r in rows])})"
        )
    if models:
        parts.append(f"{len(models)} model(s) FAIL ({_listed([m.model for m in models])})")
    label = "gate failed" if gate else "below target (not gated)"
    return TargetOutcome(
        ExitCode.FAILED_GATE if gate else ExitCode.OK, (f"{label}: {'; '.join(parts)}",)
    )
