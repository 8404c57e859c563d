"""Run results against a reference profile, as a chain of named steps:

    check_inputs     bad input (unknown backend, empty run or profile, bad target): exit 2
    match            opbench/match: rows ↔ layers, which models; nothing matched: exit 2
    judge_models     per model: group → rows with verdicts → totals → model verdict
    account_rows     every reference row not compared: unmatched, or engine overhead
    gather_notes     what a reader must know (foreign rows, incomplete run, interpreter, …)

Verdicts: opbench/compare/verdict.py (rows), summary.py (models). Pure Python: no torch, no
triton.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from opbench.compare.graphs import model_graphs
from opbench.compare.model import (
    Comparison,
    ComparisonRow,
    ModelSummary,
    Overhead,
    ReferenceInfo,
    RooflinePoint,
    Unmatched,
)
from opbench.compare.peaks import peaks_from_env
from opbench.compare.rows import RowOptions, model_rows
from opbench.compare.summary import ModelContext, summarise_model
from opbench.compare.totals import model_reference_total, owner_of, whole_reference_total
from opbench.errors import InputError
from opbench.match.groups import group_model
from opbench.match.namemap import NameMap, check_name_map
from opbench.match.select import MatchResult, match_reference
from opbench.match.suite_layers import SuiteModel, suite_models
from opbench.reference.model import Device, ReferenceProfile, RefStatus
from opbench.results.model import RunResult


@dataclass(frozen=True)
class CompareOptions:
    """How to compare.

    backend: the primary (gated) backend; target: a speed-up for every row (None: the suite's).
    model: compare this model instance only. allow_missing: a model may PASS with timed
    layers no reference row covers. allow_cpu_times: judge CPU times against a GPU engine.
    partial: the suite times part of the profiled model: most rows matching nothing is no
    sign of another model's profile (and no model is judged whole).
    """

    backend: str = "triton"
    target: float | None = None
    model: str | None = None
    name_map: NameMap | None = None
    allow_missing: bool = False
    allow_cpu_times: bool = False
    partial: bool = False


def compare_run(
    run: RunResult,
    profile: ReferenceProfile,
    *,
    backend: str | None = None,
    target: float | None = None,
    model: str | None = None,
    name_map: NameMap | None = None,
    allow_missing: bool = False,
    allow_cpu_times: bool = False,
    partial: bool = False,
    run_label: str = "",
    detected: bool = False,
    now: datetime | None = None,
) -> Comparison:
    """Compare a run with a reference profile. Bad input (unknown backend or model, an
    ambiguous or unmatched reference, a map naming layers that do not exist) raises
    InputError."""
    options = CompareOptions(
        backend or "triton", target, model, name_map, allow_missing, allow_cpu_times, partial
    )
    backends = check_inputs(run, profile, options)
    models = suite_models(run.suite_spec, run.layers)
    matched = match(models, profile, options)
    unmatched, overhead = account_rows(profile, models, matched)
    rows, summaries, exempt = judge_models(
        run, profile, models, matched, backends, options, unmatched
    )
    whole_ref, whole_source = whole_reference_total(profile)
    compared = {mm.model for mm in matched.matches}
    complete = (
        all(m.complete for m in summaries)
        and not unmatched
        and not _foreign(matched)
        and not partial
    )
    return Comparison(
        suite=run.suite,
        run=run_label,
        device=run.device,
        run_started_at=run.started_at,
        created_at=(now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        backend=options.backend,
        backends=backends,
        target=options.target,
        reference=ReferenceInfo(
            source=profile.source,
            engine=profile.engine,
            format=profile.format,
            detected=detected,
            total_ms=profile.total_ms,
            layers=len(profile.layers),
            notes=tuple(profile.notes),
            device=profile.device,
        ),
        rows=tuple(rows),
        models=tuple(summaries),
        unmatched=tuple(exempt + unmatched),
        overhead=tuple(overhead),
        roofline=roofline_points(run, compared),
        peaks=peaks_from_env(run.env, run.device),
        how_matched=matched.how,
        opbench_total_ms=sum(m.opbench_total_ms for m in summaries),
        reference_total_ms=whole_ref,
        reference_total_source=whole_source,
        notes=tuple(gather_notes(run, profile, models, matched, options)),
        env=dict(run.env),
        graphs=model_graphs(run.suite_spec, compared),
        allow_missing=options.allow_missing,
        allow_cpu_times=options.allow_cpu_times,
        partial=options.partial,
        complete=complete,
    )


def check_inputs(
    run: RunResult, profile: ReferenceProfile, options: CompareOptions
) -> tuple[str, ...]:
    """The backends to show, primary first; bad input raises InputError."""
    target = options.target
    if target is not None and not (target > 0 and math.isfinite(target)):
        raise InputError(f"--target must be a positive number, not {target}")
    if not run.layers:
        raise InputError("the run holds no layer results")
    if options.backend not in run.backends:
        raise InputError(
            f"the run has no results for backend {options.backend!r} "
            f"(it has: {', '.join(run.backends)}); use --backend"
        )
    if not profile.layers:
        raise InputError(f"{profile.source}: the reference holds no layers")
    return (options.backend, *(b for b in run.backends if b != options.backend))


def match(
    models: Sequence[SuiteModel], profile: ReferenceProfile, options: CompareOptions
) -> MatchResult:
    """The match stage: a map naming unknown layers, or a profile matching nothing, is bad
    input."""
    if options.name_map is not None:
        check_name_map(options.name_map, models)
    return match_reference(models, profile.layers, options.name_map, options.model, options.partial)


def judge_models(
    run: RunResult,
    profile: ReferenceProfile,
    models: Sequence[SuiteModel],
    matched: MatchResult,
    backends: tuple[str, ...],
    options: CompareOptions,
    unmatched: Sequence[Unmatched] = (),
) -> tuple[list[ComparisonRow], list[ModelSummary], list[Unmatched]]:
    """Every compared model's rows and summary, and the layers exempt from matching.
    unmatched: the timed reference rows no layer covers (account_rows); a model's own (all of
    them when it is compared alone) keep it from being judged whole."""
    gpu_reference = profile.device == Device.GPU and not options.allow_cpu_times
    row_options = RowOptions(backends, options.target, gpu_reference)
    by_name = {m.name: m for m in models}
    single = len(matched.matches) == 1 and not _foreign(matched)
    rows: list[ComparisonRow] = []
    summaries: list[ModelSummary] = []
    exempt: list[Unmatched] = []
    for mm in matched.matches:
        model = by_name[mm.model]
        grouped = group_model(model, mm, run.layers)
        model_rows_ = model_rows(run, model, grouped, profile, row_options)
        total, source, spread, overhead_ms = model_reference_total(
            profile, model, models, mm, single
        )
        context = ModelContext(
            backend=options.backend,
            reference_total=total,
            reference_total_source=source,
            reference_interval=spread,
            overhead_ms=overhead_ms,
            target=options.target,
            gpu_reference=gpu_reference,
            allow_missing=options.allow_missing,
            layers=model.layer_names(),
            unmatched=tuple(
                u.name
                for u in unmatched
                if (single or u.model in (model.name, None)) and u.time_ms and u.time_ms > 0
            ),
            partial=options.partial,
        )
        rows += model_rows_
        summaries.append(summarise_model(model.name, model_rows_, run, context))
        ops = {layer.name: layer.op for layer in model.layers}
        exempt += [
            Unmatched("suite", name, mm.model, ops.get(name), detail="moves no data: exempt")
            for name in grouped.exempt
        ]
    return rows, summaries, exempt


def account_rows(
    profile: ReferenceProfile, models: Sequence[SuiteModel], matched: MatchResult
) -> tuple[list[Unmatched], list[Overhead]]:
    """Every reference row not in a comparison row: unmatched (a timed row nothing covers)
    or engine overhead (overhead, not run, input, or mapped to nothing)."""
    linked = set().union(*(mm.rows for mm in matched.matches))
    ignored = set().union(*(mm.ignored for mm in matched.matches))
    foreign = _foreign(matched)
    unmatched: list[Unmatched] = []
    overhead: list[Overhead] = []
    for pos, row in enumerate(profile.layers):
        if pos in linked or pos in foreign:
            continue
        owner = owner_of(row, models)
        if pos in ignored:
            overhead.append(
                Overhead(row.name, "ignored by --map", pos, row.time_ms, row.raw_type, owner)
            )
        elif row.status == RefStatus.TIMED:
            unmatched.append(
                Unmatched("reference", row.name, owner, row.raw_type, row.time_ms, pos)
            )
        else:
            overhead.append(Overhead(row.name, row.status, pos, row.time_ms, row.raw_type, owner))
    return unmatched, overhead


def _foreign(matched: MatchResult) -> set[int]:
    """Rows every compared model calls another model's."""
    if not matched.matches:
        return set()
    return set.intersection(*(set(mm.foreign) for mm in matched.matches))


