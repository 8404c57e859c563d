"""Resolution: a validated suite → frozen ModelSpecs (defaults merged, batch sweeps expanded, op
parameters checked, shapes inferred layer by layer).

Every problem is collected, not raised: a layer with an unknown op or a bad parameter is
reported and skipped, and the shapes after it are inferred again from the next layer that
sets its own `input`. The loader raises them all at once (spec/problems.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

from pydantic import ValidationError

from opbench.errors import InputError
from opbench.ops.base import REQUIRED, ShapeError, coerce_param
from opbench.ops.registry import OPS, suggest
from opbench.spec.model import (
    InputData,
    LayerSpec,
    ModelSpec,
    TimingSpec,
    loose_tolerance_problem,
)
from opbench.spec.problems import Locator, SuiteWarning
from opbench.spec.schema import InputModel, LayerModel, ModelModel, SuiteModel
from opbench.spec.wiring import graph_warnings, wire_model
from opbench.spec.yaml_lines import Path_
from opbench.targets import DEFAULT_TARGET_SPEEDUP
from opbench.vocabulary import unknown_backend


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


def check_backends(
    level: Any, path: Path_, locate: Locator, backend_names: Collection[str]
) -> list[InputError]:
    """Unknown backend names in one level's `backends` (defaults, a model or a layer)."""
    return [
        InputError(
            unknown_backend(backend, tuple(backend_names), suggest(backend, backend_names)),
            locate((*path, "backends"), "backends"),
        )
        for backend in ((level.backends or []) if level is not None else [])
        if backend not in backend_names
    ]


def resolve_params(
    layer: LayerModel, path: Path_, locate: Locator
) -> tuple[dict[str, Any] | None, list[InputError]]:
    """The op's parameters with defaults filled in, or None with every problem found."""
    op_name = layer.op
    op = OPS[op_name]
    given = layer.op_params()
    known = {p.name for p in op.params}
    problems: list[InputError] = []
    unknown = [key for key in given if key not in known]
    for key in unknown:
        # A misspelt layer setting (e.g. `tolerence`) lands here too: suggest from both.
        layer_fields = LayerModel.model_fields.keys()
        hint = suggest(key, [*known, *layer_fields]) or (
            f" ({op_name} takes: {', '.join(sorted(known))})"
            if known
            else f" ({op_name} takes no parameters)"
        )
        problems.append(
            InputError(
                f"unknown parameter {key!r} for op {op_name!r}{hint}", locate((*path, key), key)
            )
        )
    params: dict[str, Any] = {}
    for param in op.params:
        if param.name in given:
            try:
                params[param.name] = coerce_param(param, given[param.name])
            except ValueError as exc:
                problems.append(
                    InputError(f"{param.name} {exc}", locate((*path, param.name), param.name))
                )
        elif param.required and not unknown:
            # with an unknown key about, the "missing" one is most likely that key misspelt
            problems.append(
                InputError(
                    f"op {op_name!r} needs parameter {param.name!r}", locate(path, param.name)
                )
            )
        else:
            params[param.name] = param.default if param.default is not REQUIRED else None
    return (None if problems else params), problems


def check_layers(
    layers: Sequence[tuple[int, LayerModel]],
    model_index: int,
    locate: Locator,
    backend_names: Collection[str],
    problems: list[InputError],
) -> dict[int, dict[str, Any]]:
    """Names, ops, backends and parameters of a model's layers (index → LayerModel); returns
    the parameters of each layer that has no problem."""
    seen: set[str] = set()
    params: dict[int, dict[str, Any]] = {}
    for i, layer in layers:
        path = ("models", model_index, "layers", i)
        if layer.name in seen:
            problems.append(
                InputError(f"duplicate layer name {layer.name!r}", locate((*path, "name"), "name"))
            )
        seen.add(layer.name)
        problems += check_backends(layer, path, locate, backend_names)
        if layer.op not in OPS:
            problems.append(
                InputError(
                    f"unknown op {layer.op!r}{suggest(layer.op, OPS)}", locate((*path, "op"), "op")
                )
            )
            continue
        resolved, found = resolve_params(layer, path, locate)
        problems += found
        if resolved is not None:
            params[i] = resolved
    return params


