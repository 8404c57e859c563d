"""Link the rows of a reference profile to the layers of one suite model.

A link says "reference row r accounts for (part of) suite layer L". A row is linked to every
layer it covers, whichever way that is known; the rules apply in this order (docs/compare.md
has them as a table):

1. ``reference_name``: every suite layer whose reference_name is the row's name, or the name
   of one of its members, is covered by the row;
2. ``map``: a ``--map`` YAML file maps reference names to suite layers (then rule 3 leaves
   the row alone: the map is explicit);
3. ``name``: each member of the row (its own name, the parts of a fused name ``a + b``,
   ``PWN(a, b)``, ``{a,b}``, the leading components of an ONNX path ``/fc1/MatMul``) that
   names a layer, exactly, then ignoring case, then ignoring case and punctuation. This adds
   to rule 1: a conv named by the row and a ReLU whose reference_name is the row are both
   covered. A name that fits several layers links all of them and is ambiguous;
4. ``fusion``: a row the engine fused from op kinds (ONNX Runtime ``FusedConv`` = Conv +
   Relu, SAS conv with its activation) also covers the following unlinked layers of those
   kinds; a node ONNX Runtime renamed after the last tensor it fused covers the layers back
   to one of its own kind;
5. ``signature``: what is left on both sides is aligned in execution order where the op
   type and the output shape agree.

A cover is ambiguous (the verdict is then UNCERTAIN, never PASS) when a name fits several
layers, when a fused row's kinds skip over layers (conv, batchnorm, relu under a Conv+Relu
row: one layer or three), when the fused activation was guessed (SAS ``act=AUTO``), or when
a signature link had no shape to confirm it.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    strip_suffix,
)
from opbench.match.signature import align_left_over
from opbench.match.suite_layers import SuiteLayer, SuiteModel
from opbench.reference.interface import Flag
from opbench.reference.model import ReferenceTiming, RefStatus

# How many unlinked layers a fused row's kinds may skip (conv → batchnorm → relu under a
# Conv+Relu row): more than this and the kinds are taken not to line up at all.
MAX_SKIPPED = 2


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
    ambiguities: (row, reason) for each row whose cover is not certain.
    """

    model: str
    links: tuple[Link, ...]
    foreign: tuple[int, ...] = ()
    ignored: tuple[int, ...] = ()
    ambiguities: tuple[tuple[int, str], ...] = ()

    @property
    def rows(self) -> frozenset[int]:
        return frozenset(link.row for link in self.links)

    @property
    def layers(self) -> frozenset[str]:
        return frozenset(link.layer for link in self.links)

    def score(self, rows: Sequence[ReferenceTiming]) -> int:
        """Matched rows doing real work; how model selection compares candidate models."""
        return sum(1 for r in self.rows if rows[r].status == RefStatus.TIMED)

    def confirmed(self) -> bool:
        """Some link is more than a guess by position and op type."""
        guesses = {row for row, reason in self.ambiguities if reason.startswith(GUESS)}
        return any(
            link.source != MatchSource.SIGNATURE or link.row not in guesses for link in self.links
        )


GUESS = "matched by position and op type only"


def model_layer(model: SuiteModel, name: str) -> SuiteLayer:
    return next(layer for layer in model.layers if layer.name == name)


def matchable(row: ReferenceTiming) -> bool:
    return row.status in (RefStatus.TIMED, RefStatus.OVERHEAD)


class _Links:
    """The links and ambiguities found so far for one model."""

    def __init__(self) -> None:
        self.links: list[Link] = []
        self.ambiguities: dict[int, list[str]] = {}

    def add(self, row: int, layer: str, source: str) -> None:
        if not any(link.row == row and link.layer == layer for link in self.links):
            self.links.append(Link(row, layer, source))

    def doubt(self, row: int, reason: str) -> None:
        reasons = self.ambiguities.setdefault(row, [])
        if reason not in reasons:
            reasons.append(reason)

    def layers(self) -> set[str]:
        return {link.layer for link in self.links}

    def rows(self) -> set[int]:
        return {link.row for link in self.links}


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
    foreign: list[int] = []
    candidates: dict[int, list[tuple[str, ...]]] = {}
    for pos, row in enumerate(rows):
        if not matchable(row):
            continue
        member_keys, is_foreign = _member_keys(row, model, others)
        if is_foreign and not member_keys:
            foreign.append(pos)
        elif member_keys:
            candidates[pos] = member_keys
    found = _Links()
    _by_reference_name(model, rows, candidates, found)
    mapped, ignored = _by_map(model, rows, candidates, name_map, found)
    _by_name(model, rows, candidates, mapped, found)
    _absorb_fused(model, rows, found)
    _absorb_renamed(model, rows, found)
    for pos, layer in align_left_over(
        model, rows, candidates, found.rows() | set(ignored), found.layers()
    ):
        found.add(pos, layer, MatchSource.SIGNATURE)
        if not rows[pos].output_shape or not model_layer(model, layer).output_shape:
            found.doubt(
                pos, f"{GUESS}: reference row {rows[pos].name!r} has no shape to confirm it"
            )
    return ModelMatch(
        model=model.name,
        links=tuple(found.links),
        foreign=tuple(foreign),
        ignored=tuple(ignored),
        ambiguities=tuple(
            (row, "; ".join(reasons)) for row, reasons in sorted(found.ambiguities.items())
        ),
    )