def gather_notes(
    run: RunResult,
    profile: ReferenceProfile,
    models: Sequence[SuiteModel],
    matched: MatchResult,
    options: CompareOptions,
) -> list[str]:
    notes = list(matched.notes)
    foreign = _foreign(matched)
    if foreign:
        owners = sorted({owner_of(profile.layers[p], models) or "?" for p in foreign})
        notes.append(
            f"{len(foreign)} reference layers belong to other models of the run ({', '.join(owners)}): not compared"
        )
    if not run.complete:
        notes.append(
            "the run is incomplete (interrupted or sharded): some layers may have no result"
        )
    if any(r.interpreted for r in run.layers):
        notes.append(
            "some results ran in the Triton CPU interpreter: NOT-MEASURED, never judged "
            "(their times are not performance figures)"
        )
    if profile.device == Device.GPU and any(r.device == "cpu" for r in run.layers):
        notes.append(
            "CPU-timed results against a GPU engine: "
            + (
                "judged anyway (--allow-cpu-times)"
                if options.allow_cpu_times
                else "NOT-MEASURED (--allow-cpu-times judges them)"
            )
        )
    if options.allow_missing:
        notes.append("--allow-missing: models are judged even where layers are MISSING")
    return notes


def roofline_points(run: RunResult, compared: set[str]) -> tuple[RooflinePoint, ...]:
    return tuple(
        RooflinePoint(
            r.model,
            "+".join(r.members),
            r.op,
            r.backend,
            r.tflops,
            r.gbps,
            flops=r.flops,
            bytes=r.bytes,
            measured=not r.interpreted,
        )
        for r in run.layers
        if r.model in compared and r.ran and (r.tflops or r.gbps)
    )
