"""The --map file: reference names → suite layers, where the names differ.

    dense_in: fc1                     # one layer
    block_3: [act, fc2]               # one engine layer covering two suite layers
    "mlp[batch=8]/dense_out": head    # model-qualified
    Identity_12: null                 # engine work that is no suite layer

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from opbench.errors import InputError, Location
from opbench.match.names import names_model, row_keys
from opbench.match.suite_layers import SuiteModel
from opbench.reference.model import ReferenceTiming
from opbench.spec.yaml_lines import check_bounds, syntax_error


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
    check_bounds(text, file)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise syntax_error(exc, file, text) from None
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
            candidates = [m for m in models if target.model is None or names_model(target.model, m)]
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
