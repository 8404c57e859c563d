"""The files of one model, from its ONNX graph: weights once, one cut per layer, baselines.

Works at the ONNX level: it needs the whole model (weights inline), the layers as manifest
entries (each with its `name` and `onnx_nodes`, in walk order; other keys are copied as they
are) and the fixed data of each graph input. `files.py` calls it for suite models; tests call
it for graphs made with onnx.helper. Under OUT/<stem>/ it writes

  <stem>.onnx, <stem>.weights      the whole model; its weights, once (ONNX external data)
  cut_<k>_<layer>.onnx             the cut of layer k (export/cuts.py); weights point into
                                   <stem>.weights
  baseline_<input>.onnx            one graph input passed through (Identity)
  <input>.npy                      the fixed data of each graph input

and returns the model's manifest entry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from opbench.export.cuts import ancestor_cuts, cut_model, externalize, layer_graph, value_shapes


def file_stem(name: str) -> str:
    """A model or layer name as a portable file name (`mlp[batch=8]` → `mlp_batch_8`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "model"


def _dims(info: Any) -> list[int]:
    return [d.dim_value for d in info.type.tensor_type.shape.dim]


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


def write_model_files(
    proto: Any,
    name: str,
    layers: Sequence[dict[str, Any]],
    feeds: Mapping[str, np.ndarray],
    out: Path,
    *,
    log: Callable[[str], None] = lambda _msg: None,
) -> tuple[dict[str, Any], int]:
    """Write one model's files under OUT/<stem>/; its manifest entry and the files written.
    `proto` is changed (its weights become references to <stem>.weights)."""
    import onnx

    stem = file_stem(name)
    folder = out / stem
    folder.mkdir(parents=True, exist_ok=True)
    graph = layer_graph(proto, [(layer["name"], layer["onnx_nodes"]) for layer in layers])
    shapes = value_shapes(proto)
    weights = f"{stem}.weights"
    weight_bytes = externalize(proto, folder, weights)
    model_file = folder / f"{stem}.onnx"
    onnx.save(proto, str(model_file))
    first_reader = {}
    for k, reads in enumerate(graph.reads):
        for read in reads:
            first_reader.setdefault(read, graph.names[k])
    made_by = dict(zip(graph.outputs, graph.names, strict=True))
    ends: dict[str, dict[str, Any]] = {}
    for tensor in graph.inputs:
        path = folder / f"{file_stem(tensor)}.npy"
        np.save(path, feeds[tensor])
        ends[tensor] = {"name": tensor, "layer": first_reader.get(tensor, ""),
                        "shape": _dims(shapes[tensor]), "file": path.relative_to(out).as_posix()}  # fmt: skip
    outputs = [
        {"name": v.name, "layer": made_by.get(v.name, ""), "shape": _dims(shapes[v.name])}
        for v in proto.graph.output
    ]
    files = 2 + len(graph.inputs)
    baselines = []
    for tensor in graph.inputs:
        path = folder / f"baseline_{file_stem(tensor)}.onnx"
        onnx.save(_baseline(proto, tensor, f"{name} baseline"), str(path))
        files += 1
        baselines.append(
            {"input": tensor, "file": path.relative_to(out).as_posix(), "inputs": [ends[tensor]]}
        )
    found = ancestor_cuts(graph)
    log(f"{name}: {len(layers)} layers, {len(found)} cuts, weights {weight_bytes} bytes once")
    cuts = []
    for cut in found:
        layer = graph.names[cut.layer]
        path = folder / f"cut_{cut.number:03d}_{file_stem(layer)}.onnx"
        onnx.save(cut_model(proto, graph, cut, shapes, f"{name} cut {cut.number}"), str(path))
        files += 1
        cuts.append(
            {
                "cut": cut.number,
                "layer": layer,
                "file": path.relative_to(out).as_posix(),
                "members": [graph.names[k] for k in cut.members],
                "inputs": [ends[t] for t in cut.inputs],
                "outputs": [
                    {"name": cut.output, "layer": layer, "shape": _dims(shapes[cut.output])}
                ],  # fmt: skip
            }
        )
    entry = {
        "name": name,
        "stem": stem,
        "file": model_file.relative_to(out).as_posix(),
        "weights": (folder / weights).relative_to(out).as_posix(),
        "weights_bytes": weight_bytes,
        "inputs": [ends[t] for t in graph.inputs],
        "outputs": outputs,
        "opset": max(
            (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0
        ),
        "layers": [dict(layer, inputs=list(graph.reads[k])) for k, layer in enumerate(layers)],
        "baselines": baselines,
        "cuts": cuts,
    }
    return entry, files
