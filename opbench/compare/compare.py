"""Run results against a reference profile: match, group into rows, judge, summarise.

Rows: the reference rows and suite layers linked by matching, directly or through a fused
opbench result, form one row; its reference time is the sum of its rows, each backend's time
the sum of its results (a fused result once). Verdicts: opbench/compare/verdict.py.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from opbench.compare.model import (
    DEFAULT_TARGET,
    Comparison,
    ComparisonRow,
    ModelSummary,
    Overhead,
    Peaks,
    ReferenceInfo,
    RooflinePoint,
    Unmatched,
    Verdict,
)
from opbench.compare.verdict import backend_timing, reference_interval, sum_intervals
from opbench.errors import InputError
from opbench.match.links import MatchResult, ModelMatch, match_reference
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus
from opbench.match.namemap import NameMap, check_name_map
from opbench.match.names import members_of, path_of, qualifier_of
from opbench.match.suite_layers import SuiteModel, suite_models
from opbench.results.model import LayerResult, RunResult, Status

# Shown when run.env has no measured peaks: figures measured on the H200 by this project
# (device-to-device copy) and the bf16 dense GEMM rate it reaches, labelled as nominal.
NOMINAL_H200 = Peaks(
    tflops=790.0,
    gbps=4270.0,
    label="nominal H200, not measured in this run: ~790 TFLOP/s bf16 dense, 4.27 TB/s copy",
    measured=False,
)


# ---- grouping ---------------------------------------------------------------------------------


class _Groups:
    """Union-find over reference rows ("r", pos) and suite layers ("l", name)."""

    def __init__(self) -> None:
        self.parent: dict[tuple[str, Any], tuple[str, Any]] = {}

    def find(self, node: tuple[str, Any]) -> tuple[str, Any]:
        self.parent.setdefault(node, node)
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def union(self, a: tuple[str, Any], b: tuple[str, Any]) -> None:
        self.parent[self.find(a)] = self.find(b)

    def components(self) -> list[list[tuple[str, Any]]]:
        out: dict[tuple[str, Any], list[tuple[str, Any]]] = {}
        for node in list(self.parent):
            out.setdefault(self.find(node), []).append(node)
        return list(out.values())


def _results_by_backend(run: RunResult, model: str) -> dict[str, list[LayerResult]]:
    out: dict[str, list[LayerResult]] = {}
    for result in run.layers:
        if result.model == model:
            out.setdefault(result.backend, []).append(result)
    return out


def _covering(results: Sequence[LayerResult], layers: Iterable[str]) -> list[LayerResult]:
    wanted = set(layers)
    return [r for r in results if wanted.intersection(r.members)]


def _rows_of_model(
    run: RunResult,
    model: SuiteModel,
    match: ModelMatch,
    profile: ReferenceProfile,
    backends: Sequence[str],
    target: float | None,
) -> tuple[list[ComparisonRow], list[str]]:
    """The model's rows in execution order, and its suite layers left unmatched."""
    groups = _Groups()
    sources: dict[int, set[str]] = {}
    for link in match.links:
        groups.union(("r", link.row), ("l", link.layer))
        sources.setdefault(link.row, set()).add(link.source)
    by_backend = _results_by_backend(run, model.name)
    for results in by_backend.values():
        for result in results:
            members = result.members
            groups.find(("l", members[0]))
            for member in members[1:]:
                groups.union(("l", members[0]), ("l", member))
    index = {layer.name: layer for layer in model.layers}
    rows: list[ComparisonRow] = []
    unmatched: list[str] = []
    for component in groups.components():
        layer_names = sorted(
            (name for kind, name in component if kind == "l"),
            key=lambda n: index[n].index if n in index else 1 << 30,
        )
        positions = sorted(pos for kind, pos in component if kind == "r")
        if not positions:
            unmatched.extend(layer_names)
            continue
        ref_rows = [profile.layers[p] for p in positions]
        reference = sum_intervals(
            i for i in (reference_interval(r) for r in ref_rows) if i is not None
        )
        primary_results = _covering(by_backend.get(backends[0], []), layer_names)
        row_target = target
        if row_target is None:
            pool = primary_results or _covering(
                [r for rs in by_backend.values() for r in rs], layer_names
            )
            row_target = max((r.target_speedup for r in pool), default=DEFAULT_TARGET)
        timings = tuple(
            backend_timing(
                b, layer_names, _covering(by_backend.get(b, []), layer_names), reference, row_target
            )
            for b in backends
        )
        rows.append(
            ComparisonRow(
                model=model.name,
                layers=tuple(layer_names),
                ops=tuple((index[n].op if n in index else None) or "?" for n in layer_names),
                reference_names=tuple(r.name for r in ref_rows),
                reference_rows=tuple(positions),
                sources=tuple(sorted({s for p in positions for s in sources.get(p, ())})),
                reference=reference,
                target=row_target,
                timings=timings,
            )
        )
    rows.sort(key=lambda row: index[row.layers[0]].index if row.layers[0] in index else 1 << 30)
    unmatched.sort(key=lambda n: index[n].index if n in index else 1 << 30)
    return rows, unmatched


