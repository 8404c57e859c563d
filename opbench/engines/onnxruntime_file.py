"""`opbench reference onnxruntime MODEL.onnx`: ONNX Runtime profiles the user's file itself, with
its own weights and at the batch `opbench run MODEL.onnx` ran it.

The file is imported as `opbench run` imports it (the same layers, the same model name); then
each node that a layer computes is renamed ``/<model>/<layer>/<OpType>[_k]`` and each value it
writes ``<node>_output_<i>``, as opbench's own export names them. Only names change: the graph,
its weights and what ONNX Runtime fuses are the file's. ONNX Runtime names the nodes it rewrites
after their node or their output value (``/m/conv1/Relu_output_0_nchwc``), so every row of the
profile carries the model's and the layer's names, and `opbench compare` matches it by name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from opbench.engines.onnxruntime import DEFAULT_RUNS, DEFAULT_WARMUP, OrtReference, profile_graph
from opbench.errors import InputError


def owners_of(imported: Any) -> dict[str, str]:
    """ONNX node name → the layer that computes it (or reads through it, for a view)."""
    owners = {node: layer.name for layer in imported.layers for node in layer.nodes}
    for absorbed in imported.absorbed:
        if absorbed.into is not None:
            owners.setdefault(absorbed.node, absorbed.into)
    return owners


def _subgraph_values(graph: Any) -> set[str]:
    """Names read inside the subgraphs of If/Loop/Scan nodes: left as they are."""
    from onnx import AttributeProto

    names: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                for inner in sub.node:
                    names.update(inner.input)
                names |= _subgraph_values(sub)
    return names


def rename_by_layer(proto: Any, model: str, owners: dict[str, str]) -> int:
    """Rename, in place, each node a layer computes and the values it writes; returns how many
    nodes were renamed. Each node is found by the identity the importer gave it (its position
    and name: `load.node_ids`), so two nodes of one name are renamed after their own layers."""
    from opbench.importers.onnx.load import node_ids

    graph = proto.graph
    keep = _subgraph_values(graph) | {v.name for v in graph.input}
    keep |= {t.name for t in graph.initializer}
    values: dict[str, str] = {}
    used: Counter = Counter()
    renamed = 0
    ids = node_ids([(node.name, node.op_type) for node in graph.node])
    for node, key in zip(graph.node, ids, strict=True):
        layer = owners.get(key)
        if layer is None:
            continue
        base = f"/{model}/{layer}/{node.op_type}"
        used[base] += 1
        node.name = base if used[base] == 1 else f"{base}_{used[base] - 1}"
        renamed += 1
        for k, out in enumerate(node.output):
            if out and out not in keep:
                values[out] = f"{node.name}_output_{k}"
    for node in graph.node:
        node.input[:] = [values.get(name, name) for name in node.input]
        node.output[:] = [values.get(name, name) for name in node.output]
    for value in (*graph.output, *graph.value_info):
        value.name = values.get(value.name, value.name)
    return renamed


def _feeds(imported: Any, session: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs at the imported shapes (batch first), in the file's layout."""
    from opbench.importers.onnx.file_data import to_onnx

    types = {i.name: i.type for i in session.get_inputs()}
    rng = np.random.default_rng(seed)
    feeds = {}
    for item in imported.inputs:
        if item.constant is not None:
            continue
        data = to_onnx(rng.standard_normal(item.shape).astype(np.float32), item.batch_axis)
        kind = types.get(item.source, "tensor(float)")
        if "int" in kind:  # token ids and the like: small valid indices
            data = rng.integers(0, 2, size=data.shape).astype(np.int64)
        elif "float16" in kind:
            data = data.astype(np.float16)
        feeds[item.source] = np.ascontiguousarray(data)
    return feeds


def profile_file(
    path: Path,
    out: Path,
    *,
    batch: int | None = None,
    runs: int = DEFAULT_RUNS,
    warmup: int = DEFAULT_WARMUP,
    threads: int | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> OrtReference:
    """Profile the ONNX file at `batch` (the file's own where it fixes one) with its weights."""
    import onnx

    from opbench.engines.onnxruntime import _session, pick_provider
    from opbench.importers.onnx import import_onnx
    from opbench.importers.onnx.suite_yaml import portable_name

    imported = import_onnx(path, batch=batch)
    if batch is not None and imported.static_batch and imported.file_batch != batch:
        raise InputError(
            f"{path}: the file fixes its batch at {imported.file_batch}, so ONNX Runtime cannot "
            f"run it at --batch {batch}; export the model with a symbolic batch, or leave "
            "--batch out (then run it with the same batch)"
        )
    name = portable_name(path.stem, "onnx_model")
    proto = onnx.load(str(path))
    renamed = rename_by_layer(proto, name, owners_of(imported))
    data = proto.SerializeToString()
    log(f"{path.name}: {renamed} of {len(proto.graph.node)} nodes named after their layers")
    feeds = _feeds(imported, _session(data, pick_provider()[0]))
    meta = {
        "model_file": str(path),
        "models": [name],
        "batch": {name: imported.batch},
        "weights": "the file's own",
        "node_names": "/<model>/<layer>/<OpType>[_k] (the file's graph, nodes renamed)",
        "nodes": renamed,
        "skipped_layers": [],
    }
    return profile_graph(
        data,
        feeds,
        out,
        meta,
        layers=len(imported.layers),
        runs=runs,
        warmup=warmup,
        threads=threads,
        log=log,
    )
