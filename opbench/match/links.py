"""Pair the rows of a reference profile with the layers of a suite model.

A link says "reference row r accounts for (part of) suite layer L". Links come from four
sources, tried in this order; a row linked by an earlier source is not looked at again:

1. ``reference_name``: the suite layer names the row it stands for;
2. ``map``: a ``--map`` YAML file maps reference names to suite layers;
3. ``name``: normalised names agree (case, punctuation, ONNX paths such as
   ``/fc1/MatMul`` → ``fc1``, fused names ``a + b`` → ``a`` and ``b``); then ``fusion``: a
   row the engine fused from op kinds (ONNX Runtime ``FusedConv`` = Conv + Relu, SAS conv
   with its activation) also takes the following suite layers of those kinds;
4. ``signature``: what is left is aligned in execution order where the op type and the
   output shape agree.

Links may be many-to-one (ONNX ``/fc1/MatMul`` and ``/fc1/Add`` both belong to ``fc1``) and
one-to-many (a fused ``conv + relu`` row covers two layers); the compare stage groups them.
Rows whose path starts with a model name (``/mlp[batch=8]/fc1/MatMul``) only match that model.

Module map: names.py (normalising names and op types), namemap.py (the --map file),
suite_layers.py (the suite side), this file (the matcher and model selection).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opbench.errors import InputError
from opbench.reference.interface import Flag
from opbench.reference.model import ReferenceTiming, RefStatus
from opbench.match.namemap import NameMap
from opbench.match.names import (
    NameIndex,
    families_agree,
    fold,
    fused_kinds,
    keys_of,
    members_of,
    names_model,
    op_family,
    path_of,
    qualifier_of,
    shapes_agree,
    strip_suffix,
)
from opbench.match.suite_layers import SuiteLayer, SuiteModel


class MatchSource:
    REFERENCE_NAME = "reference_name"
    MAP = "map"
    NAME = "name"
    FUSION = "fusion"
    SIGNATURE = "signature"


@dataclass(frozen=True)
class Link:
    """Reference row (position in ReferenceProfile.layers) → suite layer, and why."""

    row: int
    layer: str
    source: str


@dataclass(frozen=True)
class ModelMatch:
    """The links of one model.

    foreign: rows qualified with another model of the run (never linked to this one).
    ignored: rows the --map file maps to nothing (the user calls them engine overhead).
    """

    model: str
    links: tuple[Link, ...]
    foreign: tuple[int, ...] = ()
    ignored: tuple[int, ...] = ()

    @property
    def rows(self) -> frozenset[int]:
        return frozenset(link.row for link in self.links)

    @property
    def layers(self) -> frozenset[str]:
        return frozenset(link.layer for link in self.links)

    def score(self, rows: Sequence[ReferenceTiming]) -> int:
        """Matched rows doing real work; how model selection compares candidate models."""
        return sum(1 for r in self.rows if rows[r].status == RefStatus.TIMED)


def _matchable(row: ReferenceTiming) -> bool:
    return row.status in (RefStatus.TIMED, RefStatus.OVERHEAD)


def _member_keys(
    row: ReferenceTiming, model: SuiteModel, others: Sequence[SuiteModel]
) -> tuple[list[tuple[str, ...]], bool]:
    """Candidate names of each member of a row, with this model's qualifier removed.

    Members qualified with another model are left out; the flag says whether any was."""
    member_keys: list[tuple[str, ...]] = []
    foreign = False
    for member in members_of(row):
        path = path_of(member)
        owner = qualifier_of(path, [model, *others])
        if owner is not None and owner.name != model.name:
            foreign = True
            continue
        # "/attn/qkv/MatMul" may be model attn's layer qkv, or a layer named attn: try both
        keys = keys_of(path[1:]) + keys_of(path) if owner is not None else keys_of(path)
        member_keys.append(keys)
    return member_keys, foreign


def match_model(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    known_models: Sequence[SuiteModel] = (),
    name_map: NameMap | None = None,
) -> ModelMatch:
    """Link the rows of a reference profile to one model's layers (see the module docstring).

    known_models: every model of the run; a row whose path is qualified with one of them
    (other than `model`) is foreign to this model and never linked to it.
    """
    others = [m for m in known_models if m.name != model.name]
    links: list[Link] = []
    foreign: list[int] = []
    ignored: list[int] = []
    # per row, the candidate names of each of its members; a member once linked is done
    candidates: dict[int, list[tuple[str, ...]]] = {}
    for pos, row in enumerate(rows):
        if not _matchable(row):
            continue
        member_keys, is_foreign = _member_keys(row, model, others)
        if is_foreign and not member_keys:
            foreign.append(pos)
        elif member_keys:
            candidates[pos] = member_keys
    done: set[tuple[int, int]] = set()

    def add(pos: int, layer: str, source: str) -> None:
        if not any(link.row == pos and link.layer == layer for link in links):
            links.append(Link(pos, layer, source))

    def open_members(pos: int) -> list[int]:
        return [i for i in range(len(candidates[pos])) if (pos, i) not in done]

    # 1. reference_name set in the suite: the whole raw name, or one member's name
    by_reference = [layer for layer in model.layers if layer.reference_name]
    for pos, member_keys in candidates.items():
        raw = fold(strip_suffix(rows[pos].name))
        for layer in by_reference:
            ref = fold(layer.reference_name or "")
            if raw == ref:
                add(pos, layer.name, MatchSource.REFERENCE_NAME)
                done.update((pos, i) for i in range(len(member_keys)))
                continue
            for i, keys in enumerate(member_keys):
                if ref in (fold(k) for k in keys):
                    add(pos, layer.name, MatchSource.REFERENCE_NAME)
                    done.add((pos, i))

    # 2. --map, on the whole row
    if name_map is not None:
        for pos, member_keys in candidates.items():
            if not open_members(pos):
                continue
            targets = name_map.lookup(rows[pos])
            if targets is None:
                continue
            if not targets and not any(link.row == pos for link in links):
                ignored.append(pos)  # mapped to nothing: the user calls it engine overhead
            for target in targets:
                if target.model is not None and not names_model(target.model, model):
                    continue
                if target.layer in model.layer_names():
                    add(pos, target.layer, MatchSource.MAP)
            done.update((pos, i) for i in range(len(member_keys)))

    # 3. normalised names, member by member (layers named by reference_name are taken)
    taken = {layer.name for layer in by_reference}
    index = NameIndex([layer.name for layer in model.layers if layer.name not in taken])
    for pos, member_keys in candidates.items():
        for i in open_members(pos):
            found = index.find(member_keys[i])
            if found is not None:
                add(pos, found, MatchSource.NAME)
                done.add((pos, i))

    # 3b. a row fusing op kinds (Conv + Relu) also covers the unlinked layers that follow its
    #     layer when their ops are those kinds, in order
    _absorb_fused(model, rows, links, add)
    _absorb_renamed(model, rows, links, add)

    # 4. execution order + op type + output shape, over what is left on both sides
    linked_rows = {link.row for link in links} | set(ignored)
    used_layers = {link.layer for link in links}
    left_rows = [
        pos
        for pos in candidates
        if pos not in linked_rows
        and rows[pos].status == RefStatus.TIMED
        and op_family(rows[pos].raw_type)
    ]
    left_layers = [layer for layer in model.layers if layer.name not in used_layers]
    for pos, layer in _align(rows, left_rows, left_layers):
        add(pos, layer.name, MatchSource.SIGNATURE)

    return ModelMatch(
        model=model.name, links=tuple(links), foreign=tuple(foreign), ignored=tuple(ignored)
    )


def _absorb_fused(
    model: SuiteModel, rows: Sequence[ReferenceTiming], links: list[Link], add
) -> None:
    linked_layers = {link.layer for link in links}
    position = {layer.name: i for i, layer in enumerate(model.layers)}
    for link in list(links):
        kinds = fused_kinds(rows[link.row])
        start = position.get(link.layer)
        if len(kinds) < 2 or start is None:
            continue
        if not families_agree(op_family(kinds[0]), model.layers[start].op):
            continue
        nxt = start + 1
        for kind in kinds[1:]:
            if nxt >= len(model.layers):
                break
            layer = model.layers[nxt]
            if layer.name in linked_layers or not families_agree(op_family(kind), layer.op):
                continue  # e.g. the bias Add of MatMul+Add is no suite layer of its own
            add(link.row, layer.name, MatchSource.FUSION)
            linked_layers.add(layer.name)
            nxt += 1


def _absorb_renamed(
    model: SuiteModel, rows: Sequence[ReferenceTiming], links: list[Link], add
) -> None:
    """ONNX Runtime names some fused nodes after the output of their last op: conv → bn → relu
    becomes one Conv node called ``<relu output>_nchwc``. When such a row (flagged by its
    reader) matched a layer of another kind, it also covers the unlinked layers before that
    layer back to the nearest one of the row's own kind."""
    linked_layers = {link.layer for link in links}
    position = {layer.name: i for i, layer in enumerate(model.layers)}
    for link in list(links):
        row = rows[link.row]
        family = op_family(row.raw_type)
        end = position.get(link.layer)
        if Flag.RENAMED_BY_ENGINE not in row.flags or family is None or end is None:
            continue
        if families_agree(family, model.layers[end].op):
            continue
        span: list[SuiteLayer] = []
        for layer in reversed(model.layers[:end]):
            if layer.name in linked_layers:
                break
            span.append(layer)
            if families_agree(family, layer.op):
                for covered in span:
                    add(link.row, covered.name, MatchSource.FUSION)
                    linked_layers.add(covered.name)
                break


