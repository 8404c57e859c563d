"""The names a row's members go by, and when a name found through part of a path may stand.

A member named by a path (`conv1/7x7_s2`, `/fc1/MatMul`) is looked up by its whole path
first, then by its leading components: `conv1`, `fc1`. A link made through such a prefix is
a guess until it proves itself, and is dropped otherwise:

- **module scope**: the rest of the path is op types (`/fc1/MatMul`, `/fc1/Add`,
  `/act/Erf`), as ONNX exporters name the nodes of a module, and that op type is arithmetic or
  shape glue (`_GLUE`: a bias Add, an attention's Reshape and Softmax), names no op, or names
  the layer's own kind; a `/conv1/Relu` is no part of a conv. In a profile whose names carry
  this model's name (`/mlp/attn/MatMul`, as `opbench reference onnxruntime` writes them),
  whatever its type: the exporter put the node inside the layer's module;
- **kind and shape or order**: the member's kind is known (the op type its path names, else
  the row's op type, or the kinds it fused, for a row of one member) and agrees with the
  layer's op; and its output shape agrees with the layer's where both are known, or, where
  either is unknown, its place in the profile agrees with the links made by whole names
  (at least one, and none crossed).

So a TensorRT row `conv1/7x7_s2 + conv1/relu_7x7` of another network is never judged against
a suite's conv `conv1` alone (the relu member is no conv, the other member names no kind),
and a DLA node fusing a hundred layers covers none of them by prefix.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opbench.match.names import (
    families_agree,
    fused_kinds,
    keys_of,
    members_of,
    op_family,
    path_of,
    qualifier_of,
    shapes_agree,
)
from opbench.match.suite_layers import SuiteLayer, SuiteModel
from opbench.reference.interface import Flag
from opbench.reference.model import ReferenceTiming

# An ONNX node named after its op type, as exporters name the nodes of a module: "MatMul",
# "Softmax_1", "MatMulAddFusion". Descriptive names ("7x7_s2", "relu_7x7", "norm1") are not.
_OP_NODE = re.compile(r"^[A-Z][A-Za-z0-9]*(?:_\d+)?$")
_LEADING_WORD = re.compile(r"^[A-Za-z]+")
# ONNX Runtime names a node it rewrote after its output value: "<node>_output_0" as exporters
# name values, "_nchwc" for its blocked-layout kernels ("/conv1/Relu_output_0_nchwc").
_renamed_tail = re.compile(r"(_output_\d+)?(_nchwc)?$")
# Op types exporters emit inside any module, whatever the module computes: arithmetic and
# shape glue (a linear's bias Add, an attention's Reshape, Transpose, MatMul and Softmax, a
# norm's Pow and ReduceMean). A node of these types under a layer's scope is part of that
# layer, even where the type names an op of its own (`add`, `transpose`, `softmax`).
_GLUE = frozenset(
    """add sub mul div pow sqrt reciprocal neg exp log erf tanh where cast reshape transpose
    squeeze unsqueeze concat split slice gather expand shape constant identity reducemean
    reducesum reducemax matmul softmax trilu""".split()
)


@dataclass(frozen=True)
class Member:
    """One member of a row, as matching looks it up.

    path: its path with this model's qualifier removed; keys: candidate layer names, most
    specific first; rests: for each key, the path components after it (() for a whole name);
    qualified: the path carried this model's name; index: its place among the row's members.
    """

    path: tuple[str, ...]
    keys: tuple[str, ...]
    rests: tuple[tuple[str, ...], ...]
    qualified: bool
    index: int = 0

    def rest_of(self, key: str) -> tuple[str, ...]:
        return self.rests[self.keys.index(key)]


def _keys(path: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    keys = keys_of(path)
    return keys, tuple(path[len(path) - i :] for i in range(len(keys)))


def row_members(
    row: ReferenceTiming, model: SuiteModel, others: Sequence[SuiteModel]
) -> tuple[list[Member], bool]:
    """The members of a row this model may claim, and whether any was another model's."""
    members: list[Member] = []
    foreign = False
    for index, name in enumerate(members_of(row)):
        path = path_of(name)
        owner = qualifier_of(path, [model, *others])
        if owner is not None and owner.name != model.name:
            foreign = True
            continue
        keys, rests = _keys(path)
        if owner is not None:
            # "/attn/qkv/MatMul" may be model attn's layer qkv, or a layer named attn: try both
            inner_keys, inner_rests = _keys(path[1:])
            keys, rests = inner_keys + keys, inner_rests + rests
        members.append(Member(path, keys, rests, owner is not None, index))
    return members, foreign


def member_kind(row: ReferenceTiming, rest: Sequence[str], alone: bool) -> str | None:
    """The op family a member is: the last op type named in the part of its path after the
    layer's name (never the layer's name itself: `conv1` proves nothing about `conv1/x`),
    else (for a row of one member) the row's op type or first fused kind; None when unknown."""
    for part in reversed(rest):
        word = _LEADING_WORD.match(part)
        family = op_family(part) or (op_family(word.group()) if word else None)
        if family is not None:
            return family
    if not alone:
        return None
    return op_family(row.raw_type) or next(
        (f for f in map(op_family, fused_kinds(row)) if f is not None), None
    )


def _kinds_of_row(row: ReferenceTiming) -> set[str]:
    kinds = {op_family(row.raw_type), *map(op_family, fused_kinds(row))}
    return {k for k in kinds if k is not None}


@dataclass(frozen=True)
class PrefixLink:
    """A link found through part of a member's path, waiting for its proof."""

    row: int
    layer: str
    source: str
    member: Member
    rest: tuple[str, ...]
    alone: bool  # the member is its row's only one


def proven(
    link: PrefixLink,
    rows: Sequence[ReferenceTiming],
    model: SuiteModel,
    anchors: Iterable[tuple[int, int]],
) -> bool:
    """Whether a prefix link stands (see the module docstring). anchors: (row, layer index)
    of the links made by whole names."""
    row = rows[link.row]
    layer = _layer(model, link.layer)
    rest = tuple(_renamed_tail.sub("", part) for part in link.rest)
    kind = member_kind(row, rest, link.alone)
    if all(_OP_NODE.match(part) for part in rest):
        glue = _op_type(rest[-1]).casefold() in _GLUE
        if link.member.qualified or glue or kind is None or families_agree(kind, layer.op):
            return True
    kinds = {kind} if kind is not None else set()
    if link.alone:
        kinds |= _kinds_of_row(row)  # a fused Conv+Relu row also agrees with its relu
    if not any(families_agree(k, layer.op) for k in kinds):
        return False
    if row.output_shape and layer.output_shape:
        return shapes_agree(row.output_shape, layer.output_shape, Flag.BLOCKED_LAYOUT in row.flags)
    return _in_order(link.row, layer.index, list(anchors))


def _in_order(row: int, index: int, anchors: list[tuple[int, int]]) -> bool:
    if not anchors:
        return False
    return not any((r < row and i > index) or (r > row and i < index) for r, i in anchors)


def _op_type(node: str) -> str:
    """ "Softmax_1" → "Softmax": the op type an exporter named a node after."""
    return re.sub(r"_\d+$", "", node)


def _layer(model: SuiteModel, name: str) -> SuiteLayer:
    return next(layer for layer in model.layers if layer.name == name)
