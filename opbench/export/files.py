"""`opbench export onnx`: each model of a suite as ONNX files, its fixed inputs and a manifest.

OUT/
  manifest.json                  files, layers, input shapes, dtype (see `MANIFEST_VERSION`)
  <model>/<model>.onnx           the whole model; node names are the suite's layer names
  <model>/prefix_<k>_<layer>.onnx  the model cut after layer k (k = 1 … n-1; cut n is the
                                 whole model file), for engines that only time whole models
  <model>/<input>.npy            the fixed input of each chain start (float32, numpy .npy)

Model names from sweeps (`mlp[batch=8]`) become directory names with the brackets replaced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbench.errors import InputError
from opbench.export.graph import LAYER_NAMES, BuiltGraph, Part, SeededData, build_graph
from opbench.export.onnx_ops import emitter_for
from opbench.spec.model import ModelSpec, SuiteSpec

MANIFEST_VERSION = 1
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


def _graph_entry(built: BuiltGraph, folder: Path, out: Path) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": i.name,
                "layer": i.layer,
                "shape": list(i.shape),
                "file": (folder / f"{file_stem(i.name)}.npy").relative_to(out).as_posix(),
            }
            for i in built.inputs
        ],
        "outputs": [
            {"name": o.name, "layer": o.layer, "shape": list(o.shape)} for o in built.outputs
        ],
        "opset": built.opset,
    }


def export_suite(
    suite: SuiteSpec,
    out: Path,
    *,
    models: Sequence[str] = (),
    log: Callable[[str], None] = lambda _msg: None,
) -> Exported:
    """Write every chosen model, its prefixes, its inputs and the manifest under OUT."""
    import numpy as np
    import onnx

    chosen = select_models(suite, models)
    for model in chosen:  # every op must have an ONNX form before anything is written
        for layer in model.layers:
            emitter_for(layer, model.name)
    data = SeededData(suite)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    files = 0
    for model in chosen:
        stem = file_stem(model.name)
        folder = out / stem
        folder.mkdir(exist_ok=True)
        log(f"{model.name}: {len(model.layers)} layers, {len(model.layers)} prefix cuts")
        full = build_graph([Part(model, model.layers)], data, LAYER_NAMES, model.name)
        model_file = folder / f"{stem}.onnx"
        onnx.save(full.proto, str(model_file))
        for graph_input in full.inputs:
            np.save(folder / f"{file_stem(graph_input.name)}.npy", full.feeds[graph_input.name])
        files += 1 + len(full.inputs)
        op_types = {node.name: node.op_type for node in full.proto.graph.node}
        prefixes = []
        for k, layer in enumerate(model.layers, start=1):
            if k == len(model.layers):
                built, path = full, model_file
            else:
                built = build_graph([Part(model, model.layers[:k])], data, LAYER_NAMES, model.name)
                path = folder / f"prefix_{k:02d}_{file_stem(layer.name)}.onnx"
                onnx.save(built.proto, str(path))
                files += 1
            prefixes.append(
                {"cut": k, "layer": layer.name, "file": path.relative_to(out).as_posix()}
                | _graph_entry(built, folder, out)
            )
        entries.append(
            {
                "name": model.name,
                "stem": stem,
                "batch": model.batch,
                "file": model_file.relative_to(out).as_posix(),
                **_graph_entry(full, folder, out),
                "layers": [
                    {
                        "name": layer.name,
                        "op": layer.op,
                        "suite_dtype": layer.dtype,
                        "quant": layer.quant,
                        "input_shape": list(layer.input_shape),
                        "output_shape": list(layer.output_shape),
                        "onnx_nodes": list(full.layer_nodes[(model.name, layer.name)]),
                        "onnx_ops": [
                            op_types[node] for node in full.layer_nodes[(model.name, layer.name)]
                        ],
                    }
                    for layer in model.layers
                ],
                "prefixes": prefixes,
            }
        )
    manifest = {
        "opbench_export": MANIFEST_VERSION,
        "suite": suite.name,
        "suite_source": suite.source,
        "dtype": "float32",
        "weights": "the suite's seeded weights, rounded to each layer's dtype, stored as float32",
        "node_names": "a layer's first node is named like the layer; its other nodes <layer>/<OpType>",
        "models": entries,
    }
    manifest_path = out / MANIFEST
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return Exported(out, manifest_path, tuple(m.name for m in chosen), files + 1)
