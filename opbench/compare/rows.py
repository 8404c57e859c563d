"""One comparison row per group of the match stage, and one MISSING row per suite layer that
no reference row covers. Each row holds every backend's verdict (opbench/compare/verdict.py).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from opbench.compare.model import QUANT_PEERS, BackendTiming, ComparisonRow, Interval, Verdict
from opbench.compare.verdict import (
    RowContext,
    backend_timing,
    group_reference,
)
from opbench.match.groups import Group, ModelGroups
from opbench.match.suite_layers import SuiteModel
from opbench.reference.interface import SPIKE_RATIO, Flag
from opbench.reference.model import ReferenceProfile, ReferenceTiming, TimeKind
from opbench.reference.prefix_graph import describe
from opbench.reference.sas_prefix import NOISE_FRACTION
from opbench.results.model import LayerResult, RunResult
from opbench.targets import DEFAULT_TARGET_SPEEDUP

TORCH = "torch"
#: The PyTorch peers of a whole model: the suite's torch backends, and a library's own module
#: (torchvision, transformers) timed beside them, as `library:<name>` (bench/library_peers.py).
TORCH_PEERS = ("torch", "torch-compile", "torch-compile-max-autotune")
LIBRARY = "library:"


def is_torch_peer(backend: str) -> bool:
    return backend in TORCH_PEERS or backend.startswith(LIBRARY)


@dataclass(frozen=True)
class RowOptions:
    """The compare options rows depend on. backends: primary first."""

    backends: tuple[str, ...]
    target: float | None = None
    gpu_reference: bool = False


def results_by_backend(run: RunResult, model: str) -> dict[str, list[LayerResult]]:
    out: dict[str, list[LayerResult]] = {}
    for result in run.layers:
        if result.model == model:
            out.setdefault(result.backend, []).append(result)
    return out


def covering(results: Sequence[LayerResult], layers: Iterable[str]) -> list[LayerResult]:
    wanted = set(layers)
    return [r for r in results if wanted.intersection(r.members)]


def model_rows(
    run: RunResult,
    model: SuiteModel,
    grouped: ModelGroups,
    profile: ReferenceProfile,
    options: RowOptions,
) -> list[ComparisonRow]:
    """The model's rows in execution order: its groups, and its MISSING layers."""
    by_backend = results_by_backend(run, model.name)
    rows = [_group_row(g, model, profile, by_backend, options) for g in grouped.groups]
    rows += [_missing_row(name, model, by_backend, options) for name in grouped.missing]
    order = {layer.name: layer.index for layer in model.layers}
    rows.sort(key=lambda row: order.get(row.layers[0], 1 << 30))
    return rows


def _target(
    layers: Sequence[str], by_backend: dict[str, list[LayerResult]], options: RowOptions
) -> float:
    if options.target is not None:
        return options.target
    pool = covering(by_backend.get(options.backends[0], []), layers) or covering(
        [r for rs in by_backend.values() for r in rs], layers
    )
    return max((r.target_speedup for r in pool), default=DEFAULT_TARGET_SPEEDUP)


def _group_row(
    group: Group,
    model: SuiteModel,
    profile: ReferenceProfile,
    by_backend: dict[str, list[LayerResult]],
    options: RowOptions,
) -> ComparisonRow:
    ref_rows = [profile.layers[p] for p in group.rows]
    reference = group_reference(ref_rows)
    context = RowContext(
        reference=reference,
        target=_target(group.layers, by_backend, options),
        doubt=group.ambiguity,
        noise=prefix_noise(profile, group.rows, reference),
        gpu_reference=options.gpu_reference,
    )
    timings = tuple(
        backend_timing(b, group.layers, covering(by_backend.get(b, []), group.layers), context)
        for b in options.backends
    )
    spikes = spike_note(ref_rows)
    if spikes is not None:
        timings = tuple(
            replace(t, reason=f"{t.reason}; {spikes}" if t.reason else spikes) for t in timings
        )
    row = _row(model, group.layers, by_backend, options, timings, context.target, reference)
    return replace(
        row,
        reference_names=tuple(r.name for r in ref_rows),
        reference_rows=group.rows,
        sources=group.sources,
        ambiguity=group.ambiguity,
    )


