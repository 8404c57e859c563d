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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbench.errors import InputError
from opbench.export.cuts import ancestor_cuts, cut_model, externalize, layer_graph, value_shapes
from opbench.export.graph import LAYER_NAMES, BuiltGraph, Part, SeededData, build_graph, layer_reads
from opbench.export.onnx_ops import emitter_for
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


def file_stem(name: str) -> str:
    """A model or layer name as a portable file name (`mlp[batch=8]` → `mlp_batch_8`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "model"


def _endpoints(built: BuiltGraph, folder: Path, out: Path) -> dict[str, dict[str, Any]]:
    """Every graph input and output of the whole model, by tensor name, as the manifest
    writes them."""
    entries: dict[str, dict[str, Any]] = {}
    for i in built.inputs:
        entries[i.name] = {
            "name": i.name,
            "layer": i.layer,
            "shape": list(i.shape),
            "file": (folder / f"{file_stem(i.name)}.npy").relative_to(out).as_posix(),
        }
    for o in built.outputs:
        entries[o.name] = {"name": o.name, "layer": o.layer, "shape": list(o.shape)}
    return entries


def _baseline(proto: Any, tensor: str, name: str) -> Any:
    """A model that passes one input through: what a call costs with no layer in it."""
    from onnx import helper

    value = next(v for v in proto.graph.input if v.name == tensor)
    out = helper.make_tensor_value_info(f"{tensor}_passed", value.type.tensor_type.elem_type, None)
    out.type.CopyFrom(value.type)
    node = helper.make_node("Identity", [tensor], [out.name], name=f"{tensor}_passed")
    graph = helper.make_graph([node], name, [value], [out])
    model = helper.make_model(
        graph, opset_imports=list(proto.opset_import), producer_name="opbench"
    )
    model.ir_version = proto.ir_version
    return model


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
        "inputs": list(layer_reads(model, layer)),
        "input_shape": list(layer.input_shape),
        "input_shapes": [list(s) for s in shapes],
        "output_shape": list(layer.output_shape),
        "onnx_nodes": list(nodes),
        "onnx_ops": [op_types[node] for node in nodes],
    }


def _export_model(
    model: ModelSpec, data: SeededData, out: Path, log: Callable[[str], None]
) -> tuple[dict[str, Any], int]:
    """Write one model's files; its manifest entry and the number of files written."""
    import numpy as np
    import onnx

    stem = file_stem(model.name)
    folder = out / stem
    folder.mkdir(exist_ok=True)
    full = build_graph([Part(model, model.layers)], data, LAYER_NAMES, model.name)
    layers = [(layer.name, full.layer_nodes[(model.name, layer.name)]) for layer in model.layers]
    graph = layer_graph(full.proto, layers)
    shapes = value_shapes(full.proto)
    weights = f"{stem}.weights"
    weight_bytes = externalize(full.proto, folder, weights)
    model_file = folder / f"{stem}.onnx"
    onnx.save(full.proto, str(model_file))
    for graph_input in full.inputs:
        np.save(folder / f"{file_stem(graph_input.name)}.npy", full.feeds[graph_input.name])
    files = 2 + len(full.inputs)
    ends = _endpoints(full, folder, out)
    baselines = []
    for tensor in graph.inputs:
        path = folder / f"baseline_{file_stem(tensor)}.onnx"
        onnx.save(_baseline(full.proto, tensor, f"{model.name} baseline"), str(path))
        files += 1
        baselines.append(
            {"input": tensor, "file": path.relative_to(out).as_posix(), "inputs": [ends[tensor]]}
        )
    cuts = []
    found = ancestor_cuts(graph)
    log(
        f"{model.name}: {len(model.layers)} layers, {len(found)} cuts, weights {weight_bytes} bytes"
    )
    for cut in found:
        name = graph.names[cut.layer]
        path = folder / f"cut_{cut.number:03d}_{file_stem(name)}.onnx"
        onnx.save(
            cut_model(full.proto, graph, cut, shapes, f"{model.name} cut {cut.number}"), str(path)
        )
        files += 1
        layer = model.layers[cut.layer]
        cuts.append(
            {
                "cut": cut.number,
                "layer": name,
                "file": path.relative_to(out).as_posix(),
                "members": [graph.names[k] for k in cut.members],
                "inputs": [ends[t] for t in cut.inputs],
                "outputs": [{"name": cut.output, "layer": name, "shape": list(layer.output_shape)}],
            }
        )
    entry = {
        "name": model.name,
        "stem": stem,
        "batch": model.batch,
        "file": model_file.relative_to(out).as_posix(),
        "weights": (folder / weights).relative_to(out).as_posix(),
        "weights_bytes": weight_bytes,
        "inputs": [ends[i.name] for i in full.inputs],
        "outputs": [ends[o.name] for o in full.outputs],
        "opset": full.opset,
        "layers": [_layer_entry(model, full, i) for i in range(len(model.layers))],
        "baselines": baselines,
        "cuts": cuts,
    }
    return entry, files


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
            emitter_for(layer, model.name)
    data = SeededData(suite)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    files = 0
    for model in chosen:
        entry, written = _export_model(model, data, out, log)
        entries.append(entry)
        files += written
    manifest = {
        "opbench_export": MANIFEST_VERSION,
        "suite": suite.name,
        "suite_source": suite.source,
        "dtype": "float32",
        "weights": "the suite's seeded weights, rounded to each layer's dtype, stored as float32, "
        "once per model in <model>.weights (ONNX external data)",
        "node_names": "a layer's first node is named like the layer; its other nodes <layer>/<OpType>",
        "cuts": "cut k holds layer k and every layer it depends on; it has one output, layer k's",
        "models": entries,
    }
    manifest_path = out / MANIFEST
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return Exported(out, manifest_path, tuple(m.name for m in chosen), files + 1)