def resolve_suite(
    suite: SuiteModel,
    locate: Locator,
    backend_names: Collection[str],
    problems: list[InputError],
    warnings: list[SuiteWarning] | None = None,
) -> list[ModelSpec]:
    """The suite's model instances; every problem appended to `problems`, and what is legal
    but most likely a mistake to `warnings`."""
    warnings = [] if warnings is None else warnings
    problems += check_backends(suite.defaults, ("defaults",), locate, backend_names)
    seen: set[str] = set()
    models: list[ModelSpec] = []
    for index, model in enumerate(suite.models):
        if model.name in seen:
            problems.append(
                InputError(
                    f"duplicate model name {model.name!r}",
                    locate(("models", index, "name"), "name"),
                )
            )
        seen.add(model.name)
        problems += check_backends(model, ("models", index), locate, backend_names)
        models += _resolve_model(suite, model, index, locate, backend_names, problems, warnings)
    return models


def _resolve_model(
    suite: SuiteModel,
    model: ModelModel,
    index: int,
    locate: Locator,
    backend_names: Collection[str],
    problems: list[InputError],
    warnings: list[SuiteWarning],
) -> list[ModelSpec]:
    found_before = len(problems)
    params_per_layer = check_layers(
        list(enumerate(model.layers)), index, locate, backend_names, problems
    )
    wiring = wire_model(model, index, locate, problems, params_per_layer)
    defaults = suite.defaults
    batches = model.batch if isinstance(model.batch, list) else [model.batch]
    shape_failed: set[int] = set()  # a sweep reports a layer's shape error once
    instances = []
    for batch in batches:
        name = f"{model.name}[batch={batch}]" if isinstance(model.batch, list) else model.name
        # The shape of every value known so far (None: unknown after a mistake upstream).
        shapes: dict[str, tuple[int, ...] | None] = {
            k: (batch, *dims) for k, dims in wiring.declared.items()
        }
        layers = []
        for i, layer in enumerate(model.layers):
            path = ("models", index, "layers", i)
            reads = wiring.reads[i]
            shapes[layer.name] = None  # until inferred below
            if i in wiring.fresh and reads is not None:
                shapes[reads[0]] = (batch, *wiring.fresh[i])
            params = params_per_layer.get(i)
            if params is None or reads is None or any(shapes.get(v) is None for v in reads):
                continue  # reported already, here or upstream
            in_shapes = tuple(shapes[v] for v in reads)
            op = OPS[layer.op]
            try:
                out_shape = op.infer_shape(op.shape_arg(in_shapes), params)
            except ShapeError as exc:
                if i not in shape_failed:
                    shape_failed.add(i)
                    problems.append(_shape_problem(exc, layer, in_shapes, path, locate))
                continue
            shapes[layer.name] = tuple(out_shape)
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
                    input_shape=in_shapes[0],
                    output_shape=tuple(out_shape),
                    reference_name=layer.reference_name,
                    regression_threshold=_pick("regression_threshold", *levels),
                    line=locate(path).line,
                    allow_loose_tolerance=layer.allow_loose_tolerance,
                    inputs=reads,
                    input_shapes=in_shapes,
                )
            )
            problem = loose_tolerance_problem(layers[-1])
            if problem and batch == batches[0]:
                # Once per layer, not once per sweep value: the tolerance is the same for all.
                problems.append(InputError(problem, locate((*path, "tolerance"), "tolerance")))
        instances.append(
            ModelSpec(
                name=name,
                base_name=model.name,
                batch=batch,
                layers=tuple(layers),
                fuse=model.fuse,
                line=locate(("models", index)).line,
                inputs=tuple((k, (batch, *dims)) for k, dims in wiring.declared.items()),
                input_data=_input_data(model),
            )
        )
        problems += _integer_problems(instances[-1], index, locate) if batch == batches[0] else []
    if (
        instances
        and len(instances[0].layers) == len(model.layers)
        and len(problems) == found_before
    ):
        # Only a model that resolved whole and sound has a graph worth warning about (a layer
        # named like the model input resolves, yet its graph cannot be built).
        warnings += graph_warnings(instances[0], model, index, locate)
    return instances


