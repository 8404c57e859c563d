"""Per model: the row counts and totals, the end-to-end times in both modes, and the model's
own verdict.

The model verdict is judged on the primary backend's end-to-end eager time where the run has
one (what an application pays: every launch included), else on the sum of its layers, against
what the reference spent on the model; `ModelSummary.basis` says which. It is judged only when
both sides measured the whole model (`model_gaps`): a layer with no time in this run (a
partial run, an unsupported layer), a timed layer MISSING from the reference (unless
--allow-missing), a timed reference row no layer covers, or --partial make it UNCERTAIN with
the reasons, never PASS, and its speed-up is then over the rows measured on both sides. It is
never judged on interpreter times, or on CPU times against a GPU engine (NOT-MEASURED).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from opbench.compare.best_peer import vs_best_peer
from opbench.compare.model import (
    ComparisonRow,
    EndToEndTiming,
    Interval,
    ModelSummary,
    Verdict,
)
from opbench.compare.rows import TORCH, model_layer_results
from opbench.compare.verdict import (
    INTERPRETED,
    incorrect_reason,
    result_interval,
    speedup_interval,
    sum_intervals,
    verdict_of,
)
from opbench.results.model import EndToEnd, LayerResult, RunResult, Status
from opbench.targets import DEFAULT_TARGET_SPEEDUP

EAGER = "eager"
BASIS_END_TO_END = "end-to-end (eager)"
BASIS_LAYERS = "sum of layers"
BASIS_MATCHED = "rows measured on both sides"


@dataclass(frozen=True)
class ModelContext:
    """What a model's summary depends on besides its rows.

    reference_total / reference_total_source: what the reference spent on the model, and how
    that was found; reference_interval: its spread where it is a sum of rows.
    layers: the model's layers, each needing a time for the model to be complete.
    unmatched: timed reference rows of this model that no layer covers (their work is in
        the reference's total and in no opbench time).
    partial: --partial, the suite times part of the profiled model.
    """

    backend: str
    reference_total: float | None
    reference_total_source: str
    reference_interval: Interval | None
    overhead_ms: float
    target: float | None = None
    gpu_reference: bool = False
    allow_missing: bool = False
    layers: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()
    partial: bool = False


def _geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _stats_interval(e2e: EndToEnd) -> Interval | None:
    stats = e2e.stats
    if stats is None:
        return None
    lo, hi = stats.ci95
    return Interval(stats.median, lo, hi)


def end_to_end_timings(run: RunResult, model: str) -> tuple[EndToEndTiming, ...]:
    """Every backend's end-to-end time of the model, each mode, with its speed-up over torch
    eager in the same mode and over the best PyTorch peer in the same mode."""
    mine = [e for e in run.end_to_end if e.model == model]
    torch = {e.mode: _stats_interval(e) for e in mine if e.backend == TORCH and e.ran}
    out = []
    for e in mine:
        time = _stats_interval(e) if e.ran else None
        base = torch.get(e.mode)
        failures = e.correctness.reasons if e.correctness is not None else None
        vs_torch = (
            base.value / time.value
            if e.backend != TORCH and base is not None and time is not None and time.value > 0
            else None
        )
        out.append(
            EndToEndTiming(
                backend=e.backend,
                mode=e.mode,
                status=e.status,
                time=time,
                vs_torch=None if e.interpreted or failures else vs_torch,
                interpreted=e.interpreted,
                message=e.message,
                failures=failures,
                rel_l2=e.correctness.rel_l2 if e.correctness is not None else None,
                **_vs_best(run, e),
            )
        )
    return tuple(out)


def _vs_best(run: RunResult, e: EndToEnd) -> dict:
    """best_peer and vs_best_peer of a row that is not itself a PyTorch peer."""
    best = vs_best_peer(run, e)
    return {} if best is None else {"best_peer": best[0], "vs_best_peer": best[1]}


def summarise_model(
    model: str, rows: Sequence[ComparisonRow], run: RunResult, context: ModelContext
) -> ModelSummary:
    counts = dict.fromkeys(Verdict.ALL, 0)
    matched_ref = matched_ob = 0.0
    speedups = []
    for row in rows:
        timing = row.primary
        counts[timing.verdict] += 1
        if row.reference is not None and timing.time is not None:
            matched_ref += row.reference.value
            matched_ob += timing.time.value
        # a speed-up whose reference reaches zero (a prefix difference in its noise) says
        # nothing about the layer: it is left out of the geometric mean
        if (
            timing.speedup is not None
            and timing.verdict in Verdict.JUDGED
            and timing.speedup.lo > 0
        ):
            speedups.append(timing.speedup.value)
    results = model_layer_results(run, model, context.backend)
    opbench_total = sum(r.median_ms for r in results if r.ran and r.median_ms is not None)
    e2e = end_to_end_timings(run, model)
    eager = next(
        (t for t in e2e if t.backend == context.backend and t.mode == EAGER and t.time), None
    )
    missing = tuple(
        layer
        for row in rows
        if row.primary.verdict == Verdict.MISSING and row.primary.time is not None
        for layer in row.layers
    )
    targets = [row.target for row in rows]
    target = context.target or max(targets, default=DEFAULT_TARGET_SPEEDUP)
    gaps = model_gaps(rows, results, missing, context)
    verdict, speedup, basis, reason = _model_verdict(results, eager, rows, gaps, target, context)
    total = context.reference_total
    return ModelSummary(
        model=model,
        backend=context.backend,
        rows=len(rows),
        matched_reference_ms=matched_ref,
        matched_opbench_ms=matched_ob,
        total_speedup=matched_ref / matched_ob if matched_ob > 0 and matched_ref > 0 else None,
        geomean_speedup=_geomean(speedups),
        at_target=counts[Verdict.PASS],
        compared=sum(counts[v] for v in Verdict.JUDGED),
        opbench_total_ms=opbench_total,
        reference_total_ms=total,
        reference_total_source=context.reference_total_source,
        overhead_ms=context.overhead_ms,
        counts=counts,
        verdict=verdict,
        speedup=speedup,
        basis=basis,
        reason=reason,
        target=target,
        end_to_end_speedup=(
            total / eager.time.value
            if total and eager is not None and eager.time and not eager.interpreted and not gaps
            else None
        ),
        end_to_end=e2e,
        missing=missing,
        complete=not gaps,
    )


def model_gaps(
    rows: Sequence[ComparisonRow],
    results: Sequence[LayerResult],
    missing: Sequence[str],
    context: ModelContext,
) -> list[str]:
    """Why the model cannot be judged whole: what one side measured and the other did not.
    Empty when both sides cover the whole model."""
    gaps = []
    timed = {m for r in results if r.ran and r.stats is not None for m in r.members}
    untimed = [layer for layer in context.layers if layer not in timed]
    if untimed:
        gaps.append(
            f"{len(untimed)} of {len(context.layers)} layers have no {context.backend} time in "
            f"this run ({_shown(untimed)}: not run, unsupported or interrupted)"
        )
    if missing and not context.allow_missing:
        gaps.append(
            f"{len(missing)} timed layer(s) MISSING from the reference ({_shown(missing)}): "
            "the reference may leave them out (--allow-missing to judge anyway)"
        )
    if context.unmatched:
        gaps.append(
            f"{len(context.unmatched)} timed reference row(s) match no layer "
            f"({_shown(context.unmatched)}): the reference's total holds work the run did not time"
        )
    no_time = [row.label for row in rows if row.reference_rows and row.reference is None]
    if no_time:
        gaps.append(f"the reference has no time for {_shown(no_time)}")
    if context.partial:
        gaps.append("--partial: the suite times part of the profiled model")
    return gaps


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:5]) + (" …" if len(names) > 5 else "")


def _measured_on_both_sides(rows: Sequence[ComparisonRow]) -> Interval | None:
    """The speed-up over the rows with a time on both sides (the matched rows)."""
    both = [
        row
        for row in rows
        if row.reference is not None and row.reference.value > 0 and row.primary.time is not None
    ]
    reference = sum_intervals(row.reference for row in both if row.reference is not None)
    time = sum_intervals(row.primary.time for row in both if row.primary.time is not None)
    if reference is None or time is None:
        return None
    return speedup_interval(reference, time)


def _model_verdict(
    results: Sequence[LayerResult],
    eager: EndToEndTiming | None,
    rows: Sequence[ComparisonRow],
    gaps: Sequence[str],
    target: float,
    context: ModelContext,
) -> tuple[str, Interval | None, str, str | None]:
    """(verdict, speed-up, basis, reason) of the whole model: judged only when both sides
    measured all of it; otherwise UNCERTAIN (never PASS) with the reasons, and the speed-up
    shown is over what both sides measured."""
    basis = BASIS_END_TO_END if eager is not None else BASIS_LAYERS
    if not results:
        return (
            Verdict.NOT_MEASURED,
            None,
            basis,
            f"not in this run: no {context.backend} result for this model",
        )
    broken = [r for r in results if r.status == Status.ERROR]
    if broken:
        return Verdict.ERROR, None, basis, f"{broken[0].layer}: {broken[0].message or 'error'}"
    empty = [r for r in results if r.ran and r.stats is None]
    if empty:
        return Verdict.ERROR, None, basis, f"{empty[0].layer}: no timing samples"
    incorrect = [r for r in results if r.ran and not r.correct]
    if incorrect:
        return Verdict.FAIL, None, basis, incorrect_reason(incorrect[0])
    if eager is not None and eager.failures:
        return Verdict.FAIL, None, basis, f"the whole model's output is wrong: {eager.failures[0]}"
    if gaps:
        speedup, basis = _measured_on_both_sides(rows), BASIS_MATCHED
    else:
        speedup = _whole(results, eager, context)
    if any(r.interpreted for r in results) or (eager is not None and eager.interpreted):
        return Verdict.NOT_MEASURED, speedup, basis, INTERPRETED
    if context.gpu_reference and any(r.device == "cpu" for r in results):
        return (
            Verdict.NOT_MEASURED,
            speedup,
            basis,
            "timed on the CPU against a GPU engine (--allow-cpu-times to judge anyway)",
        )
    if gaps:
        return Verdict.UNCERTAIN, speedup, basis, "not judged as a whole: " + "; ".join(gaps)
    if speedup is None:
        return Verdict.UNCERTAIN, None, basis, "the reference has no time for this model"
    return verdict_of(speedup, target), speedup, basis, None


def _whole(
    results: Sequence[LayerResult], eager: EndToEndTiming | None, context: ModelContext
) -> Interval | None:
    """The whole model's speed-up: what the reference spent on it over the end-to-end eager
    time, else over the sum of its layers."""
    if eager is not None:
        time = eager.time
    else:
        timed = [result_interval(r) for r in results if r.ran]
        time = sum_intervals(t for t in timed if t is not None)
    reference = context.reference_interval
    if reference is None and context.reference_total:
        reference = Interval(
            context.reference_total, context.reference_total, context.reference_total
        )
    if time is None or reference is None or reference.value <= 0:
        return None
    return speedup_interval(reference, time)
