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

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from opbench.errors import InputError, Location
from opbench.reference.interface import Flag
from opbench.reference.model import ReferenceTiming, RefStatus


class MatchSource:
    REFERENCE_NAME = "reference_name"
    MAP = "map"
    NAME = "name"
    FUSION = "fusion"
    SIGNATURE = "signature"


# ---- the suite side -------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteLayer:
    """One suite layer as matching sees it (op and shape feed the signature fallback)."""

    name: str
    index: int
    op: str | None = None
    output_shape: tuple[int, ...] | None = None
    reference_name: str | None = None


@dataclass(frozen=True)
class SuiteModel:
    """One model instance (e.g. ``mlp[batch=8]``) and its layers in execution order."""

    name: str
    base_name: str
    layers: tuple[SuiteLayer, ...]

    def layer_names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)


def base_name(model: str) -> str:
    """``mlp[batch=8]`` → ``mlp``."""
    return model.split("[", 1)[0]


# ---- the --map file -------------------------------------------------------------------------


@dataclass(frozen=True)
class MapTarget:
    """One right-hand side of a --map entry: a layer, optionally qualified by its model."""

    layer: str
    model: str | None = None


@dataclass(frozen=True)
class NameMap:
    """reference name → suite layers. An empty target list means "engine overhead, ignore"."""

    entries: Mapping[str, tuple[MapTarget, ...]] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)
    source: str | None = None

    def lookup(self, row: ReferenceTiming) -> tuple[MapTarget, ...] | None:
        if row.name in self.entries:
            return self.entries[row.name]
        folded = {key.casefold(): key for key in self.entries}
        for key in (row.name, *(c for keys in row_keys(row) for c in keys)):
            if key.casefold() in folded:
                return self.entries[folded[key.casefold()]]
        return None


def _split_target(text: str) -> MapTarget:
    if "/" in text:
        model, layer = text.rsplit("/", 1)
        return MapTarget(layer=layer, model=model)
    return MapTarget(layer=text)


def read_name_map(path: Path | str) -> NameMap:
    """Read a --map YAML file. Mistakes raise InputError with file, line and column."""
    path = Path(path)
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("no such map file", Location(file=file)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read map file: {exc}", Location(file=file)) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputError(
            f"YAML syntax error: {exc.problem or exc.context or 'invalid YAML'}",
            Location(
                file=file,
                line=mark.line + 1 if mark else None,
                column=mark.column + 1 if mark else None,
            ),
        ) from None
    if root is None:
        return NameMap(source=file)
    if not isinstance(root, yaml.MappingNode):
        raise InputError(
            "a map file is a mapping: reference name -> suite layer (or a list of layers)",
            Location(file=file, line=root.start_mark.line + 1, column=root.start_mark.column + 1),
        )
    entries: dict[str, tuple[MapTarget, ...]] = {}
    lines: dict[str, int] = {}
    for key_node, value_node in root.value:
        where = Location(
            file=file, line=key_node.start_mark.line + 1, column=key_node.start_mark.column + 1
        )
        if not isinstance(key_node, yaml.ScalarNode) or not key_node.value.strip():
            raise InputError("each key is a reference layer name", where)
        key = str(key_node.value)
        if key in entries:
            raise InputError(f"duplicate reference name {key!r}", where)
        value_where = Location(
            file=file, line=value_node.start_mark.line + 1, column=value_node.start_mark.column + 1
        )
        if isinstance(value_node, yaml.ScalarNode):
            values = [] if value_node.tag.endswith(":null") else [value_node.value]
        elif isinstance(value_node, yaml.SequenceNode):
            values = []
            for item in value_node.value:
                if not isinstance(item, yaml.ScalarNode) or not str(item.value).strip():
                    raise InputError(
                        f"{key!r}: each item is a suite layer name",
                        Location(
                            file=file,
                            line=item.start_mark.line + 1,
                            column=item.start_mark.column + 1,
                        ),
                    )
                values.append(item.value)
        else:
            raise InputError(f"{key!r}: map to a suite layer name or a list of names", value_where)
        if any(not str(v).strip() for v in values):
            raise InputError(f"{key!r}: empty suite layer name", value_where)
        entries[key] = tuple(_split_target(str(v).strip()) for v in values)
        lines[key] = key_node.start_mark.line + 1
    return NameMap(entries=entries, lines=lines, source=file)


def check_name_map(name_map: NameMap, models: Sequence[SuiteModel]) -> None:
    """Every layer a map names must exist in the run: a typo is bad input, not a silent miss."""
    for key, targets in name_map.entries.items():
        for target in targets:
            candidates = [
                m for m in models if target.model is None or _names_model(target.model, m)
            ]
            if target.model is not None and not candidates:
                known = ", ".join(m.name for m in models)
                raise InputError(
                    f"{key!r} maps to model {target.model!r}, which is not in the run (models: {known})",
                    Location(file=name_map.source, line=name_map.lines.get(key)),
                )
            if not any(target.layer in m.layer_names() for m in candidates):
                raise InputError(
                    f"{key!r} maps to layer {target.layer!r}, which no compared model has",
                    Location(file=name_map.source, line=name_map.lines.get(key)),
                )


