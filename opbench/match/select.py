"""Which models of the run a profile is matched against, and the checks on the result that
make it bad input: nothing matched, or one row counted in two models.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from opbench.errors import InputError
from opbench.match.links import ModelMatch, match_model, matchable
from opbench.match.namemap import NameMap
from opbench.match.names import fold, members_of, path_of, qualifier_of, squash
from opbench.match.suite_layers import SuiteModel
from opbench.reference.model import ReferenceTiming, RefStatus

LISTED = 6  # names shown per side in the "nothing matched" line
PAIRED = 400  # names per side looked at for the closest pairs (a huge profile stays fast)


@dataclass(frozen=True)
class MatchResult:
    """The models compared and how they were chosen.

    how: "--model", "only model", "qualified names" (row names carry model names) or
        "best match".
    notes: sentences for the report (which model was picked and why, what was left out).
    """

    matches: tuple[ModelMatch, ...]
    how: str
    notes: tuple[str, ...] = ()


def select_model(models: Sequence[SuiteModel], wanted: str) -> SuiteModel:
    """--model: an instance name, or a base name with a single instance."""
    for model in models:
        if model.name == wanted:
            return model
    hits = [m for m in models if m.base_name == wanted or fold(m.name) == fold(wanted)]
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(m.name for m in models)
    if hits:
        raise InputError(f"--model {wanted!r} names several instances; choose one of: {known}")
    raise InputError(f"--model {wanted!r} is not in the run (models: {known})")


def match_reference(
    models: Sequence[SuiteModel],
    rows: Sequence[ReferenceTiming],
    name_map: NameMap | None = None,
    model: str | None = None,
    partial: bool = False,
) -> MatchResult:
    """Match a profile against the run's models: the one asked for, the only one, every model
    its names are qualified with, or the one whose layers match best (ties are bad input).
    Bad input too (exit 2): nothing matched, or only guesses by position; and, unless
    `partial` (the suite times part of the profiled model), most timed rows matching no layer
    of the run: a profile of another model."""
    if not models:
        raise InputError("the run holds no layer results to compare")
    result = _choose(models, rows, name_map, model)
    if not any(mm.confirmed() for mm in result.matches):
        chosen = {mm.model for mm in result.matches}
        raise InputError(nothing_matched([m for m in models if m.name in chosen], rows))
    _check_no_double_count(result, rows)
    if not partial:
        _check_mostly_matched(models, rows, result, name_map)
    return result


def _check_mostly_matched(
    models: Sequence[SuiteModel],
    rows: Sequence[ReferenceTiming],
    result: MatchResult,
    name_map: NameMap | None,
) -> None:
    """Most timed rows matching no layer of the run (nor named after one of its models) is a
    profile of another model, whatever few names happen to agree: exit 2."""
    ignored = set().union(*(mm.ignored for mm in result.matches))
    counted = [p for p, r in enumerate(rows) if r.status == RefStatus.TIMED and p not in ignored]
    known = set().union(*(mm.rows for mm in result.matches))
    known |= {p for p in counted if _qualified(rows[p], models)}

    def mostly(known: set[int]) -> bool:
        return 2 * len(known.intersection(counted)) >= len(counted)

    if mostly(known):
        return
    compared = {mm.model for mm in result.matches}
    for other in (m for m in models if m.name not in compared):
        known |= match_model(other, rows, models, name_map).rows
    if mostly(known):
        return
    unmatched = [rows[p].name for p in counted if p not in known]
    layers = [layer.name for m in models for layer in m.layers]
    pairs = closest_pairs(layers, unmatched)
    closest = ", ".join(f"{a} ~ {b}" for a, b in pairs) if pairs else "none alike"
    raise InputError(
        f"{len(unmatched)} of {len(counted)} timed reference rows match no layer of the run: "
        f"a profile of another model? The run's layers are {_listed(layers)}; the rows that "
        f"match nothing are {_listed(unmatched)}; closest pairs: {closest}. If the suite times "
        "part of this model, pass --partial; else name the rows with reference_name or --map"
    )


def _qualified(row: ReferenceTiming, models: Sequence[SuiteModel]) -> bool:
    return any(qualifier_of(path_of(member), models) is not None for member in members_of(row))


def _choose(
    models: Sequence[SuiteModel],
    rows: Sequence[ReferenceTiming],
    name_map: NameMap | None,
    model: str | None,
) -> MatchResult:
    if model is not None:
        chosen = select_model(models, model)
        return MatchResult((match_model(chosen, rows, models, name_map),), "--model")
    if len(models) == 1:
        return MatchResult((match_model(models[0], rows, models, name_map),), "only model")
    all_matches = [match_model(m, rows, models, name_map) for m in models]
    qualified = _qualified_models(models, rows)
    if qualified:
        picked = tuple(mm for mm in all_matches if mm.model in qualified)
        note = f"reference layer names carry model names: compared {', '.join(qualified)}"
        left = [m.name for m in models if m.name not in qualified]
        notes = (note,) + ((f"models with no reference layers: {', '.join(left)}",) if left else ())
        return MatchResult(picked, "qualified names", notes)
    scores = sorted(((mm.score(rows), i) for i, mm in enumerate(all_matches)), reverse=True)
    top, top_index = scores[0]
    if top == 0:
        raise InputError(nothing_matched(models, rows) + "; or choose a model with --model")
    tied = [all_matches[i].model for s, i in scores if s == top]
    if len(tied) > 1:
        raise InputError(
            f"the reference matches models {', '.join(tied)} equally well ({top} layers); choose one with --model"
        )
    best = all_matches[top_index]
    timed = sum(1 for r in rows if r.status == RefStatus.TIMED)
    note = f"compared model {best.model}: its layers match best ({top} of {timed} timed reference layers)"
    return MatchResult((best,), "best match", (note,))


def _qualified_models(models: Sequence[SuiteModel], rows: Sequence[ReferenceTiming]) -> list[str]:
    named: dict[str, None] = {}
    for row in rows:
        if not matchable(row):
            continue
        for member in members_of(row):
            owner = qualifier_of(path_of(member), models)
            if owner is not None:
                named.setdefault(owner.name, None)
    return [m.name for m in models if m.name in named]


def nothing_matched(models: Sequence[SuiteModel], rows: Sequence[ReferenceTiming]) -> str:
    """One line: what the run's layers are called, what the file's rows are called, and the
    closest pairs, so that a wrong file or a missing --map is plain at a glance."""
    layers = [layer.name for m in models for layer in m.layers]
    names = [r.name for r in rows if r.status == RefStatus.TIMED] or [r.name for r in rows]
    pairs = closest_pairs(layers, names)
    closest = ", ".join(f"{a} ~ {b}" for a, b in pairs) if pairs else "none alike"
    return (
        f"no reference row matches a layer of the run (is it a profile of this model?): "
        f"the run's layers are {_listed(layers)}; the file's rows are {_listed(names)}; "
        f"closest pairs: {closest}; name them with reference_name in the suite or --map"
    )


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f", … ({len(names)} in all)" if len(names) > LISTED else "")


def closest_pairs(
    layers: Sequence[str], names: Sequence[str], count: int = 3
) -> list[tuple[str, str]]:
    """The most alike (layer, row name) pairs, by similarity of their squashed forms; never a
    pair of equal names (a hint that says "conv1 ~ conv1" explains nothing)."""
    scored = []
    for layer in list(dict.fromkeys(layers))[:PAIRED]:
        for name in list(dict.fromkeys(names))[:PAIRED]:
            if fold(layer) == fold(name):
                continue
            ratio = difflib.SequenceMatcher(None, squash(layer), squash(name)).ratio()
            scored.append((ratio, layer, name))
    scored.sort(key=lambda item: -item[0])
    return [(layer, name) for ratio, layer, name in scored[:count] if ratio > 0.3]


def _check_no_double_count(matched: MatchResult, rows: Sequence[ReferenceTiming]) -> None:
    """A reference row linked in two models would count its time twice: bad input."""
    seen: dict[int, str] = {}
    for mm in matched.matches:
        for pos in sorted(mm.rows):
            if pos in seen and seen[pos] != mm.model:
                raise InputError(
                    f"reference layer {rows[pos].name!r} matches layers of models {seen[pos]} and {mm.model}: "
                    "qualify it in --map as model/layer, or compare one model with --model"
                )
            seen[pos] = mm.model
