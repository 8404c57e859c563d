"""Names and op types of reference rows, normalised for matching.

- names: engine suffixes dropped (``_kernel_time``), ONNX paths split (``/fc1/MatMul`` →
  ``fc1``), fused names split into members (``a + b``, ``PWN(a, b)``, ``{a,b}``), compared
  exactly, then ignoring case, then ignoring case and punctuation;
- op types: each engine's op or layer type mapped to the opbench op it is (from the ops' own
  `engine_names`), for the execution-order + signature fallback.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from opbench.ops.registry import engine_families, family_of
from opbench.reference.model import ReferenceTiming

if TYPE_CHECKING:
    from opbench.match.suite_layers import SuiteModel

_SUFFIXES = ("_kernel_time", "_fence_before", "_fence_after")


def strip_suffix(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _joined(name: str) -> bool:
    """Fused names that join node names: ``a + b`` (TensorRT), ``PWN(a, b)`` (TensorRT
    pointwise), ``{a,b}`` (a set of fused nodes)."""
    return " + " in name or name.startswith("PWN(") or _braced(name)


def _braced(name: str) -> bool:
    # "{ForeignNode[...]}" is a TensorRT range of nodes, not a list of names
    return name.startswith("{") and name.endswith("}") and "[" not in name


def _split_fused(name: str) -> list[str]:
    parts: list[str] = []
    for part in name.split(" + "):
        part = part.strip()
        if part.startswith("PWN(") and part.endswith(")"):
            parts += [p.strip() for p in part[4:-1].split(",")]
        elif _braced(part):
            parts += [p.strip() for p in part[1:-1].split(",")]
        else:
            parts.append(part)
    return [p for p in parts if p]


def members_of(row: ReferenceTiming) -> tuple[str, ...]:
    """The engine node names a row stands for: the parts of a joined name (``a + b``,
    ``PWN(a, b)``, ``{a,b}``), else the row's own name. (ONNX Runtime and SAS readers list op
    kinds in `members`, not names: those are `fused_kinds`.)"""
    if _joined(row.name):
        if row.members:
            return row.members
        return tuple(_split_fused(row.name)) or (row.name,)
    return (row.name,)


def fused_kinds(row: ReferenceTiming) -> tuple[str, ...]:
    """Op kinds a fused row covers, when the reader lists kinds (``("Conv", "Relu")``)."""
    return () if _joined(row.name) else row.members


def path_of(name: str) -> tuple[str, ...]:
    """``/fc1/MatMul/MatMulAddFusion_kernel_time`` → ("fc1", "MatMul", "MatMulAddFusion")."""
    name = strip_suffix(name.strip())
    if name.lower().startswith("fused "):  # ONNX Runtime's FusedGemm: "fused /head/Gemm"
        name = name[6:]
    parts = tuple(p for p in name.split("/") if p)
    return parts or (name,)


def keys_of(path: Sequence[str]) -> tuple[str, ...]:
    """Candidate layer names from a path, most specific first: a/b/c, a/b, a."""
    return tuple("/".join(path[:k]) for k in range(len(path), 0, -1))


def row_keys(row: ReferenceTiming) -> tuple[tuple[str, ...], ...]:
    """For each member of the row, its candidate names (unqualified)."""
    return tuple(keys_of(path_of(member)) for member in members_of(row))


def fold(name: str) -> str:
    return name.casefold()


def squash(name: str) -> str:
    """Case and punctuation removed: ``FFN-Up`` and ``ffn_up`` both become ``ffnup``."""
    return re.sub(r"[^0-9a-z]", "", name.casefold())


_LEVELS = (lambda s: s, fold, squash)


def names_model(qualifier: str, model: SuiteModel) -> bool:
    q = fold(qualifier)
    return q in (fold(model.name), fold(model.base_name))


def qualifier_of(path: Sequence[str], models: Iterable[SuiteModel]) -> SuiteModel | None:
    """The model a path's first component names, if any (``mlp[batch=8]/fc1/MatMul``)."""
    if len(path) < 2:
        return None
    hits = [m for m in models if names_model(path[0], m)]
    # a base name shared by several sweep instances names none of them in particular
    exact = [m for m in hits if fold(m.name) == fold(path[0])]
    if exact:
        return exact[0]
    return hits[0] if len(hits) == 1 else None