# ---- names ----------------------------------------------------------------------------------

_SUFFIXES = ("_kernel_time", "_fence_before", "_fence_after")


def _strip_suffix(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _joined(name: str) -> bool:
    """TensorRT-style fused names join node names: ``a + b``, ``PWN(a, b)``."""
    return " + " in name or name.startswith("PWN(")


def members_of(row: ReferenceTiming) -> tuple[str, ...]:
    """The engine node names a row stands for: the parts of a joined name (``a + b``), else
    the row's own name. (ONNX Runtime and SAS readers list op kinds in `members`, not names:
    those are `fused_kinds`.)"""
    if _joined(row.name):
        if row.members:
            return row.members
        parts = [p.strip() for p in row.name.split(" + ")]
        return tuple(p for p in parts if p) or (row.name,)
    return (row.name,)


def fused_kinds(row: ReferenceTiming) -> tuple[str, ...]:
    """Op kinds a fused row covers, when the reader lists kinds (``("Conv", "Relu")``)."""
    return () if _joined(row.name) else row.members


def path_of(name: str) -> tuple[str, ...]:
    """``/fc1/MatMul/MatMulAddFusion_kernel_time`` → ("fc1", "MatMul", "MatMulAddFusion")."""
    name = _strip_suffix(name.strip())
    if name.startswith("PWN(") and name.endswith(")"):
        name = name[4:-1]
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


def _names_model(qualifier: str, model: SuiteModel) -> bool:
    q = fold(qualifier)
    return q in (fold(model.name), fold(model.base_name))


def qualifier_of(path: Sequence[str], models: Iterable[SuiteModel]) -> SuiteModel | None:
    """The model a path's first component names, if any (``mlp[batch=8]/fc1/MatMul``)."""
    if len(path) < 2:
        return None
    hits = [m for m in models if _names_model(path[0], m)]
    # a base name shared by several sweep instances names none of them in particular
    exact = [m for m in hits if fold(m.name) == fold(path[0])]
    if exact:
        return exact[0]
    return hits[0] if len(hits) == 1 else None


class _Index:
    """Looks suite layer names up at increasing looseness; ambiguous keys find nothing."""

    def __init__(self, names: Iterable[str]) -> None:
        self.tables: list[dict[str, str | None]] = []
        for level in _LEVELS:
            table: dict[str, str | None] = {}
            for name in names:
                key = level(name)
                table[key] = None if key in table and table[key] != name else name
            self.tables.append(table)

    def find(self, keys: Sequence[str]) -> str | None:
        for level, table in zip(_LEVELS, self.tables, strict=True):
            for key in keys:
                found = table.get(level(key))
                if found is not None:
                    return found
        return None


# ---- op types for the signature fallback ----------------------------------------------------

# Engine op/layer types (ONNX Runtime, TensorRT, OpenVINO, SAS, torch) → opbench op families.
_OP_FAMILIES: dict[str, str] = {}
for _family, _names in {
    "linear": "gemm matmul fusedmatmul fusedgemm matmulinteger qgemm matmulnbits dynamicquantizematmul "
    "fullyconnected fc matrixmultiply linear aten::linear aten::addmm aten::mm innerproduct",
    "conv2d": "conv fusedconv qlinearconv convinteger convolution convo conv2d aten::conv2d "
    "aten::convolution aten::_convolution groupconvolution",
    "maxpool2d": "maxpool maxpool2d aten::max_pool2d aten::max_pool2d_with_indices",
    "avgpool2d": "averagepool avgpool avgpool2d globalaveragepool aten::avg_pool2d",
    "pool": "pooling pool tiledpooling",
    "batchnorm2d": "batchnormalization batchnorm batchnorm2d batchnorminference scale "
    "aten::batch_norm aten::_native_batch_norm_legit_no_training",
    "layernorm": "layernormalization layernorm skiplayernormalization mvn aten::layer_norm "
    "aten::native_layer_norm",
    "rmsnorm": "simplifiedlayernormalization skipsimplifiedlayernormalization rmsnormalization "
    "rmsnorm aten::rms_norm",
    "softmax": "softmax logsoftmax aten::softmax aten::_softmax",
    "relu": "relu aten::relu",
    "gelu": "gelu biasgelu fastgelu aten::gelu",
    "silu": "silu swish aten::silu",
    "transpose": "transpose permute shuffle aten::transpose aten::permute",
    "flatten": "flatten reshape aten::flatten aten::view aten::reshape",
    "attention": "attention multiheadattention groupqueryattention mha "
    "aten::scaled_dot_product_attention aten::_scaled_dot_product_flash_attention",
}.items():
    for _name in _names.split():
        _OP_FAMILIES[_name] = _family

_SUITE_FAMILY = {"permute": "transpose"}


def op_family(raw_type: str | None) -> str | None:
    """The opbench op family of an engine op type, or None if unknown."""
    if not raw_type:
        return None
    return _OP_FAMILIES.get(raw_type.strip().casefold())


def _families_agree(row_family: str | None, suite_op: str | None) -> bool:
    if row_family is None or suite_op is None:
        return False
    suite_family = _SUITE_FAMILY.get(suite_op, suite_op)
    if row_family == "pool":
        return suite_family in ("maxpool2d", "avgpool2d")
    return row_family == suite_family


def _shapes_agree(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> bool:
    """Equal, or the same elements with the same last dim (engines flatten leading dims)."""
    if a is None or b is None or not a or not b:
        return True
    if tuple(a) == tuple(b):
        return True
    na = nb = 1
    for d in a:
        na *= d
    for d in b:
        nb *= d
    return na == nb and a[-1] == b[-1]


# ---- the matcher ----------------------------------------------------------------------------


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
        raw = fold(_strip_suffix(rows[pos].name))
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
                if target.model is not None and not _names_model(target.model, model):
                    continue
                if target.layer in model.layer_names():
                    add(pos, target.layer, MatchSource.MAP)
            done.update((pos, i) for i in range(len(member_keys)))

    # 3. normalised names, member by member (layers named by reference_name are taken)
    taken = {layer.name for layer in by_reference}
    index = _Index([layer.name for layer in model.layers if layer.name not in taken])
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
        if not _families_agree(op_family(kinds[0]), model.layers[start].op):
            continue
        nxt = start + 1
        for kind in kinds[1:]:
            if nxt >= len(model.layers):
                break
            layer = model.layers[nxt]
            if layer.name in linked_layers or not _families_agree(op_family(kind), layer.op):
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
        if _families_agree(family, model.layers[end].op):
            continue
        span: list[SuiteLayer] = []
        for layer in reversed(model.layers[:end]):
            if layer.name in linked_layers:
                break
            span.append(layer)
            if _families_agree(family, layer.op):
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
        return _families_agree(op_family(row.raw_type), layer.op) and _shapes_agree(
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


# ---- building SuiteModels from a run ----------------------------------------------------------


def suite_models(
    suite_spec: Mapping[str, Any], layer_results: Iterable[Any]
) -> tuple[SuiteModel, ...]:
    """The run's models and layers: from run.suite_spec where it lists them, completed from the
    layer results (fused results expand to their members), in execution order."""
    order: dict[str, dict[str, dict[str, Any]]] = {}
    bases: dict[str, str] = {}
    spec_models = suite_spec.get("models") if isinstance(suite_spec, Mapping) else None
    for spec_model in spec_models or ():
        if not isinstance(spec_model, Mapping) or not isinstance(spec_model.get("name"), str):
            continue
        name = spec_model["name"]
        bases[name] = str(spec_model.get("base_name") or base_name(name))
        layers = order.setdefault(name, {})
        for spec_layer in spec_model.get("layers") or ():
            if isinstance(spec_layer, Mapping) and isinstance(spec_layer.get("name"), str):
                layers.setdefault(
                    spec_layer["name"],
                    {
                        "op": spec_layer.get("op"),
                        "output_shape": spec_layer.get("output_shape"),
                        "reference_name": spec_layer.get("reference_name"),
                    },
                )
    with_results: set[str] = set()
    for result in layer_results:
        with_results.add(result.model)
        layers = order.setdefault(result.model, {})
        bases.setdefault(result.model, base_name(result.model))
        members = result.members
        for member in members:
            info = layers.setdefault(
                member, {"op": None, "output_shape": None, "reference_name": None}
            )
            if len(members) == 1:
                info["op"] = info.get("op") or result.op
                info["output_shape"] = info.get("output_shape") or result.output_shape
            info["reference_name"] = info.get("reference_name") or (
                result.reference_name if len(members) == 1 else None
            )
    models = []
    for name, layers in order.items():
        if name not in with_results:
            continue  # in the suite but not in this run (e.g. run with --model)
        models.append(
            SuiteModel(
                name=name,
                base_name=bases[name],
                layers=tuple(
                    SuiteLayer(
                        name=layer,
                        index=i,
                        op=info.get("op"),
                        output_shape=tuple(info["output_shape"])
                        if info.get("output_shape")
                        else None,
                        reference_name=info.get("reference_name"),
                    )
                    for i, (layer, info) in enumerate(layers.items())
                ),
            )
        )
    return tuple(models)
