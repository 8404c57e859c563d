"""The suite file of an import: the layers in graph order with `inputs:`, every node accounted.

Comments say what each layer covers (its ONNX nodes beyond the first, the view nodes it reads
through), which placeholder stands for which unsupported node, and, at the end, the nodes folded
into constants or removed as unused. `write_suite` loads the text with the suite loader and
checks every layer's shapes against ONNX shape inference's before putting the file in place,
so a suite that is written always validates and has the model's shapes.
"""

from __future__ import annotations

import os
import re
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from opbench.errors import ExitCode, InputError, OpbenchError
from opbench.importers.onnx.model import Imported, Layer
from opbench.spec.wiring import spells_out


def portable_name(text: str, fallback: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or fallback


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, 96 - len(indent))]


def _entry(layer: Layer, i: int, names: list[str], declared: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": layer.name, "op": layer.op, **layer.params}
    if spells_out(i, names, declared, layer.inputs):  # the loader's own rule, inverted
        entry["inputs"] = list(layer.inputs)
    if layer.reference_name:
        entry["reference_name"] = layer.reference_name
    return entry


def _ops(names: list[str], op_of: dict[str, str]) -> str:
    return ", ".join(f"{n} ({op_of[n]})" if n in op_of else n for n in names)


def _one_input(imp: Imported) -> bool:
    """The suite's one-input form (`input: [dims]`): one float input named `input`."""
    return len(imp.inputs) == 1 and imp.inputs[0].name == "input" and not imp.inputs[0].dtype


def suite_text(imp: Imported, suite_name: str, model_name: str, source: str, dtype: str) -> str:
    if not imp.layers:
        raise InputError(f"{source}: no node of the graph makes a layer")
    op_of = {a.node: a.op_type for a in imp.absorbed} | {u.node: u.op_type for u in imp.unsupported}
    counts = Counter(a.why for a in imp.absorbed)
    lines = [
        f"# Written by `opbench suite from-onnx` from {source} ({imp.producer or 'unknown producer'}):",
        f"# {imp.node_count} nodes: {sum(len(x.nodes) for x in imp.layers)} in "
        f"{len(imp.layers)} layers, {counts['view']} views read through, "
        f"{counts['constant']} folded into constants, {counts['unused']} unused, "
        f"{len(imp.unsupported)} unsupported. The batch is dim {imp.batch_axis} of the input.",
        f"name: {suite_name}",
        "defaults:",
        f"  dtype: {dtype}",
        "  backends: [torch, triton]",
        "models:",
        f"  - name: {model_name}",
        f"    batch: {imp.batch}",
    ]
    one_input = _one_input(imp)
    if one_input:
        lines.append(f"    input: {_flow(list(imp.inputs[0].shape[1:]))}")
    else:
        lines.append("    inputs:")
        for item in imp.inputs:
            note = f"  # the constant {item.constant}" if item.constant else ""
            shape = list(item.shape[1:])
            # integer ids: drawn in range of the embedding that reads them
            value = {"shape": shape, "dtype": item.dtype} if item.dtype else shape
            if item.padding_mask:
                value["padding_mask"] = True
            lines.append(f"      {item.name}: {_flow(value)}{note}")
    lines += ["    fuse: true", "    layers:"]
    unsupported = {u.node: u for u in imp.unsupported}
    names = [layer.name for layer in imp.layers]
    declared = [item.name for item in imp.inputs]
    for i, layer in enumerate(imp.layers):
        indent = "      "
        if layer.placeholder_for:
            why = unsupported.get(layer.nodes[0])
            reason = f": {why.reason}" if why else ""
            lines += _comment(
                f"placeholder for {layer.nodes[0]} ({layer.placeholder_for}){reason}; not measured",
                indent,
            )
        elif len(layer.nodes) > 1:
            lines += _comment(f"also computes {', '.join(layer.nodes[1:])}", indent)
        if layer.absorbed:
            lines += _comment(f"reads through {_ops(list(layer.absorbed), op_of)}", indent)
        lines.append(f"{indent}- {_flow(_entry(layer, i, names, declared))}")
    for why, title in (("constant", "folded into constants"), ("unused", "unused, removed")):
        names = [a.node for a in imp.absorbed if a.why == why]
        if names:
            lines += _comment(f"{title}: {_ops(names, op_of)}", "    ")
    views_out = [a.node for a in imp.absorbed if a.why == "view" and a.into is None]
    if views_out:
        lines += _comment(f"views on the way to the outputs: {_ops(views_out, op_of)}", "    ")
    return "\n".join(lines) + "\n"


def check_shapes(imp: Imported, suite: Any) -> None:
    """Every layer's input and output shapes as the importer (ONNX shape inference) has them
    (without the batch: `--batch` may set another)."""
    model = suite.models[0]
    for mine, layer in zip(imp.layers, model.layers, strict=True):
        want = (tuple(s[1:] for s in mine.input_shapes), mine.output_shape[1:])
        got = (tuple(s[1:] for s in layer.input_shapes), layer.output_shape[1:])
        if want != got:
            raise OpbenchError(
                f"layer {mine.name!r}: the suite gives {[list(s) for s in got[0]]} → "
                f"{list(got[1])}, the ONNX graph {[list(s) for s in want[0]]} → {list(want[1])}",
                exit_code=ExitCode.BAD_INPUT,
            )


def write_suite(imp: Imported, out: Path, text: str) -> Any:
    """Validate the YAML (the suite loader, then the shapes) in a temporary file beside OUT,
    then move it into place; nothing is written when it does not validate."""
    from opbench.spec.load import load_suite

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=".yaml", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        suite = load_suite(Path(tmp))
        check_shapes(imp, suite)
        os.replace(tmp, out)
        return suite
    finally:
        Path(tmp).unlink(missing_ok=True)