def spike_note(ref_rows: Sequence[ReferenceTiming]) -> str | None:
    """A reference row whose slowest run took over SPIKE_RATIO medians (its reader flags it):
    the median is what is compared, but the reference was not steady."""
    spiky = [r for r in ref_rows if Flag.SPIKES in r.flags and r.median_ms and r.max_ms]
    if not spiky:
        return None
    worst = max(spiky, key=lambda r: (r.max_ms or 0.0) / (r.median_ms or 1.0))
    ratio = (worst.max_ms or 0.0) / (worst.median_ms or 1.0)
    return (
        f"reference spikes: {worst.name!r} took up to {ratio:.0f}× its median in one run "
        f"(over {SPIKE_RATIO:g}×: the reference was not steady; its median is used)"
    )


def _missing_row(
    layer: str,
    model: SuiteModel,
    by_backend: dict[str, list[LayerResult]],
    options: RowOptions,
) -> ComparisonRow:
    """A suite layer no reference row covers: its times, and the verdict MISSING."""
    target = _target((layer,), by_backend, options)
    context = RowContext(reference=None, target=target)
    timings = tuple(
        _missing(backend_timing(b, (layer,), covering(by_backend.get(b, []), (layer,)), context))
        for b in options.backends
    )
    return _row(model, (layer,), by_backend, options, timings, target, None)


def _missing(timing: BackendTiming) -> BackendTiming:
    """MISSING, unless the layer crashed (ERROR) or failed its check (FAIL): those say more,
    and set their exit code, whether or not the reference has the layer."""
    if timing.verdict == Verdict.ERROR or timing.correct is False:
        return timing
    return replace(timing, verdict=Verdict.MISSING, reason="no reference row covers this layer")


def _row(
    model: SuiteModel,
    layers: tuple[str, ...],
    by_backend: dict[str, list[LayerResult]],
    options: RowOptions,
    timings: tuple[BackendTiming, ...],
    target: float,
    reference: Interval | None,
) -> ComparisonRow:
    index = {layer.name: layer for layer in model.layers}
    described = covering(by_backend.get(options.backends[0], []), layers) or covering(
        [r for rs in by_backend.values() for r in rs], layers
    )
    first = next((r for r in described if layers[0] in r.members), None)
    last = next((r for r in described if layers[-1] in r.members), None)
    primary = timings[0]
    return ComparisonRow(
        model=model.name,
        layers=layers,
        ops=tuple((index[n].op if n in index else None) or "?" for n in layers),
        reference_names=(),
        reference_rows=(),
        sources=(),
        reference=reference,
        target=target,
        timings=timings,
        dtype=first.dtype if first else "",
        quant=first.quant if first else "none",
        input_shape=tuple(first.input_shape) if first else (),
        output_shape=tuple(last.output_shape) if last else (),
        flops=sum(r.flops for r in described),
        bytes=sum(r.bytes for r in described),
        vs_torch=_speedup_over(TORCH, layers, by_backend, primary),
        **_vs_peers(first.quant if first else None, layers, by_backend, primary),
    )


def _vs_peers(
    quant: str | None,
    layers: Sequence[str],
    by_backend: dict[str, list[LayerResult]],
    primary: BackendTiming,
) -> dict[str, float | None]:
    """The ComparisonRow fields of the quantized-linear peers (vs_torch_int8, vs_torch_fp8):
    the speed-up over the peer of the row's quant, None for the others. A fused group (norm +
    fp8 linear, linear + add) is never fully covered by the peer, which ran the linear alone,
    so _speedup_over leaves it None rather than set the group against part of its work."""
    return {
        peer.field: (
            _speedup_over(peer.backend, layers, by_backend, primary)
            if quant == peer.quant
            else None
        )
        for peer in QUANT_PEERS
    }


