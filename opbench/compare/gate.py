"""The CI regression gate: is this run slower than the baseline, beyond noise and threshold?

Per (model, layer, backend) the effect is the ratio current/baseline of the typical time,
worked on a log scale from the *round medians* (most GPU noise sits between rounds: clocks,
heat, neighbours; the samples inside one round are not independent evidence).

Method (see docs/ci.md for why this one): Welch's t interval for the difference of the mean
log round medians, i.e. the ratio of the geometric means of round medians, at `level` (99%).
With 5 rounds a side, exact rank methods (Mann-Whitney / Hodges-Lehmann) cannot give a
p-value below 1/252, so Benjamini-Hochberg over a suite of 50 layers (which needs p <= q/50)
could never flag a lone regressed layer; a bootstrap over 5 rounds has 126 distinct resamples
and its interval is too narrow (it ignores the t correction). Log round medians of
lognormal timings are close to normal, which is what the t interval needs.

Verdicts, with T the relative threshold (interval [lo, hi] of the ratio):
    REGRESSED     lo > 1 + T
    IMPROVED      hi < 1 / (1 + T)
    OK            1 / (1 + T) <= lo and hi <= 1 + T
    INCONCLUSIVE  otherwise
A REGRESSED layer fails only if it is also significant after Benjamini-Hochberg at `q` over
the suite, on one-sided p-values for "ratio > 1 + T". Improvements never fail.

The verdicts, options and report are data (opbench/compare/gate_model.py); this module
computes them. Pure Python + numpy: no torch, no triton.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, replace

import numpy as np

from opbench.compare.baseline import Baseline, BaselineEntry
from opbench.compare.completeness import incomplete_reason
from opbench.compare.gate_env import gate_differences
from opbench.compare.gate_model import (
    CODE_VERDICT,
    CV_FLOOR_FACTOR,
    DEFAULT_THRESHOLD,
    MIN_ROUNDS,
    SHORT_LAYER_MS,
    GateOptions,
    GateReport,
    GateVerdict,
    Key,
    Verdict,
    format_ratio,
    parse_threshold,
    pct,
)
from opbench.compare.gate_stats import benjamini_hochberg, classify, log_ratio_test
from opbench.results.fingerprint import EnvDifference
from opbench.results.model import LayerResult, RunResult, Status

# Names other modules import from here: the gate's one public face.
__all__ = [
    "CV_FLOOR_FACTOR",
    "DEFAULT_THRESHOLD",
    "SHORT_LAYER_MS",
    "EnvDifference",
    "GateOptions",
    "GateReport",
    "GateVerdict",
    "Key",
    "Verdict",
    "confirm",
    "gate",
    "inconclusive_keys",
    "unsettled_note",
    "merge_rerun",
    "parse_threshold",
]


@dataclass
class _Pending:
    """A layer waiting for the suite-wide statistics."""

    verdict: GateVerdict
    log_base: np.ndarray
    log_current: np.ndarray
    in_family: bool  # counts in Benjamini-Hochberg (False when the environments differ)


def _threshold(result: LayerResult, options: GateOptions) -> float:
    if result.regression_threshold is not None:
        return float(result.regression_threshold)
    return DEFAULT_THRESHOLD if options.threshold is None else options.threshold


def _prepare(
    result: LayerResult,
    entry: BaselineEntry | None,
    options: GateOptions,
    incomparable: bool,
    confirmed: bool,
) -> GateVerdict | _Pending:
    base = GateVerdict(result.model, result.layer, result.backend, Verdict.OK, confirmed=confirmed)
    if entry is not None:
        base = replace(base, baseline_ms=entry.median_ms)
    if result.status == Status.UNSUPPORTED:
        had = " (the baseline has a timing)" if entry is not None else ""
        why = f": {result.message}" if result.message else ""
        return replace(base, verdict=Verdict.UNSUPPORTED, message=f"unsupported{had}{why}")
    if not result.ran:
        return replace(
            base,
            verdict=Verdict.CRASHED,
            message=f"{result.status}: {result.message or 'no message'}",
        )
    if not result.correct:
        c = result.correctness
        why = (
            "no correctness check recorded"
            if c is None
            else f"failed correctness: {'; '.join(c.reasons)}"
        )
        return replace(base, verdict=Verdict.CRASHED, message=why)
    stats = result.stats
    if stats is not None:
        base = replace(base, current_ms=stats.median)
    if entry is None:
        return replace(base, verdict=Verdict.NEW, message="no baseline timing for this layer")
    if stats is None:
        return replace(base, verdict=Verdict.INCONCLUSIVE, message="no timing samples in this run")
    if result.interpreted or entry.interpreted:
        return replace(
            base,
            verdict=Verdict.INCONCLUSIVE,
            message="timed in Triton's CPU interpreter: not performance figures",
        )
    cur = [m for m in stats.round_medians if m > 0]
    old = [m for m in entry.round_medians_ms if m > 0]
    if len(cur) < MIN_ROUNDS or len(old) < MIN_ROUNDS:
        return replace(
            base,
            verdict=Verdict.INCONCLUSIVE,
            too_few_rounds=True,
            rounds=(len(old), len(cur)),
            message=f"not judged: a verdict needs {MIN_ROUNDS}+ timing rounds on each side "
            f"(baseline {len(old)}, run {len(cur)})",
        )
    cv_b, cv_c = entry.cv, stats.cv
    threshold = _threshold(result, options)
    message = ""
    if entry.median_ms < options.short_layer_ms and CV_FLOOR_FACTOR * max(cv_b, cv_c) > threshold:
        message = f"short layer: threshold raised from {pct(threshold)} to {CV_FLOOR_FACTOR:g} x CV"
        threshold = CV_FLOOR_FACTOR * max(cv_b, cv_c)
    base = replace(
        base,
        threshold=threshold,
        cv_baseline=cv_b,
        cv_current=cv_c,
        rounds=(len(old), len(cur)),
        message=message,
    )
    return _Pending(base, np.log(old), np.log(cur), not incomparable)


def _finish(pending: list[_Pending], options: GateOptions) -> list[GateVerdict]:
    if not pending:
        return []
    log_thr = np.array([math.log1p(p.verdict.threshold or 0.0) for p in pending])
    test = log_ratio_test(
        [p.log_base for p in pending], [p.log_current for p in pending], log_thr, options.level
    )
    codes = classify(test.low, test.high, log_thr)
    family = np.array([p.in_family for p in pending])
    significant = np.zeros(len(pending), dtype=bool)
    adjusted = np.full(len(pending), np.nan)
    significant[family], adjusted[family] = benjamini_hochberg(test.p_regressed[family], options.q)
    out = []
    for i, p in enumerate(pending):
        v = p.verdict
        ratio, lo, hi = (math.exp(float(x[i])) for x in (test.estimate, test.low, test.high))
        verdict = CODE_VERDICT[int(codes[i])] if p.in_family else Verdict.INCOMPARABLE
        sig = bool(significant[i])
        q_value = float(adjusted[i]) if p.in_family else None
        what = format_ratio(ratio, lo, hi, options.level) + f", threshold {pct(v.threshold or 0.0)}"
        if verdict is Verdict.REGRESSED:
            what += (
                f"; significant after Benjamini-Hochberg (adjusted p {q_value:.2g} <= {options.q:g})"
                if sig
                else f"; not significant after Benjamini-Hochberg (adjusted p {q_value:.2g} > {options.q:g})"
            )
        elif verdict is Verdict.INCONCLUSIVE:
            what += (
                "; still inconclusive after a confirmation run"
                if v.confirmed
                else "; the interval straddles the threshold"
            )
        elif verdict is Verdict.INCOMPARABLE:
            what += "; environments differ, not judged"
        message = f"{verdict.value.lower()}: {what}" + (f" ({v.message})" if v.message else "")
        out.append(
            replace(
                v,
                verdict=verdict,
                ratio=ratio,
                ci_low=lo,
                ci_high=hi,
                p_value=float(test.p_regressed[i]),
                q_value=q_value,
                significant=sig,
                message=message,
                baseline_gm_ms=math.exp(float(p.log_base.mean())),
                current_gm_ms=math.exp(float(p.log_current.mean())),
            )
        )
    return out


def gate(
    current: RunResult,
    baseline: Baseline,
    options: GateOptions | None = None,
    confirmed: Collection[Key] = (),
) -> GateReport:
    """Judge every layer of `current` against `baseline`; layers on one side only are listed."""
    options = options or GateOptions()
    wanted = (lambda b: True) if options.backends is None else (lambda b: b in options.backends)
    diffs = gate_differences(current, baseline, wanted, ignore=options.ignore_env_keys)
    incomparable = bool(diffs) and not options.allow_env_change
    confirmed = set(confirmed)
    final: dict[Key, GateVerdict] = {}
    pending: list[_Pending] = []
    seen: set[Key] = set()
    order: list[Key] = []
    for result in current.layers:
        if not wanted(result.backend) or result.key in seen:
            continue
        seen.add(result.key)
        order.append(result.key)
        item = _prepare(
            result, baseline.find(result.key), options, incomparable, result.key in confirmed
        )
        if isinstance(item, _Pending):
            pending.append(item)
        else:
            final[result.key] = item
    for v in _finish(pending, options):
        final[v.key] = v
    for entry in baseline.entries:
        if wanted(entry.backend) and entry.key not in final:
            order.append(entry.key)
            final[entry.key] = GateVerdict(
                *entry.key,
                Verdict.MISSING,
                baseline_ms=entry.median_ms,
                message="in the baseline but not in this run",
            )
    notes = []
    short = [v for v in final.values() if v.too_few_rounds]
    if short:
        notes.append(
            f"{len(short)} layer(s) not judged: a verdict needs {MIN_ROUNDS}+ timing rounds "
            f"on each side (--quick times 2); time the run and the baseline with --rounds "
            f"{MIN_ROUNDS} or more"
        )
    incomplete = incomplete_reason(current)
    if incomplete:
        notes.append(incomplete)
    if baseline.source == "run" and not baseline.complete:
        notes.append("the baseline run is incomplete")
    return GateReport(
        suite=current.suite,
        verdicts=tuple(final[k] for k in order),
        options=options,
        env_differences=tuple(diffs),
        incomparable=incomparable,
        baseline_path=baseline.path,
        baseline_source=baseline.source,
        notes=tuple(notes),
        incomplete=incomplete,
    )


def _settled_by_rerun(v: GateVerdict) -> bool:
    if v.confirmed:
        return False  # already timed again
    if v.too_few_rounds:  # only more rounds in this run help, not a short baseline
        return v.rounds is not None and v.rounds[0] >= MIN_ROUNDS
    if v.p_value is None:
        return False  # interpreted, or no samples: another timing says nothing more
    return v.verdict is Verdict.INCONCLUSIVE or (
        v.verdict is Verdict.REGRESSED and not v.significant
    )


def inconclusive_keys(report: GateReport) -> tuple[Key, ...]:
    """Layers a --confirm re-run (twice the rounds, MIN_ROUNDS at least) may settle:
    statistically inconclusive ones, regressions not significant after BH, and layers this
    run timed with too few rounds against a baseline with enough. Layers already confirmed
    are not offered again."""
    return tuple(v.key for v in report.verdicts if _settled_by_rerun(v))


def unsettled_note(report: GateReport, offered: Collection[Key]) -> str:
    """What --confirm leaves inconclusive without timing it again, and why; or that nothing
    is inconclusive."""
    left = [v for v in report.of(Verdict.INCONCLUSIVE) if v.key not in offered]
    if not left:
        return "--confirm: nothing inconclusive"
    shown = "; ".join(f"{v.model}/{v.layer} ({v.backend}): {v.message}" for v in left[:3])
    more = f"; and {len(left) - 3} more" if len(left) > 3 else ""
    return (
        f"--confirm: {len(left)} inconclusive layer(s) that timing this run again cannot "
        f"settle, not re-timed: {shown}{more}"
    )


def merge_rerun(current: RunResult, rerun: RunResult) -> RunResult:
    """`current` with its layers replaced by the re-run's results for the same keys."""
    fresh = {r.key: r for r in rerun.layers}
    layers = tuple(fresh.pop(r.key, r) for r in current.layers)
    return replace(current, layers=layers + tuple(fresh.values()))


def confirm(
    current: RunResult, rerun: RunResult, baseline: Baseline, options: GateOptions | None = None
) -> GateReport:
    """The gate again after re-running inconclusive layers; what stays inconclusive only warns."""
    return gate(
        merge_rerun(current, rerun), baseline, options, confirmed={r.key for r in rerun.layers}
    )