# ---- summaries --------------------------------------------------------------------------------


def _geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _summary(
    model: str,
    backend: str,
    rows: Sequence[ComparisonRow],
    run: RunResult,
    reference_total: float | None,
    reference_total_source: str,
    overhead_ms: float,
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
        if timing.speedup is not None:
            speedups.append(timing.speedup.value)
    seen: set[tuple[str, str, str]] = set()
    opbench_total = 0.0
    for result in run.layers:
        if result.model == model and result.backend == backend and result.key not in seen:
            seen.add(result.key)
            if result.status == Status.OK and result.median_ms is not None:
                opbench_total += result.median_ms
    return ModelSummary(
        model=model,
        backend=backend,
        rows=len(rows),
        matched_reference_ms=matched_ref,
        matched_opbench_ms=matched_ob,
        total_speedup=matched_ref / matched_ob if matched_ob > 0 and matched_ref > 0 else None,
        geomean_speedup=_geomean(speedups),
        at_target=counts[Verdict.PASS],
        compared=len(rows) - counts[Verdict.ERROR],
        opbench_total_ms=opbench_total,
        reference_total_ms=reference_total,
        reference_total_source=reference_total_source,
        overhead_ms=overhead_ms,
        counts=counts,
    )


def peaks_from_env(env: Mapping[str, Any]) -> Peaks:
    """The device's peaks from run.env["peaks"] ({"tflops": .., "gbps": ..}), else nominal H200."""
    peaks = env.get("peaks") if isinstance(env, Mapping) else None
    if isinstance(peaks, Mapping):
        try:
            tflops, gbps = float(peaks["tflops"]), float(peaks["gbps"])
        except (KeyError, TypeError, ValueError):
            return NOMINAL_H200
        if tflops > 0 and gbps > 0:
            label = str(
                peaks.get("label")
                or f"{env.get('gpu') or 'device'} peaks from the run's environment"
            )
            return Peaks(tflops=tflops, gbps=gbps, label=label, measured=True)
    return NOMINAL_H200


def _time(row: ReferenceTiming) -> float:
    t = row.time_ms
    return t if t is not None and math.isfinite(t) else 0.0


# ---- the whole comparison ---------------------------------------------------------------------


def compare_run(
    run: RunResult,
    profile: ReferenceProfile,
    *,
    backend: str | None = None,
    target: float | None = None,
    model: str | None = None,
    name_map: NameMap | None = None,
    run_label: str = "",
    detected: bool = False,
    now: datetime | None = None,
) -> Comparison:
    """Compare a run with a reference profile. Bad input (unknown backend or model, an
    ambiguous reference, a map naming layers that do not exist) raises InputError."""
    if target is not None and not (target > 0 and math.isfinite(target)):
        raise InputError(f"--target must be a positive number, not {target}")
    if not run.layers:
        raise InputError("the run holds no layer results")
    backend = backend or "triton"
    if backend not in run.backends:
        raise InputError(
            f"the run has no results for backend {backend!r} (it has: {', '.join(run.backends)}); use --backend"
        )
    if not profile.layers:
        raise InputError(f"{profile.source}: the reference holds no layers")
    backends = (backend, *(b for b in run.backends if b != backend))
    models = suite_models(run.suite_spec, run.layers)
    if name_map is not None:
        check_name_map(name_map, models)
    matched: MatchResult = match_reference(models, profile.layers, name_map, model)
    by_name = {m.name: m for m in models}
    _check_no_double_count(matched, profile)

    rows: list[ComparisonRow] = []
    summaries: list[ModelSummary] = []
    unmatched: list[Unmatched] = []
    linked = set().union(*(mm.rows for mm in matched.matches))
    ignored = set().union(*(mm.ignored for mm in matched.matches))
    foreign = (
        set.intersection(*(set(mm.foreign) for mm in matched.matches)) if matched.matches else set()
    )
    single = len(matched.matches) == 1
    compared_names = [mm.model for mm in matched.matches]
    for mm in matched.matches:
        suite_model = by_name[mm.model]
        model_rows, unmatched_layers = _rows_of_model(
            run, suite_model, mm, profile, backends, target
        )
        rows.extend(model_rows)
        primary = {
            member: r
            for r in run.layers
            if r.model == mm.model and r.backend == backend
            for member in r.members
        }
        for name in unmatched_layers:
            result = primary.get(name)
            layer = next((x for x in suite_model.layers if x.name == name), None)
            unmatched.append(
                Unmatched(
                    side="suite",
                    name=name,
                    model=mm.model,
                    op=layer.op if layer else None,
                    time_ms=result.median_ms if result else None,
                )
            )
        owned = _rows_owned_by(profile.layers, suite_model, models) | mm.rows
        if single and not foreign:
            overhead_ms = sum(_time(r) for r in profile.layers if r.status == RefStatus.OVERHEAD)
            if profile.total_ms is not None:
                total, source = profile.total_ms, "the reference's own total"
            else:
                total = sum(
                    _time(r)
                    for r in profile.layers
                    if r.status in (RefStatus.TIMED, RefStatus.OVERHEAD)
                )
                source = "sum of every reference row"
        else:
            overhead_ms = sum(
                _time(profile.layers[p])
                for p in owned
                if profile.layers[p].status == RefStatus.OVERHEAD
            )
            total = sum(_time(profile.layers[p]) for p in owned)
            source = "sum of the reference rows of this model"
        summaries.append(_summary(mm.model, backend, model_rows, run, total, source, overhead_ms))

    overhead: list[Overhead] = []
    for pos, row in enumerate(profile.layers):
        if pos in linked or pos in foreign:
            continue
        owner = _owner(row, models)
        if pos in ignored:
            overhead.append(
                Overhead(row.name, "ignored by --map", pos, row.time_ms, row.raw_type, owner)
            )
        elif row.status == RefStatus.TIMED:
            unmatched.append(
                Unmatched(
                    side="reference",
                    name=row.name,
                    model=owner,
                    op=row.raw_type,
                    time_ms=row.time_ms,
                    row=pos,
                )
            )
        else:
            overhead.append(Overhead(row.name, row.status, pos, row.time_ms, row.raw_type, owner))

    if profile.total_ms is not None:
        whole_ref, whole_source = profile.total_ms, "the reference's own total"
    else:
        whole_ref = sum(
            _time(r) for r in profile.layers if r.status in (RefStatus.TIMED, RefStatus.OVERHEAD)
        )
        whole_source = "sum of every reference row"
    notes = list(matched.notes)
    if foreign:
        owners = sorted({_owner(profile.layers[p], models) or "?" for p in foreign})
        notes.append(
            f"{len(foreign)} reference layers belong to other models of the run ({', '.join(owners)}): not compared"
        )
    if not run.complete:
        notes.append(
            "the run is incomplete (interrupted or sharded): some layers may have no result"
        )
    if any(r.interpreted for r in run.layers):
        notes.append(
            "some results ran in the Triton CPU interpreter: their times are not performance figures"
        )
    roofline = tuple(
        RooflinePoint(r.model, r.layer, r.op, r.backend, r.tflops, r.gbps)
        for r in run.layers
        if r.model in compared_names and r.status == Status.OK and (r.tflops or r.gbps)
    )
    return Comparison(
        suite=run.suite,
        run=run_label,
        device=run.device,
        run_started_at=run.started_at,
        created_at=(now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        backend=backend,
        backends=backends,
        target=target,
        reference=ReferenceInfo(
            source=profile.source,
            engine=profile.engine,
            format=profile.format,
            detected=detected,
            total_ms=profile.total_ms,
            layers=len(profile.layers),
            notes=tuple(profile.notes),
        ),
        rows=tuple(rows),
        models=tuple(summaries),
        unmatched=tuple(unmatched),
        overhead=tuple(overhead),
        roofline=roofline,
        peaks=peaks_from_env(run.env),
        how_matched=matched.how,
        opbench_total_ms=sum(m.opbench_total_ms for m in summaries),
        reference_total_ms=whole_ref,
        reference_total_source=whole_source,
        notes=tuple(notes),
        env=dict(run.env),
    )


def _owner(row: ReferenceTiming, models: Sequence[SuiteModel]) -> str | None:
    for member in members_of(row):
        owner = qualifier_of(path_of(member), models)
        if owner is not None:
            return owner.name
    return None


def _rows_owned_by(
    rows: Sequence[ReferenceTiming], model: SuiteModel, models: Sequence[SuiteModel]
) -> set[int]:
    return {pos for pos, row in enumerate(rows) if _owner(row, models) == model.name}


def _check_no_double_count(matched: MatchResult, profile: ReferenceProfile) -> None:
    """A reference row linked in two models would count its time twice: bad input."""
    seen: dict[int, str] = {}
    for mm in matched.matches:
        for pos in sorted(mm.rows):
            if pos in seen and seen[pos] != mm.model:
                name = profile.layers[pos].name
                raise InputError(
                    f"reference layer {name!r} matches layers of models {seen[pos]} and {mm.model}: "
                    "qualify it in --map as model/layer, or compare one model with --model"
                )
            seen[pos] = mm.model