class NameIndex:
    """Looks suite layer names up at increasing looseness. A key that fits several layers at
    the first level where it fits any is ambiguous: `candidates` returns them all."""

    def __init__(self, names: Iterable[str]) -> None:
        self.tables: list[dict[str, tuple[str, ...]]] = []
        for level in _LEVELS:
            table: dict[str, tuple[str, ...]] = {}
            for name in names:
                key = level(name)
                if name not in table.get(key, ()):
                    table[key] = (*table.get(key, ()), name)
            self.tables.append(table)

    def candidates(self, keys: Sequence[str]) -> tuple[str, ...]:
        """The layers the most specific key names at the strictest level that finds any."""
        return self.lookup(keys)[1]

    def lookup(self, keys: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        """(the key that found them, the layers) as `candidates`; ("", ()) when none."""
        for level, table in zip(_LEVELS, self.tables, strict=True):
            for key in keys:
                found = table.get(level(key))
                if found:
                    return key, found
        return "", ()

    def find(self, keys: Sequence[str]) -> str | None:
        """The one layer the keys name, or None when they name none or several."""
        found = self.candidates(keys)
        return found[0] if len(found) == 1 else None


# ---- op types for the signature fallback ----------------------------------------------------

# Engine types that say "a pooling" without saying which: they agree with either pool op.
_ANY_POOL = frozenset({"pooling", "pool", "tiledpooling"})
POOL = "pool"
# A fused activation whose kind the engine does not say (ONNX Runtime's FusedConv named after
# its conv); MAYBE_ACTIVATION: one that may not be there (an NCHWc conv that adds a residual
# fuses the activation after the add only when the model has one).
ACTIVATION = "activation"
MAYBE_ACTIVATION = "activation?"
_ACTIVATION_OPS = frozenset({"relu", "relu6", "gelu", "silu", "sigmoid"})
_POOL_OPS = ("maxpool2d", "avgpool2d")


def op_family(raw_type: str | None) -> str | None:
    """The opbench op an engine op type is (each op lists its `engine_names`, ops/), "pool" for
    a pooling of unknown kind, or None if unknown."""
    if not raw_type:
        return None
    key = raw_type.strip().casefold().removesuffix("?")
    # TensorRT's layer types name the kernel library: "CaskConvolution", "CaskPooling"
    for name in dict.fromkeys((key, key.removeprefix("cask"))):
        if name in _ANY_POOL:
            return POOL
        if name == ACTIVATION:
            return ACTIVATION
        if name in engine_families():
            return engine_families()[name]
    return None


def families_agree(row_family: str | None, suite_op: str | None) -> bool:
    if row_family is None or suite_op is None:
        return False
    suite_family = family_of(suite_op)
    if row_family == POOL:
        return suite_family in _POOL_OPS
    if row_family == ACTIVATION:
        return suite_family in _ACTIVATION_OPS
    return row_family == suite_family


# Channel blocks of ONNX Runtime's NCHWc kernels (8 on AVX2, 16 on AVX-512).
_CHANNEL_BLOCKS = (8, 16)


def _padded_channels(row: tuple[int, ...], layer: tuple[int, ...]) -> bool:
    """The row's shape is the layer's with its channels (dim 1) rounded up to a whole block."""
    if len(row) != len(layer) or len(row) < 3 or row[0] != layer[0] or row[2:] != layer[2:]:
        return False
    return any(row[1] == -(-layer[1] // block) * block for block in _CHANNEL_BLOCKS)


def shapes_agree(
    a: tuple[int, ...] | None, b: tuple[int, ...] | None, blocked: bool = False
) -> bool:
    """Equal, or the same elements with the same last dim (engines flatten leading dims).
    `blocked`: `a` is an NCHWc row's shape, whose channels may be padded to a block."""
    if a is None or b is None or not a or not b:
        return True
    if tuple(a) == tuple(b):
        return True
    if blocked and _padded_channels(tuple(a), tuple(b)):
        return True
    na = nb = 1
    for d in a:
        na *= d
    for d in b:
        nb *= d
    return na == nb and a[-1] == b[-1]
