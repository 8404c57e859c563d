"""The import: load, walk the graph for each possible batch axis, keep the best reading, name
its layers and account for every node (the package docstring says how the parts fit)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from opbench.errors import InputError
from opbench.importers.onnx import views as V
from opbench.importers.onnx.file_data import constant_reader
from opbench.importers.onnx.model import Absorbed, Imported, ModelInput, Output
from opbench.importers.onnx.names import NodeInfo, assign, node_info


def _infos(model: Any) -> tuple[dict[str, NodeInfo], Counter]:
    initializers = set(model.graph.initializers)
    infos: dict[str, NodeInfo] = {}
    users: Counter = Counter()
    nodes = list(model.graph) + [n for fn in model.functions.values() for n in fn]
    for node in nodes:
        if (
            node.domain == "opbench"
            or (node.domain, node.op_type, node.overload) in model.functions
        ):
            continue
        info = node_info(node, initializers)
        infos[node.name] = info
        users.update(set(info.params))
    return infos, users


# Ops whose ONNX form is shared: an opbench file says which it wrote in the layer's first node's
# doc_string ('opbench {"op": ..., "params": {...}}').
_SHARED_FORMS = ({"transpose", "permute"}, {"reshape", "flatten"}, {"split", "slice"})


def _opbench_docs(model: Any) -> dict[str, dict]:
    import json

    docs = {}
    for node in model.graph:
        text = node.doc_string or ""
        if text.startswith("opbench "):
            try:
                docs[node.name] = json.loads(text[len("opbench ") :])
            except ValueError:
                continue
    return docs


def _as_written(layer: Any, docs: dict[str, dict]) -> Any:
    """The op and parameters opbench wrote, where the ONNX form does not tell them apart."""
    doc = docs.get(layer.nodes[0]) if layer.nodes else None
    if not doc or doc.get("op") == layer.op:
        return layer
    if not any({doc.get("op"), layer.op} <= pair for pair in _SHARED_FORMS):
        return layer
    params = {k: v for k, v in (doc.get("params") or {}).items() if v is not None}
    return replace(layer, op=doc["op"], params=params)


def _input_name(value: Any, single: bool) -> str:
    import re

    if single:
        return "input"
    return re.sub(r"[^A-Za-z0-9_-]+", "_", value.name).strip("_-") or "input"


def _walk(loaded: Any, axis: int, from_opbench: bool) -> Any:
    from opbench.importers.onnx.dispatch import handle
    from opbench.importers.onnx.handlers import Refused, placeholder
    from opbench.importers.onnx.walk import Walker

    model = loaded.model
    graph = model.graph
    initializers = set(graph.initializers)
    data = [v for v in graph.inputs if v.name not in initializers]
    first = tuple(int(d) for d in data[0].shape)
    batch = first[axis]

    def fold(node: Any, layer: Any) -> bool:
        # In opbench's own files an activation layer has a node of its own name ('relu1');
        # one named '<layer>/<Op>' is part of the layer before it.
        return not from_opbench or node.name.startswith(f"{layer.nodes[0]}/")

    consumers: dict[str, list[Any]] = {}
    for node in graph:
        for value in node.inputs:
            if value is not None:
                consumers.setdefault(value.name, []).append(node)

    def eager(node: Any) -> bool:
        # In opbench's own files a transpose/reshape/slice layer is a node named like it; one
        # that only feeds an Attention node is how the export splits packed q|k|v.
        if not from_opbench or "/" in node.name:
            return False
        readers = [r for out in node.outputs for r in consumers.get(out.name, [])]
        return not readers or any(r.op_type != "Attention" for r in readers)

    w = Walker(
        batch=batch, functions=dict(model.functions), fold_activations=fold, eager_views=eager
    )
    for node in graph:
        for value in node.inputs:
            if value is not None:
                w.consumers[value.name] = w.consumers.get(value.name, 0) + 1
    for value in graph.outputs:
        w.consumers[value.name] = w.consumers.get(value.name, 0) + 1
    for value in data:
        shape = tuple(int(d) for d in value.shape)
        pos = axis if value is data[0] else (shape.index(batch) if batch in shape else -2)
        if pos == -2:
            raise Refused(f"input {value.name!r} {list(shape)} has no batch dim")
        name = _input_name(value, len(data) == 1)
        canon_shape = (batch, *shape[:pos], *shape[pos + 1 :])
        ints = value.dtype is not None and value.dtype.is_integer()
        dtype = "int64" if ints else None
        w.inputs.append(ModelInput(name, canon_shape, value.name, batch_axis=pos, dtype=dtype))
        w.set_canonical(value.name, w.new_tensor(canon_shape, name), pos)
    _find_masks(w, graph, {v.name for v in data})
    w.opsets = dict(model.opset_imports)
    for node in graph:
        w.current = node
        if node.name in w.mask_nodes:
            continue  # the attention layer reading the mask computes it
        if node.op_type == "Constant" or all(
            o.const_value is not None for o in node.outputs if o is not None
        ):
            w.absorbed[node.name] = Absorbed(node.name, node.op_type, "constant")
            continue
        try:
            handle(w, node)
        except (Refused, V.NotAView, KeyError) as exc:
            reason = str(exc) if not isinstance(exc, KeyError) else "an input could not be placed"
            w.unsupported_node(node, reason.strip("'\""))
        except Exception as exc:  # noqa: BLE001 - a node this importer cannot read: say which
            w.unsupported_node(
                node, f"the importer could not read it ({type(exc).__name__}: {exc})"
            )
        else:
            continue
        try:
            placeholder(w, node)
        except (Refused, V.NotAView, KeyError):
            pass  # its readers say so in turn
    taken = {n for layer in w.layers for n in layer.nodes}
    for node in graph:
        if node.name in w.mask_nodes and node.name not in taken:
            w.unsupported_node(node, "part of an attention mask no attention layer reads")
    outputs = []
    for value in graph.outputs:
        try:
            canon, pos = w.canonical(value.name)
            outputs.append(Output(value.name, canon.producer, tuple(value.shape), pos))
            w.output_reads.append(value.name)
        except (V.NotAView, KeyError) as exc:
            w.unsupported.append(_output_problem(value.name, exc))
    w.finish()
    return w, outputs


def _find_masks(w: Any, graph: Any, inputs: set[str]) -> None:
    """The attention cores whose additive mask is computed from a model input (masks.py)."""
    from opbench.importers.onnx import masks as M

    order = {id(n): i for i, n in enumerate(graph)}
    for node in graph:
        if node.domain != "opbench" or node.op_type != "AttentionCore" or len(node.inputs) < 4:
            continue
        mask = node.inputs[3]
        if mask is None or mask.const_value is not None:
            continue
        try:
            found = M.mask_graph(mask, inputs, order)
        except V.NotAView:
            continue  # the attention handler says why
        w.masks[node.name] = found
        w.mask_nodes.update(n.name for n in found.nodes)


def _output_problem(name: str, exc: Exception) -> Any:
    from opbench.importers.onnx.model import Unsupported

    return Unsupported(name, "output", "", f"the output cannot be made: {exc}")


def _candidates(loaded: Any) -> list[int]:
    graph = loaded.model.graph
    initializers = set(graph.initializers)
    first = next(v for v in graph.inputs if v.name not in initializers)
    if loaded.batch_axis is not None:
        return [loaded.batch_axis]
    rank = len(first.shape)
    return list(range(rank))


def import_onnx(
    path: Path,
    *,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> Imported:
    from opbench.importers.onnx.load import load

    loaded = load(path, batch=batch, dims=dims or {}, log=log)
    model = loaded.model
    from_opbench = model.producer_name == "opbench"
    from opbench.importers.onnx.handlers import Refused

    best = None
    problem = ""
    for axis in _candidates(loaded):
        try:
            walker, outputs = _walk(loaded, axis, from_opbench)
        except Refused as exc:  # this dim cannot be the batch of every input
            problem = str(exc)
            continue
        score = len(walker.unsupported)
        if best is None or score < best[0]:
            best = (score, axis, walker, outputs)
        if score == 0:
            break
    if best is None:
        raise InputError(f"{path}: no dim of the input can be the batch ({problem})")
    _, axis, walker, outputs = best
    return _result(loaded, walker, outputs, axis, from_opbench)


def _result(loaded: Any, w: Any, outputs: list, axis: int, from_opbench: bool) -> Imported:
    model = loaded.model
    infos, users = _infos(model)
    taken = {i.name for i in w.inputs}
    named = assign(w.layers, infos, users, from_opbench, taken)
    rename = {layer.name: name for layer, (name, _) in zip(w.layers, named, strict=True)}
    docs = _opbench_docs(model) if from_opbench else {}
    layers = [
        replace(
            _as_written(layer, docs),
            name=name,
            reference_name=reference,
            inputs=tuple(rename.get(i, i) for i in layer.inputs),
            module=(infos[layer.nodes[0]].module or "")
            if layer.nodes and layer.nodes[0] in infos
            else "",
        )
        for layer, (name, reference) in zip(w.layers, named, strict=True)
    ]
    absorbed = [replace(a, into=rename.get(a.into, a.into)) for a in w.absorbed.values()]
    absorbed += [Absorbed(n, op, "constant") for n, op in loaded.folded]
    absorbed += [Absorbed(n, op, "unused") for n, op in loaded.unused]
    unsupported = [
        replace(u, module=infos[u.node].module or "") if u.node in infos else u
        for u in w.unsupported
    ]
    return Imported(
        graph_name=model.graph.name or "",
        producer=model.producer_name or "",
        batch=w.batch,
        batch_axis=axis,
        static_batch=loaded.batch_symbol is None,
        file_batch=w.batch,
        inputs=list(w.inputs),
        layers=layers,
        absorbed=absorbed,
        unsupported=unsupported,
        outputs=[replace(o, layer=rename.get(o.layer, o.layer)) for o in outputs],
        node_count=loaded.node_count,
        node_names=list(loaded.node_names),
        read=constant_reader(model),
    )
