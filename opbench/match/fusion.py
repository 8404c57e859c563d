"""Rule 4 of matching: a row the engine fused from op kinds covers the layers of those kinds
(4a: ONNX Runtime `FusedConv` = Conv + Relu, SAS conv with its activation; 4b: a node ONNX
Runtime renamed after its last tensor); and the doubt about a row holding work that no layer
of the suite stands for (a TensorRT `conv2 + relu2` against a suite with no relu2: the row's
time would be judged against the conv alone).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Sequence

from opbench.match.found import Found, MatchSource
from opbench.match.names import (
    MAYBE_ACTIVATION,
    families_agree,
    fused_kinds,
    members_of,
    op_family,
)
from opbench.match.suite_layers import SuiteLayer, SuiteModel
from opbench.reference.interface import Flag
from opbench.reference.model import ReferenceTiming

# How many unlinked layers a fused row's kinds may skip (conv → batchnorm → relu under a
# Conv+Relu row): more than this and the kinds are taken not to line up at all.
MAX_SKIPPED = 2
# A fused kind that is no suite layer of its own: the bias Add of MatMul + Add.
_PART_OF_ITS_OP = frozenset({"add"})


def absorb_fused(
    model: SuiteModel,
    rows: Sequence[ReferenceTiming],
    found: Found,
    sources: frozenset[str] | None = None,
) -> None:
    """Rule 4a: a row fusing op kinds (Conv + Relu) also covers the unlinked layers that follow
    its layer when their ops are those kinds, in order; an activation the layer computes itself
    (`activation: relu`) stands for a fused one. Layers skipped on the way are covered too, and
    the cover is ambiguous. A kind nothing stands for makes the cover ambiguous: the row's time
    holds work the run did not time. `sources`: only links made by these rules (the signature
    links, after rule 5, get the same checks)."""
    position = {layer.name: i for i, layer in enumerate(model.layers)}
    for link in list(found.links):
        if sources is not None and link.source not in sources:
            continue
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
            if _computes_itself(prev, kind):
                continue
            span = _span_to_kind(model.layers, nxt, kind, found.layers(), link.row, found, prev)
            if span is None:
                if not _kind_covered(model, found, link.row, kind):
                    found.doubt(
                        link.row,
                        f"reference row {row.name!r} fused {'+'.join(kinds)} and no {kind} "
                        f"layer follows {link.layer}: its time holds work the run did not time",
                    )
                continue
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
    found: Found,
    prev: SuiteLayer,
) -> list[SuiteLayer] | None:
    """The layers from `start` up to the first one of `kind`, skipping at most MAX_SKIPPED
    unlinked layers, each reading the one before it (from `prev`: a fused row is a path of
    the model's graph; layers of other branches in between are not on it); None when there is
    none within reach."""
    family = op_family(kind)
    span: list[SuiteLayer] = []
    # Only layers on the path count towards MAX_SKIPPED: a ResNet's downsample branch may stand
    # between bn3 and the add in the list.
    for layer in layers[start:]:
        if not layer.reads(span[-1] if span else prev):
            continue
        own = any(link.row == row and link.layer == layer.name for link in found.links)
        if layer.name in linked and not own:
            return None
        span.append(layer)
        if families_agree(family, layer.op):
            return span
        if len(span) > MAX_SKIPPED:
            return None
    return None


def absorb_renamed(model: SuiteModel, rows: Sequence[ReferenceTiming], found: Found) -> None:
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


def _computes_itself(layer: SuiteLayer, kind: str) -> bool:
    """The layer's own activation (a conv with `activation: relu6`) is the fused `kind`."""
    family = op_family(kind)
    return (
        layer.activation is not None
        and family is not None
        and families_agree(family, layer.activation)
    )


def _kind_covered(model: SuiteModel, found: Found, row: int, kind: str) -> bool:
    """A fused kind some layer of this row stands for (as its op or its own activation), or
    that is part of its op (the bias Add of MatMul + Add), or that names no op opbench knows
    (nothing to say it is missing), or an activation that may not be there (MAYBE_ACTIVATION)."""
    family = op_family(kind)
    if family is None or kind.casefold() in (*_PART_OF_ITS_OP, MAYBE_ACTIVATION):
        return True
    layers = {layer.name: layer for layer in model.layers}
    covered = [layers[link.layer] for link in found.links if link.row == row]
    return any(
        families_agree(family, layer.op) or _computes_itself(layer, kind) for layer in covered
    )


def doubt_unaccounted(model: SuiteModel, rows: Sequence[ReferenceTiming], found: Found) -> None:
    """A joined row (`conv2 + relu2`) whose members are not all stood for by a layer holds
    work the run did not time (the relu2), unless the user linked the row as a whole (a
    reference_name naming the row, a --map entry): its cover is ambiguous, never PASS."""
    for pos in sorted(found.rows() - found.whole):
        members = members_of(rows[pos])
        if len(members) < 2:
            continue
        left = [m for i, m in enumerate(members) if (pos, i) not in found.accounted]
        if left:
            found.doubt(
                pos,
                f"reference row {rows[pos].name!r} also holds {', '.join(left)}, which no layer "
                "of the suite stands for: its time holds work the run did not time",
            )
