"""Attention masks computed from a model input (Hugging Face's `attention_mask` [B, N]): which
nodes compute them, and whether what they compute is the suite's key padding mask.

The exporters write the mask as whatever torch traced (a Cast, a GatherND with constant
indices that vmap left, an And with the causal mask, a Where to 0/-inf). Rather than walking
those nodes by hand, the subgraph from the model input to the mask is cut out and evaluated
with ONNX's reference evaluator on a few probe masks; it is the suite's `mask: true`
(key j of sequence b visible where mask[b, j] != 0, with or without `causal`) when it
computes exactly that on every probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from opbench.importers.onnx.views import NotAView

# An additive mask entry at or below this hides the position (attention.py's _HIDDEN).
_HIDDEN = -1e4


@dataclass(frozen=True)
class MaskGraph:
    source: Any  # the model input (onnx_ir.Value) the mask is computed from
    nodes: tuple[Any, ...]  # the nodes from it to the mask, in graph order
    value: Any  # the mask value (onnx_ir.Value)


def mask_graph(value: Any, graph_inputs: set[str], order: dict[int, int]) -> MaskGraph:
    """The nodes computing `value` from one model input and constants (in graph order:
    `order` maps id(node) to its place), or NotAView."""
    seen: dict[int, Any] = {}
    sources: dict[str, Any] = {}
    stack = [value]
    while stack:
        v = stack.pop()
        if v is None or v.const_value is not None:
            continue
        if v.name in graph_inputs:
            sources[v.name] = v
            continue
        node = v.producer()
        if node is None:
            raise NotAView(f"the mask reads {v.name!r}, neither an input nor a constant")
        if id(node) in seen:
            continue
        if node.domain:
            raise NotAView("the mask is computed with a fused op")
        seen[id(node)] = node
        stack.extend(node.inputs)
    if len(sources) != 1:
        raise NotAView(f"a mask computed from {len(sources)} model inputs")
    (source,) = sources.values()
    nodes = tuple(sorted(seen.values(), key=lambda n: order[id(n)]))
    return MaskGraph(source, nodes, value)


def _evaluator(mask: MaskGraph, opsets: dict[str, int]):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    from onnxscript import ir

    constants = {}
    for node in mask.nodes:
        for v in node.inputs:
            if v is not None and v.const_value is not None and v.name not in constants:
                constants[v.name] = ir.serde.serialize_tensor(v.const_value)
                constants[v.name].name = v.name
    graph = helper.make_graph(
        [ir.serde.serialize_node(n) for n in mask.nodes],
        "mask",
        [helper.make_tensor_value_info(mask.source.name, 7, list(mask.source.shape))],
        [helper.make_empty_tensor_value_info(mask.value.name)],
        list(constants.values()),
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items() if not d]
    )
    return ReferenceEvaluator(model)


def _probes(batch: int, keys: int) -> list[np.ndarray]:
    """Masks of 0/1 with every row keeping key 0: prefixes and scattered ones."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(3):
        lengths = rng.integers(1, keys + 1, size=batch)
        out.append((np.arange(keys)[None, :] < lengths[:, None]).astype(np.int64))
    scattered = (rng.random((batch, keys)) < 0.5).astype(np.int64)
    scattered[:, 0] = 1
    out.append(scattered)
    return out


def padding_mask(mask: MaskGraph, opsets: dict[str, int], queries: int, kind: str) -> bool:
    """Whether the subgraph is the key padding mask (`kind` "add": 0 / -inf added to the
    scores) and whether it is also causal; NotAView when it is something else."""
    shape = tuple(int(d) for d in mask.source.shape)
    if len(shape) != 2 or mask.source.dtype is None or not mask.source.dtype.is_integer():
        raise NotAView(f"a mask computed from an input of shape {list(shape)}, not int [B, N]")
    if kind != "add":
        raise NotAView("a computed mask that is not added to the scores")
    batch, keys = shape
    try:
        run = _evaluator(mask, opsets)
        probes = [(m, np.asarray(run.run(None, {mask.source.name: m})[0])) for m in _probes(*shape)]
    except Exception as exc:  # noqa: BLE001 - an op the evaluator cannot run: not ours
        raise NotAView(f"the mask could not be evaluated ({type(exc).__name__})") from None
    causal_seen = np.tril(np.ones((queries, keys), dtype=bool), keys - queries)
    for causal in (False, True):
        ok = True
        for m, got in probes:
            seen = (m != 0)[:, None, None, :] & (causal_seen if causal else True)
            seen = np.broadcast_to(seen, (batch, 1, queries, keys))
            try:
                got = np.broadcast_to(got, (batch, 1, queries, keys))
            except ValueError:
                raise NotAView(f"a mask of shape {list(got.shape)}") from None
            if not (np.all(got[seen] == 0) and np.all(got[~seen] <= _HIDDEN)):
                ok = False
                break
        if ok:
            return causal
    raise NotAView("a mask computed from the input that is not a key padding mask")
