"""Where a mistake in a suite sits, and the one line that says so.

- `Locator` turns a path into the data (("models", 0, "layers", 2, "heads")) into a Location
  naming file:line, model, layer and field;
- `schema_problems` maps every pydantic error of the suite to such a line (one per place:
  among a union's alternatives, the one that got furthest into the data);
- `SuiteErrors` holds every problem of a suite; printed, it is one line per problem;
- `SuiteWarning` is what is legal but most likely a mistake (a model in disconnected pieces).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from opbench.errors import InputError, Location
from opbench.ops.registry import suggest
from opbench.spec.schema import LayerModel, ModelModel, SuiteModel, TimingModel
from opbench.spec.yaml_lines import LineMap, Path_


@dataclass(frozen=True)
class SuiteWarning:
    """Something legal in a suite that is most likely a mistake: printed as one line
    ("warning: file:line:col, model 'm', layer 'l': message"), never an exit code."""

    message: str
    location: Location

    def __str__(self) -> str:
        where = str(self.location)
        return f"{where}: {self.message}" if where else self.message


class SuiteErrors(InputError):
    """Every problem found in a suite, in file order. Its text is one line per problem, the
    second and later ones prefixed like the first is by the CLI ("error: ")."""

    def __init__(self, errors: Sequence[InputError]) -> None:
        super().__init__(errors[0].message, errors[0].location)
        self.errors = tuple(errors)

    def __str__(self) -> str:
        return "\nerror: ".join(str(e) for e in self.errors)


def raise_all(problems: Iterable[InputError]) -> None:
    """Raise the problems, if any: one as itself, several as SuiteErrors (deduplicated, in
    file order)."""
    unique: dict[str, InputError] = {}
    for problem in problems:
        unique.setdefault(str(problem), problem)
    ordered = sorted(unique.values(), key=lambda e: (e.location.line or 0, e.location.column or 0))
    if len(ordered) == 1:
        raise ordered[0]
    if ordered:
        raise SuiteErrors(ordered)


class Locator:
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


def _shape_of(path: Path_) -> Path_:
    return tuple("#" if isinstance(p, int) else p for p in path)


_COMMON_FIELDS = LayerModel.model_fields.keys() - {
    "name",
    "op",
    "reference_name",
    "input",
    "inputs",
    "allow_loose_tolerance",
}
ALLOWED: dict[Path_, Any] = {
    (): SuiteModel.model_fields.keys(),
    ("defaults",): _COMMON_FIELDS,
    ("models", "#"): ModelModel.model_fields.keys(),
    ("defaults", "timing"): TimingModel.model_fields.keys(),
    ("models", "#", "timing"): TimingModel.model_fields.keys(),
    ("models", "#", "layers", "#", "timing"): TimingModel.model_fields.keys(),
}


def schema_problems(
    exc: ValidationError, locate: Locator, allowed: Mapping[Path_, Any] = ALLOWED
) -> list[tuple[Path_, InputError]]:
    """Every place pydantic found wrong, with its data path. Errors of one union's alternatives
    share a place; the one that got furthest into the data says the most (`batch: [1, true]`:
    the `true`, not "not an int")."""
    errors = [(e, _data_path(locate.data, tuple(e["loc"]), e["type"])) for e in exc.errors()]
    places: list[tuple[Path_, tuple[dict, Path_]]] = []  # (where, (deepest error, its path))
    for err, path in errors:
        for k, (root, best) in enumerate(places):
            if path[: len(root)] == root:
                if len(path) > len(best[1]):
                    places[k] = (root, (err, path))
                break
        else:
            places.append((path, (err, path)))
    return [(path, _problem(err, path, locate, allowed)) for _, (err, path) in places]


def _problem(err: dict, path: Path_, locate: Locator, allowed: Mapping[Path_, Any]) -> InputError:
    kind = err["type"]
    keys = [p for p in path if isinstance(p, str)]
    field = keys[-1] if keys else None
    if kind == "extra_forbidden":
        choices = allowed.get(_shape_of(path[:-1]), ())
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