def _input_data(model: ModelModel) -> tuple[tuple[str, InputData], ...]:
    """The declared inputs written as mappings with a dtype: how their data is drawn."""
    return tuple(
        (name, InputData(value.dtype, value.high, value.padding_mask))
        for name, value in (model.inputs or {}).items()
        if isinstance(value, InputModel) and value.dtype is not None
    )


def _integer_problems(model: ModelSpec, index: int, locate: Locator) -> list[InputError]:
    """An integer input read where an op wants floats, or floats where it wants ids."""
    problems = []
    for name, drawn in model.input_data:
        readers = [layer for layer in model.layers if name in layer.inputs]
        if (
            drawn.high is None
            and not drawn.padding_mask
            and readers
            and all(OPS[layer.op].id_high(layer.params) is None for layer in readers)
        ):
            problems.append(InputError(
                f"model input {name!r}: int64 ids need `high` (no layer reading them says how "
                "many ids there are)", locate(("models", index, "inputs", name), name)))  # fmt: skip
    for i, layer in enumerate(model.layers):
        if not OPS[layer.op].runs:
            continue  # a placeholder computes nothing: it stands for any node, ids or not
        wants = OPS[layer.op].integer_inputs(layer.params)
        for position, value in enumerate(layer.inputs):
            integer = model.data_of(value) is not None
            if integer != (position in wants):
                what = "integer ids" if integer else "floats"
                need = "integers (an int64 model input)" if position in wants else "floats"
                problems.append(InputError(
                    f"{layer.op} {layer.name!r} reads {value!r} ({what}) where it takes {need}",
                    locate(("models", index, "layers", i, "inputs"), "inputs"),
                ))  # fmt: skip
    return problems


def _shape_problem(
    exc: ShapeError, layer: LayerModel, in_shapes: tuple, path: Path_, locate: Locator
) -> InputError:
    """A shape error as one line: a one-input layer's with its input shape; a join's (whose
    message names its shapes) with the op and the layer, as `add 'b1_add': inputs [...] and
    [...] do not broadcast`."""
    where = locate((*path, exc.field) if exc.field else path, exc.field)
    if len(in_shapes) == 1:
        return InputError(f"{exc} (input shape {list(in_shapes[0])}, batch included)", where)
    return InputError(f"{layer.op} {layer.name!r}: {exc} (batch included)", where)


def check_unvalidated(
    data: dict[str, Any],
    invalid: Collection[Path_],
    locate: Locator,
    backend_names: Collection[str],
    problems: list[InputError],
) -> None:
    """When the suite's structure is wrong somewhere, still check every layer whose own
    mapping is sound (ops, parameters, backends), so one run of validate names them all.
    invalid: the data paths the schema complained about."""
    models = data.get("models")
    models = models if isinstance(models, list) else []
    levels = [(("defaults",), data.get("defaults"))]
    levels += [(("models", index), model) for index, model in enumerate(models)]
    for path, raw in levels:
        names = raw.get("backends") if isinstance(raw, dict) else None
        if isinstance(names, list) and not any(
            bad[: len(path) + 1] == (*path, "backends") for bad in invalid
        ):
            level = SimpleNamespace(backends=[n for n in names if isinstance(n, str)])
            problems += check_backends(level, path, locate, backend_names)
    for index, model in enumerate(models):
        raw_layers = model.get("layers") if isinstance(model, dict) else None
        if not isinstance(raw_layers, list):
            continue
        sound: list[tuple[int, LayerModel]] = []
        for i, raw in enumerate(raw_layers):
            path = ("models", index, "layers", i)
            if any(bad[: len(path)] == path for bad in invalid):
                continue
            try:
                sound.append((i, LayerModel.model_validate(raw)))
            except ValidationError:
                continue
        check_layers(sound, index, locate, backend_names, problems)
