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
   covered. A layer with a reference_name is found by its own name where the file uses the
   layers' own names more than their reference_names (an imported suite exported to SAS).
   A name that fits several layers links all of them and is ambiguous;
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

from opbench.match.found import Found, Link, MatchSource
from opbench.match.fusion import absorb_fused, absorb_renamed, doubt_unaccounted
from opbench.match.namemap import NameMap
from opbench.match.names import NameIndex, fold, names_model, strip_suffix
from opbench.match.prefix import Member, proven, row_members
from opbench.match.signature import align_left_over
from opbench.match.suite_layers import SuiteLayer, SuiteModel
from opbench.reference.interface import Flag
from opbench.reference.model import ReferenceTiming, RefStatus


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
    """Only rows doing the model's work are linked: a row its reader calls engine overhead
    (a reformat, a reorder, a copy) is never added to a layer, whatever its name."""
    return row.status == RefStatus.TIMED


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
    candidates: dict[int, list[Member]] = {}
    for pos, row in enumerate(rows):
        if not matchable(row):
            continue
        members, is_foreign = row_members(row, model, others)
        if is_foreign and not members:
            foreign.append(pos)
        elif members:
            candidates[pos] = members
    found = Found()
    _by_reference_name(model, rows, candidates, found)
    mapped, ignored = _by_map(model, rows, candidates, name_map, found)
    _by_name(model, rows, candidates, mapped, found)
    _prove_prefixes(model, rows, found)
    absorb_fused(model, rows, found)
    absorb_renamed(model, rows, found)
    for pos, layer in align_left_over(
        model, rows, candidates, found.rows() | set(ignored), found.layers()
    ):
        found.add(pos, layer, MatchSource.SIGNATURE)
        if not rows[pos].output_shape or not model_layer(model, layer).output_shape:
            found.doubt(
                pos, f"{GUESS}: reference row {rows[pos].name!r} has no shape to confirm it"
            )
    # a fused row paired by kind and shape holds what its kinds say, as one linked by name
    absorb_fused(model, rows, found, frozenset({MatchSource.SIGNATURE}))
    doubt_unaccounted(model, rows, found)
    _doubt_repeated(rows, found)
    return ModelMatch(
        model=model.name,
        links=tuple(found.links),
        foreign=tuple(foreign),
        ignored=tuple(ignored),
        ambiguities=tuple(
            (row, "; ".join(reasons)) for row, reasons in sorted(found.ambiguities.items())
        ),
    )


def _doubt_repeated(rows: Sequence[ReferenceTiming], found: Found) -> None:
    """A row its reader summed from several events of one run (Flag.REPEATED_IN_RUN: a Loop
    body, or nodes of one name the file cannot tell apart) is no single layer's time for sure."""
    for pos in sorted(found.rows()):
        if Flag.REPEATED_IN_RUN in rows[pos].flags:
            found.doubt(
                pos,
                f"reference row {rows[pos].name!r} sums several events of one run (a loop "
                "body, or nodes of one name)",
            )


def _by_reference_name(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    candidates: dict[int, list[Member]],
    found: Found,
) -> None:
    """Rule 1: the whole raw name, or one member's name, is a layer's reference_name."""
    by_reference = [layer for layer in model.layers if layer.reference_name]
    for pos, members in candidates.items():
        raw = fold(strip_suffix(rows[pos].name))
        for layer in by_reference:
            ref = fold(layer.reference_name or "")
            if raw == ref:
                found.add_whole(pos, layer.name, MatchSource.REFERENCE_NAME)
                continue
            for member in members:
                key = next((k for k in member.keys if fold(k) == ref), None)
                if key is not None:
                    found.add_named(
                        pos, layer.name, MatchSource.REFERENCE_NAME, member, key, len(members) == 1
                    )


def _by_map(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    candidates: dict[int, list[Member]],
    name_map: NameMap | None,
    found: Found,
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
                found.add_whole(pos, target.layer, MatchSource.MAP)
    return mapped, ignored


def _by_name(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    candidates: dict[int, list[Member]],
    mapped: set[int],
    found: Found,
) -> None:
    """Rule 3: normalised names, member by member. A layer that sets a reference_name is called
    that by the engine, so its own name is looked up only by a member qualified with this
    model's name (`/resnet50/layer1.0.conv3/Conv`: opbench's own export names nodes after the
    layers), or where the file names more rows by the layers' own names than by their
    reference_names: an imported suite keeps the file's node names as reference_name, and the
    SAS script and `opbench reference onnxruntime` write the layers' own names."""
    index = NameIndex([layer.name for layer in model.layers if not layer.reference_name])
    every = NameIndex([layer.name for layer in model.layers])
    if _uses_own_names(model, candidates, mapped, found, every):
        index = every
    for pos, members in candidates.items():
        if pos in mapped:
            continue
        for member in members:
            key, names = (every if member.qualified else index).lookup(member.keys)
            for name in names:
                found.add_named(pos, name, MatchSource.NAME, member, key, len(members) == 1)
            if len(names) > 1:
                found.doubt(
                    pos, f"reference row {rows[pos].name!r} fits layers {' and '.join(names)}"
                )


def _uses_own_names(
    model: SuiteModel,
    candidates: dict[int, list[Member]],
    mapped: set[int],
    found: Found,
    every: NameIndex,
) -> bool:
    """More rows name a layer that has a reference_name by its own name than rows name layers
    by their reference_names (ties keep the reference_names: the suite's explicit word)."""
    renamed = {layer.name for layer in model.layers if layer.reference_name}
    if not renamed:
        return False
    by_reference = {link.row for link in found.links if link.source == MatchSource.REFERENCE_NAME}
    by_own = 0
    for pos, members in candidates.items():
        if pos in mapped or pos in by_reference:
            continue
        if any(renamed.intersection(every.candidates(m.keys)) for m in members):
            by_own += 1
    return by_own > len(by_reference)


def _prove_prefixes(model: SuiteModel, rows: Sequence[ReferenceTiming], found: Found) -> None:
    """Links found through part of a path stand only when they prove themselves
    (opbench/match/prefix.py); the links made by whole names are the order they must keep."""
    index = {layer.name: layer.index for layer in model.layers}
    anchors = [(link.row, index[link.layer]) for link in found.links if link.layer in index]
    for link in found.pending:
        if proven(link, rows, model, anchors):
            found.prove(link)
    found.pending.clear()