def _align(
    rows: Sequence[ReferenceTiming], left_rows: Sequence[int], left_layers: Sequence[SuiteLayer]
) -> list[tuple[int, SuiteLayer]]:
    """Longest in-order alignment of rows with layers whose op family and shape agree."""
    n, m = len(left_rows), len(left_layers)
    if not n or not m:
        return []

    def agree(i: int, j: int) -> bool:
        row, layer = rows[left_rows[i]], left_layers[j]
        return families_agree(op_family(row.raw_type), layer.op) and shapes_agree(
            row.output_shape, layer.output_shape
        )

    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if agree(i, j):
                best[i][j] = 1 + best[i + 1][j + 1]
            else:
                best[i][j] = max(best[i + 1][j], best[i][j + 1])
    pairs: list[tuple[int, SuiteLayer]] = []
    i = j = 0
    while i < n and j < m:
        if agree(i, j) and best[i][j] == 1 + best[i + 1][j + 1]:
            pairs.append((left_rows[i], left_layers[j]))
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


# ---- which models to compare ------------------------------------------------------------------


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
) -> MatchResult:
    """Match a profile against the run's models: the one asked for, the only one, every model
    its names are qualified with, or the one whose layers match best (ties are bad input)."""
    if not models:
        raise InputError("the run holds no layer results to compare")
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
        known = ", ".join(m.name for m in models)
        raise InputError(
            f"no reference layer matches any model of the run; choose one with --model ({known})"
        )
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
        if not _matchable(row):
            continue
        for member in members_of(row):
            owner = qualifier_of(path_of(member), models)
            if owner is not None:
                named.setdefault(owner.name, None)
    return [m.name for m in models if m.name in named]