def _speedup_over(
    baseline: str,
    layers: Sequence[str],
    by_backend: dict[str, list[LayerResult]],
    primary: BackendTiming,
) -> float | None:
    """The primary backend's speed-up over `baseline` on the same layers (None when either
    has no measured time, or the primary is the baseline)."""
    if primary.backend == baseline or primary.time is None or primary.interpreted:
        return None
    results = covering(by_backend.get(baseline, []), layers)
    covered = {m for r in results for m in r.members}
    if not results or not set(layers) <= covered:
        return None
    if any(not r.ran or r.median_ms is None or r.interpreted for r in results):
        return None
    total = sum(r.median_ms or 0.0 for r in results)
    return total / primary.time.value if primary.time.value > 0 else None


def prefix_noise(
    profile: ReferenceProfile, positions: Sequence[int], reference: Interval | None
) -> str | None:
    """Why a row's reference time, made of prefix differences, cannot be told from zero or is
    inflated; None when it can be trusted (or is no prefix difference).

    - the interval of the summed differences reaches zero (a spread is known), or, with no
      spread, the sum is not above zero;
    - a difference the reader flagged negative or below its noise (with no spread: under 2%
      of its prefix time);
    - a difference taken from a prefix that fell below the one before it (that prefix is too
      low, so the difference is inflated), unless that prefix's row is in the same group.
    """
    derived = [p for p in positions if profile.layers[p].time_kind == TimeKind.DERIVED]
    if not derived or reference is None:
        return None
    source = profile.source
    spread = all(profile.layers[p].noise_ms is not None for p in derived)
    within = "within the noise of the cut timings it combines"
    if spread and reference.lo <= 0:
        return f"{within}: {source} {_pairs(profile, derived)}"
    if not spread and reference.value <= 0:
        return (
            f"the prefix difference is not above zero and {source} gives no spread "
            f"(no interval available): {_pairs(profile, derived)}"
        )
    group = set(positions)
    noisy = [p for p in derived if _flagged(profile.layers[p])]
    if noisy:
        why = "" if spread else f" (under {NOISE_FRACTION:.0%} of its prefix time; no spread given)"
        return f"{within}{why}: {source} {_pairs(profile, noisy)}"
    inflated = [
        (q, p)
        for p in derived
        for q in _subtracted(profile, p)
        if q not in group and Flag.NEGATIVE in profile.layers[q].flags
    ]
    if inflated:
        q, p = inflated[0]
        return (
            f"taken from a prefix that fell below the one before it ({source} row "
            f"{_named(profile.layers[q])} is faster than the prefix before it): the difference "
            f"for {_named(profile.layers[p])} is inflated"
        )
    return None


def _flagged(row: ReferenceTiming) -> bool:
    return bool({Flag.NEGATIVE, Flag.BELOW_NOISE} & set(row.flags))


def _subtracted(profile: ReferenceProfile, pos: int) -> list[int]:
    """The rows whose cut time this row's difference subtracts: the rows of the cuts its terms
    take away (a row of several layers stands for the cut of its last one)."""
    taken = {name for name, c in profile.layers[pos].derived_from if c < 0}
    return [
        i
        for i, other in enumerate(profile.layers)
        if other.time_kind == TimeKind.DERIVED and other.name.split(" + ")[-1] in taken
    ]


def _named(row: ReferenceTiming) -> str:
    return f"{row.name!r}" + (f" (line {row.line})" if row.line is not None else "")


def _pairs(profile: ReferenceProfile, positions: Sequence[int]) -> str:
    return "; ".join(_prefix_pair(profile, p) for p in positions)


def _prefix_pair(profile: ReferenceProfile, pos: int) -> str:
    """The row and the cuts its time combines (docs/sas.md)."""
    row = profile.layers[pos]
    if not row.derived_from:  # a model input's baseline: its own cut
        return f"row {_named(row)}"
    return f"{_named(row)} = {describe(row.derived_from)}"


def model_layer_results(run: RunResult, model: str, backend: str) -> list[LayerResult]:
    """Each result of one backend on one model once (a fused result is one result)."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for result in run.layers:
        if result.model == model and result.backend == backend and result.key not in seen:
            seen.add(result.key)
            out.append(result)
    return out
