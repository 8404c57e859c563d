"""`opbench export onnx`: each model of a suite as ONNX files, its fixed inputs and a manifest.

OUT/
  manifest.json                  files, layers and their inputs, shapes, dtype (`MANIFEST_VERSION`)
  <model>/<model>.onnx           the whole model (the graph; its weights are in the next file);
                                 node names are the suite's layer names
  <model>/<model>.weights        every weight of the model, once (ONNX external data: the
                                 .onnx files name their tensors' offsets in it)
  <model>/cut_<k>_<layer>.onnx   the cut of layer k: the layer and every layer it depends on,
                                 with one output (export/cuts.py), for engines that time whole
                                 models only; its weights point into <model>.weights
  <model>/baseline_<input>.onnx  one model input passed through (Identity): the cost of a call
                                 with no layer in it
  <model>/<input>.npy            the fixed data of each model input (float32, numpy .npy)

`onnx.load(path)` and ONNX Runtime (given the path) read the weights from the file beside the
model. Model names from sweeps (`mlp[batch=8]`) become directory names with the brackets
replaced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbench.errors import InputError
from opbench.export.graph import LAYER_NAMES, BuiltGraph, Part, SeededData, build_graph
from opbench.export.model_files import file_stem as file_stem  # re-exported
from opbench.export.model_files import write_model_files
from opbench.export.onnx_ops import exporting_op
from opbench.spec.model import ModelSpec, SuiteSpec

MANIFEST_VERSION = 2  # 2: cuts are ancestor sets (`cuts`, not `prefixes`); weights in one file
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Exported:
    """What `export_suite` wrote."""

    out: Path
    manifest: Path
    models: tuple[str, ...]
    files: int


def select_models(suite: SuiteSpec, wanted: Sequence[str]) -> tuple[ModelSpec, ...]:
    """Model instances named by --model (instance or base name), or all of them."""
    if not wanted:
        return suite.models
    chosen: list[ModelSpec] = []
    for name in wanted:
        hits = [m for m in suite.models if name in (m.name, m.base_name)]
        if not hits:
            known = ", ".join(m.name for m in suite.models)
            raise InputError(f"no model {name!r} in suite {suite.name!r} (models: {known})")
        chosen.extend(m for m in hits if m not in chosen)
    return tuple(chosen)


def _layer_entry(model: ModelSpec, built: BuiltGraph, index: int) -> dict[str, Any]:
    layer = model.layers[index]
    nodes = built.layer_nodes[(model.name, layer.name)]
    op_types = {node.name: node.op_type for node in built.proto.graph.node}
    shapes = tuple(getattr(layer, "input_shapes", ()) or ()) or (layer.input_shape,)
    return {
        "name": layer.name,
        "op": layer.op,
        "suite_dtype": layer.dtype,
        "quant": layer.quant,
        "input_shape": list(layer.input_shape),
        "input_shapes": [list(s) for s in shapes],
        "output_shape": list(layer.output_shape),
        "onnx_nodes": list(nodes),
        "onnx_ops": [op_types[node] for node in nodes],
        "reference_name": layer.reference_name,
    }


def _export_model(
    model: ModelSpec, data: SeededData, out: Path, log: Callable[[str], None]
) -> tuple[dict[str, Any], int]:
    """Write one model's files; its manifest entry and the number of files written."""
    full = build_graph([Part(model, model.layers)], data, LAYER_NAMES, model.name)
    layers = [_layer_entry(model, full, i) for i in range(len(model.layers))]
    entry, files = write_model_files(full.proto, model.name, layers, full.feeds, out, log=log)
    return {"batch": model.batch, **entry}, files


def write_manifest(
    out: Path, suite: str, source: str | None, entries: Sequence[dict[str, Any]]
) -> Path:
    """OUT/manifest.json for these models' entries (write_model_files)."""
    manifest = {
        "opbench_export": MANIFEST_VERSION,
        "suite": suite,
        "suite_source": source,
        "dtype": "float32",
        "weights": "the suite's seeded weights, rounded to each layer's dtype, stored as "
        "float32, once per model in <model>.weights (ONNX external data)",
        "node_names": "a layer's first node is named like the layer; its other nodes "
        "<layer>/<OpType>",
        "cuts": "cut k holds layer k and every layer it depends on; it has one output, layer k's",
        "models": list(entries),
    }
    path = out / MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return path


def export_suite(
    suite: SuiteSpec,
    out: Path,
    *,
    models: Sequence[str] = (),
    log: Callable[[str], None] = lambda _msg: None,
) -> Exported:
    """Write every chosen model, its cuts, its inputs and the manifest under OUT."""
    chosen = select_models(suite, models)
    for model in chosen:  # every op must have an ONNX form before anything is written
        for layer in model.layers:
            exporting_op(layer, model.name)
    data = SeededData(suite)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    files = 0
    for model in chosen:
        entry, written = _export_model(model, data, out, log)
        entries.append(entry)
        files += written
    manifest_path = write_manifest(out, suite.name, suite.source, entries)
    return Exported(out, manifest_path, tuple(m.name for m in chosen), files + 1)
