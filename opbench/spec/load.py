"""Suite YAML → SuiteSpec, with every mistake reported at once, one line each naming
file:line, model, layer and field.

Steps: parse YAML keeping each node's line (yaml_lines.py) → validate the file's structure
(pydantic, schema.py) → resolve each model (resolve.py): defaults merged, batch sweeps
expanded, op parameters checked, shapes inferred layer by layer. Problems are collected at
every step that can go on, and raised together (problems.py).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from opbench.errors import InputError, Location
from opbench.spec.model import LayerSpec, ModelSpec, SuiteSpec
from opbench.spec.problems import Locator, SuiteWarning, raise_all, schema_problems
from opbench.spec.resolve import check_unvalidated, resolve_suite
from opbench.spec.schema import SuiteModel
from opbench.spec.yaml_lines import parse_yaml
from opbench.vocabulary import backend_names, load_suite_plugins


def load_suite_text(text: str, file: str = "<suite>") -> SuiteSpec:
    data, lines = parse_yaml(text, file)
    if data is None:
        raise InputError("the suite file is empty", Location(file=file))
    if not isinstance(data, dict):
        raise InputError(
            f"a suite is a mapping with 'name' and 'models', not a {type(data).__name__}",
            Location(file=file, line=lines.get((), (None, None))[0]),
        )
    locate = Locator(file, data, lines)
    problems: list[InputError] = []
    try:
        suite = SuiteModel.model_validate(data)
    except ValidationError as exc:
        found = schema_problems(exc, locate)
        problems += [problem for _, problem in found]
        check_unvalidated(data, [path for path, _ in found], locate, backend_names(), problems)
        raise_all(problems)
    try:
        # Before the models resolve: a plugin's backends and ops are names they may use.
        load_suite_plugins(suite.plugins or [], Path(file).parent)
    except ValueError as exc:
        raise InputError(str(exc), locate(("plugins",), "plugins")) from None
    warnings: list[SuiteWarning] = []
    models: list[ModelSpec] = resolve_suite(suite, locate, backend_names(), problems, warnings)
    raise_all(problems)
    return SuiteSpec(
        name=suite.name,
        description=suite.description,
        models=tuple(models),
        source=file,
        raw=data,
        warnings=tuple(warnings),
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
        if path.suffix.lower() == ".onnx":
            raise InputError(
                "an ONNX model, not a suite: `opbench run`, `validate`, `reference onnxruntime` "
                "and `export` take it as it is; `opbench suite from-onnx` writes it as a suite",
                Location(file=file),
            ) from None
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
                "inputs": {name: list(shape) for name, shape in m.inputs},
                "layers": [layer_dict(layer) for layer in m.layers],
            }
            for m in suite.models
        ],
    }
