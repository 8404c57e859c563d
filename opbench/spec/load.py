"""Suite YAML → SuiteSpec, with every mistake reported as one line naming file:line,
model, layer and field.

Steps: parse YAML keeping each node's line → validate the file's structure (pydantic) →
resolve each model: defaults merged, batch sweeps expanded, op parameters checked, shapes
inferred layer by layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from opbench.backends.registry import BACKEND_NAMES
from opbench.errors import InputError, Location
from opbench.ops.base import REQUIRED, ShapeError, coerce_param
from opbench.ops.registry import OPS, suggest
from opbench.spec.model import (
    DEFAULT_TARGET_SPEEDUP,
    LayerSpec,
    ModelSpec,
    SuiteSpec,
    TimingSpec,
    loose_tolerance_problem,
)
from opbench.spec.schema import LayerModel, ModelModel, SuiteModel, TimingModel

Path_ = tuple[Any, ...]
LineMap = dict[Path_, tuple[int, int]]
MERGE_TAG = "tag:yaml.org,2002:merge"


# ---- YAML with line numbers ---------------------------------------------------------------


def _construct(
    loader: yaml.SafeLoader, node: yaml.Node, path: Path_, lines: LineMap, file: str
) -> Any:
    lines[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        merged_lines: LineMap = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                # `<<: *anchor` (or a list of anchors): keys written here win over merged ones;
                # merged keys keep the line where the anchor wrote them.
                sources = (
                    value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                )
                for source in sources:
                    source_lines: LineMap = {}
                    value = _construct(loader, source, path, source_lines, file)
                    if not isinstance(value, dict):
                        raise InputError(
                            "'<<' merges a mapping (an &anchor of one)", _loc(file, source)
                        )
                    for k, v in value.items():
                        if k not in merged:
                            merged[k] = v
                            prefix = (*path, k)
                            merged_lines.update(
                                {
                                    p: at
                                    for p, at in source_lines.items()
                                    if p[: len(prefix)] == prefix
                                }
                            )
                continue
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise InputError("mapping keys must be plain names", _loc(file, key_node))
            if key in result:
                raise InputError(f"duplicate key {key!r}", _loc(file, key_node))
            result[key] = _construct(loader, value_node, (*path, key), lines, file)
            lines[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        if merged:
            for p, at in merged_lines.items():
                if p[len(path)] not in result:
                    lines[p] = at
            result = {**{k: v for k, v in merged.items() if k not in result}, **result}
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _construct(loader, item, (*path, i), lines, file) for i, item in enumerate(node.value)
        ]
    return loader.construct_object(node, deep=True)


def _loc(file: str, node: yaml.Node) -> Location:
    return Location(file=file, line=node.start_mark.line + 1, column=node.start_mark.column + 1)


def parse_yaml(text: str, file: str) -> tuple[Any, LineMap]:
    lines: LineMap = {}
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, lines
        return _construct(loader, node, (), lines, file), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        raise InputError(
            f"YAML syntax error: {message}",
            Location(
                file=file,
                line=mark.line + 1 if mark else None,
                column=mark.column + 1 if mark else None,
            ),
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML error: {exc}", Location(file=file)) from None
    finally:
        loader.dispose()


# ---- locating problems ----------------------------------------------------------------------


class _Locator:
    """Turns a path into the data (e.g. ('models', 0, 'layers', 2, 'heads')) into a Location."""

    def __init__(self, file: str, data: Any, lines: LineMap) -> None:
        self.file, self.data, self.lines = file, data, lines

    def __call__(self, path: Path_, field: str | None = None) -> Location:
        loc = Location(file=self.file, field=field)
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                loc.line, loc.column = self.lines[path[:end]]
                break
        try:
            if len(path) >= 2 and path[0] == "models":
                model = self.data["models"][path[1]]
                loc.model = model.get("name") if isinstance(model, dict) else None
                if len(path) >= 4 and path[2] == "layers":
                    layer = model["layers"][path[3]]
                    loc.layer = layer.get("name") if isinstance(layer, dict) else None
        except (KeyError, IndexError, TypeError):
            pass
        return loc


def _data_path(data: Any, loc: Path_, kind: str) -> Path_:
    """pydantic's error location without the tags it adds for union members (e.g. the
    'int' in ('models', 0, 'batch', 'int')): only steps that exist in the data are kept."""
    path: list[Any] = []
    node = data
    for i, step in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
        elif last and kind == "missing" and isinstance(node, dict) and isinstance(step, str):
            pass  # the missing key itself: absent from the data by definition
        else:
            continue
        path.append(step)
    return tuple(path)


def _pydantic_error(
    exc: ValidationError, locate: _Locator, allowed: Mapping[Path_, Any]
) -> InputError:
    errors = [(e, _data_path(locate.data, tuple(e["loc"]), e["type"])) for e in exc.errors()]
    # The first problem; among a union's alternatives (e.g. `batch: int | list[int]`) the one that
    # got furthest into the data says the most (`batch: [1, true]`: the `true`, not "not an int").
    first = errors[0][1]
    err, path = max(
        (pair for pair in errors if pair[1][: len(first)] == first), key=lambda pair: len(pair[1])
    )
    kind = err["type"]
    keys = [p for p in path if isinstance(p, str)]
    field = keys[-1] if keys else None
    if kind == "extra_forbidden":
        parent = path[:-1]
        choices = allowed.get(_shape_of(parent), ())
        message = f"unknown field {field!r}{suggest(field or '', choices)}"
    elif kind == "missing":
        message = f"missing required field {field!r}"
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        value = err.get("input")
        message = f"must be a mapping of field: value, not a {type(value).__name__} ({value!r})"
    else:
        value = err.get("input")
        shown = f" (got {value!r})" if not isinstance(value, (dict, list)) else ""
        text = str(err["msg"])
        if text.startswith("Value error, "):
            text = text[len("Value error, ") :]
        message = f"{text}{shown}"
    return InputError(message, locate(path, field))


def _shape_of(path: Path_) -> Path_:
    return tuple("#" if isinstance(p, int) else p for p in path)


_COMMON_FIELDS = LayerModel.model_fields.keys() - {
    "name",
    "op",
    "reference_name",
    "input",
    "allow_loose_tolerance",
}
_ALLOWED: dict[Path_, Any] = {
    (): SuiteModel.model_fields.keys(),
    ("defaults",): _COMMON_FIELDS,
    ("models", "#"): ModelModel.model_fields.keys(),
    ("defaults", "timing"): TimingModel.model_fields.keys(),
    ("models", "#", "timing"): TimingModel.model_fields.keys(),
    ("models", "#", "layers", "#", "timing"): TimingModel.model_fields.keys(),
}


# ---- resolution -----------------------------------------------------------------------------


def _merge_timing(*levels: Any) -> TimingSpec:
    values = asdict(TimingSpec())
    for level in levels:
        if level is not None and level.timing is not None:
            values.update({k: v for k, v in level.timing.model_dump().items() if v is not None})
    return TimingSpec(**values)


def _pick(name: str, *levels: Any, default: Any = None) -> Any:
    for level in levels:
        if level is not None:
            value = getattr(level, name)
            if value is not None:
                return value
    return default


def _resolve_params(
    layer: LayerModel, op_name: str, path: Path_, locate: _Locator
) -> dict[str, Any]:
    op = OPS[op_name]
    given = layer.op_params()
    known = {p.name for p in op.params}
    for key in given:
        if key not in known:
            # A misspelt layer setting (e.g. `tolerence`) lands here too: suggest from both.
            layer_fields = LayerModel.model_fields.keys()
            hint = suggest(key, [*known, *layer_fields]) or (
                f" ({op_name} takes: {', '.join(sorted(known))})"
                if known
                else f" ({op_name} takes no parameters)"
            )
            raise InputError(
                f"unknown parameter {key!r} for op {op_name!r}{hint}", locate((*path, key), key)
            )
    params: dict[str, Any] = {}
    for param in op.params:
        if param.name in given:
            try:
                params[param.name] = coerce_param(param, given[param.name])
            except ValueError as exc:
                raise InputError(
                    f"{param.name} {exc}", locate((*path, param.name), param.name)
                ) from None
        elif param.required:
            raise InputError(
                f"op {op_name!r} needs parameter {param.name!r}", locate(path, param.name)
            )
        else:
            params[param.name] = param.default if param.default is not REQUIRED else None
    return params


def _resolve_model(
    suite: SuiteModel, model: ModelModel, index: int, locate: _Locator
) -> list[ModelSpec]:
    defaults = suite.defaults
    seen: set[str] = set()
    params_per_layer: list[dict[str, Any]] = []
    for i, layer in enumerate(model.layers):
        path = ("models", index, "layers", i)
        if layer.name in seen:
            raise InputError(
                f"duplicate layer name {layer.name!r}", locate((*path, "name"), "name")
            )
        seen.add(layer.name)
        if layer.op not in OPS:
            raise InputError(
                f"unknown op {layer.op!r}{suggest(layer.op, OPS)}", locate((*path, "op"), "op")
            )
        for level_path, level in (
            ((*path,), layer),
            (("models", index), model),
            (("defaults",), defaults),
        ):
            for backend in (level.backends or []) if level is not None else []:
                if backend not in BACKEND_NAMES:
                    raise InputError(
                        f"unknown backend {backend!r}{suggest(backend, BACKEND_NAMES)}; "
                        f"known: {', '.join(BACKEND_NAMES)}",
                        locate((*level_path, "backends"), "backends"),
                    )
        params_per_layer.append(_resolve_params(layer, layer.op, path, locate))

    batches = model.batch if isinstance(model.batch, list) else [model.batch]
    instances = []
    for batch in batches:
        name = f"{model.name}[batch={batch}]" if isinstance(model.batch, list) else model.name
        shape = (batch, *model.input)
        layers = []
        for i, (layer, params) in enumerate(zip(model.layers, params_per_layer, strict=True)):
            path = ("models", index, "layers", i)
            starts_chain = i == 0 or layer.input is not None
            if layer.input is not None:
                shape = (batch, *layer.input)
            op = OPS[layer.op]
            try:
                out_shape = op.infer_shape(shape, params)
            except ShapeError as exc:
                field = exc.field
                raise InputError(
                    f"{exc} (input shape {list(shape)}, batch included)",
                    locate((*path, field) if field else path, field),
                ) from None
            levels = (layer, model, defaults)
            layers.append(
                LayerSpec(
                    name=layer.name,
                    op=layer.op,
                    params=params,
                    dtype=_pick("dtype", *levels, default="float32"),
                    backends=tuple(_pick("backends", *levels, default=["torch", "triton"])),
                    tolerance=_pick("tolerance", *levels),
                    target_speedup=_pick("target_speedup", *levels, default=DEFAULT_TARGET_SPEEDUP),
                    timing=_merge_timing(defaults, model, layer),
                    input_shape=tuple(shape),
                    output_shape=tuple(out_shape),
                    starts_chain=starts_chain,
                    reference_name=layer.reference_name,
                    regression_threshold=_pick("regression_threshold", *levels),
                    line=locate(path).line,
                    allow_loose_tolerance=layer.allow_loose_tolerance,
                )
            )
            if problem := loose_tolerance_problem(layers[-1]):
                raise InputError(problem, locate((*path, "tolerance"), "tolerance"))
            shape = out_shape
        instances.append(
            ModelSpec(
                name=name,
                base_name=model.name,
                batch=batch,
                layers=tuple(layers),
                fuse=model.fuse,
                line=locate(("models", index)).line,
            )
        )
    return instances


def load_suite_text(text: str, file: str = "<suite>") -> SuiteSpec:
    data, lines = parse_yaml(text, file)
    if data is None:
        raise InputError("the suite file is empty", Location(file=file))
    if not isinstance(data, dict):
        raise InputError(
            f"a suite is a mapping with 'name' and 'models', not a {type(data).__name__}",
            Location(file=file, line=lines.get((), (None, None))[0]),
        )
    locate = _Locator(file, data, lines)
    try:
        suite = SuiteModel.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(exc, locate, _ALLOWED) from None
    seen: set[str] = set()
    models: list[ModelSpec] = []
    for index, model in enumerate(suite.models):
        if model.name in seen:
            raise InputError(
                f"duplicate model name {model.name!r}", locate(("models", index, "name"), "name")
            )
        seen.add(model.name)
        models.extend(_resolve_model(suite, model, index, locate))
    return SuiteSpec(
        name=suite.name, description=suite.description, models=tuple(models), source=file, raw=data
    )


def load_suite(path: str | Path) -> SuiteSpec:
    path = Path(path)
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("no such suite file", Location(file=file)) from None
    except IsADirectoryError:
        raise InputError("is a folder, not a suite file", Location(file=file)) from None
    except UnicodeDecodeError:
        raise InputError("not a text file (not UTF-8)", Location(file=file)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", Location(file=file)) from None
    return load_suite_text(text, file)


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively: what JSON gives back, so a run equals its re-read file."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def spec_to_dict(suite: SuiteSpec) -> dict[str, Any]:
    """The suite as loaded, as plain JSON-ready data (lists, not tuples) for run.json."""

    def layer_dict(layer: LayerSpec) -> dict[str, Any]:
        data = asdict(layer)
        data["params"] = dict(layer.params)
        return _plain(data)

    return {
        "name": suite.name,
        "description": suite.description,
        "source": suite.source,
        "models": [
            {
                "name": m.name,
                "base_name": m.base_name,
                "batch": m.batch,
                "fuse": m.fuse,
                "layers": [layer_dict(layer) for layer in m.layers],
            }
            for m in suite.models
        ],
    }