def _by_reference_name(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    candidates: dict[int, list[tuple[str, ...]]],
    found: _Links,
) -> None:
    """Rule 1: the whole raw name, or one member's name, is a layer's reference_name."""
    by_reference = [layer for layer in model.layers if layer.reference_name]
    for pos, member_keys in candidates.items():
        raw = fold(strip_suffix(rows[pos].name))
        for layer in by_reference:
            ref = fold(layer.reference_name or "")
            if raw == ref or any(ref in (fold(k) for k in keys) for keys in member_keys):
                found.add(pos, layer.name, MatchSource.REFERENCE_NAME)


def _by_map(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    candidates: dict[int, list[tuple[str, ...]]],
    name_map: NameMap | None,
    found: _Links,
) -> tuple[set[int], list[int]]:
    """Rule 2: the --map file, on the whole row. Returns the rows it decided, and those it
    maps to nothing (engine overhead by the user's word)."""
    mapped: set[int] = set()
    ignored: list[int] = []
    if name_map is None:
        return mapped, ignored
    for pos in candidates:
        targets = name_map.lookup(rows[pos])
        if targets is None:
            continue
        mapped.add(pos)
        if not targets and pos not in found.rows():
            ignored.append(pos)
        for target in targets:
            if target.model is not None and not names_model(target.model, model):
                continue
            if target.layer in model.layer_names():
                found.add(pos, target.layer, MatchSource.MAP)
    return mapped, ignored


def _by_name(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    candidates: dict[int, list[tuple[str, ...]]],
    mapped: set[int],
    found: _Links,
) -> None:
    """Rule 3: normalised names, member by member. Layers that set a reference_name are
    called that by the engine, so their own names are not looked up."""
    index = NameIndex([layer.name for layer in model.layers if not layer.reference_name])
    for pos, member_keys in candidates.items():
        if pos in mapped:
            continue
        for keys in member_keys:
            names = index.candidates(keys)
            for name in names:
                found.add(pos, name, MatchSource.NAME)
            if len(names) > 1:
                found.doubt(
                    pos, f"reference row {rows[pos].name!r} fits layers {' and '.join(names)}"
                )


def _absorb_fused(model: SuiteModel, rows: Sequence[ReferenceTiming], found: _Links) -> None:
    """Rule 4a: a row fusing op kinds (Conv + Relu) also covers the unlinked layers that follow
    its layer when their ops are those kinds, in order. Layers skipped on the way are covered
    too, and the cover is ambiguous."""
    position = {layer.name: i for i, layer in enumerate(model.layers)}
    for link in list(found.links):
        row = rows[link.row]
        kinds = fused_kinds(row)
        start = position.get(link.layer)
        if len(kinds) < 2 or start is None:
            continue
        if not families_agree(op_family(kinds[0]), model.layers[start].op):
            continue
        nxt = start + 1
        prev = model.layers[start]
        for kind in kinds[1:]:
            span = _span_to_kind(model.layers, nxt, kind, found.layers(), link.row, found, prev)
            if span is None:
                continue  # e.g. the bias Add of MatMul+Add is no suite layer of its own
            for layer in span:
                found.add(link.row, layer.name, MatchSource.FUSION)
            if len(span) > 1:
                skipped = ", ".join(layer.name for layer in span[:-1])
                found.doubt(
                    link.row,
                    f"reference row {row.name!r} fused {'+'.join(kinds)}; layers {skipped} lie "
                    f"between: it may cover {link.layer} alone or {link.layer} to {span[-1].name}",
                )
            if Flag.ACTIVATION_AUTO in row.flags:
                found.doubt(
                    link.row,
                    f"reference row {row.name!r} has act=AUTO: the fused {kind} is a guess",
                )
            nxt = position[span[-1].name] + 1
            prev = span[-1]


def _span_to_kind(
    layers: Sequence[SuiteLayer],
    start: int,
    kind: str,
    linked: set[str],
    row: int,
    found: _Links,
    prev: SuiteLayer,
) -> list[SuiteLayer] | None:
    """The layers from `start` up to the first one of `kind`, skipping at most MAX_SKIPPED
    unlinked layers, each reading the one before it (from `prev`: a fused row is a path of
    the model's graph; layers of other branches in between are not on it); None when there is
    none within reach."""
    family = op_family(kind)
    span: list[SuiteLayer] = []
    for layer in layers[start : start + MAX_SKIPPED + 1]:
        if not layer.reads(span[-1] if span else prev):
            continue
        own = any(link.row == row and link.layer == layer.name for link in found.links)
        if layer.name in linked and not own:
            return None
        span.append(layer)
        if families_agree(family, layer.op):
            return span
    return None


def _absorb_renamed(model: SuiteModel, rows: Sequence[ReferenceTiming], found: _Links) -> None:
    """Rule 4b: ONNX Runtime names some fused nodes after the output of their last op: conv →
    bn → relu becomes one Conv node called ``<relu output>_nchwc``. When such a row (flagged
    by its reader) matched a layer of another kind, it also covers the unlinked layers before
    that layer back to the nearest one of the row's own kind."""
    linked_layers = found.layers()
    position = {layer.name: i for i, layer in enumerate(model.layers)}
    for link in list(found.links):
        row = rows[link.row]
        family = op_family(row.raw_type)
        end = position.get(link.layer)
        if Flag.RENAMED_BY_ENGINE not in row.flags or family is None or end is None:
            continue
        if families_agree(family, model.layers[end].op):
            continue
        span: list[SuiteLayer] = []
        for layer in reversed(model.layers[:end]):
            if not (span[-1] if span else model.layers[end]).reads(layer):
                continue  # another branch of the graph: not on the fused path
            if layer.name in linked_layers:
                break
            span.append(layer)
            if families_agree(family, layer.op):
                for covered in span:
                    found.add(link.row, covered.name, MatchSource.FUSION)
                    linked_layers.add(covered.name)
                break
