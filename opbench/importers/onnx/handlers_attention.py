"""Attention placed as one suite layer: the attention core of rules.py (q·kᵀ, softmax, ·v) and
ONNX's Attention node, with q, k and v read back as head splits (attention.py), repeat_kv read
as kv_heads, a mask that is constant (causal or none) or computed from a model input (the key
padding mask, masks.py), and a scale that must be the op's 1/sqrt(D). The forms the op cannot
be (past or present key/value, softcap) and the node's causal flag are the op's reading
(ops/attention_onnx.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from opbench.importers.onnx import attention as A
from opbench.importers.onnx import masks as M
from opbench.importers.onnx import views as V
from opbench.importers.onnx.canon import Canon
from opbench.importers.onnx.handlers import Refused
from opbench.importers.onnx.rules import _const
from opbench.importers.onnx.steps import attr, out_shape
from opbench.importers.onnx.walk import Walker
from opbench.ops.onnx_reading import OnnxReading

# ---- attention ------------------------------------------------------------------------------


def _attention_layer(
    w: Walker,
    node: Any,
    splits: list[A.HeadSplit],
    values: list[str],
    causal: bool,
    repeats: tuple[Any, ...] = (),
    mask: tuple[Canon, str, list[str]] | None = None,
) -> Canon:
    """One attention layer; its first node (what names it and what a profile row of the
    file matches) is the node that makes the output, the P·V MatMul. `repeats`: the
    repeat_kv nodes of k and v, computed by the layer as its kv_heads. `mask`: the key
    padding mask input (its tensor, value, and the nodes computing it not yet in a layer),
    read last."""
    q, k, v = splits
    body = w.body(node)
    nodes = [body[-1], *body[:-1], *(n for r in repeats for n in w.body(r))]
    also = [r.inputs[0].name for r in repeats]
    extra: list[tuple[Canon, str | None]] = []
    if mask is not None:
        extra = [(mask[0], mask[1])]
        nodes += mask[2]
    params: dict[str, Any] = {"heads": q.heads}
    if k.heads != q.heads:
        params["kv_heads"] = k.heads
    if causal:
        params["causal"] = True
    if mask is not None:
        params["mask"] = True
    out = (w.batch, q.seq, q.heads * q.head_dim)
    same = q.tensor == k.tensor == v.tensor
    packed = same and q.packed == (3, 0) and k.packed == (3, 1) and v.packed == (3, 2)
    if any(s.packed for s in splits) and not packed:
        raise Refused("q, k and v are parts of a packed tensor in another order")
    if same:  # one input: the packed q|k|v tensor, or self-attention on one tensor
        if packed:
            params["packed_qkv"] = True
        canon = w.tensors[q.tensor]
        return w.add_layer(
            "attention",
            params,
            [(canon, values[0]), *extra],
            out,
            nodes,
            also_reads=[*values[1:], *also],
        )
    inputs = [(w.tensors[s.tensor], value) for s, value in zip(splits, values, strict=True)]
    params["separate_qkv"] = True
    return w.add_layer("attention", params, [*inputs, *extra], out, nodes, also_reads=also)


def _unrepeated(w: Walker, value: str) -> V.View:
    """The value's view; one of repeat_kv's output read back as a view of the kv heads."""
    view = w.views[value]
    if view.tensor not in w.repeats:
        return view
    source, groups, _ = w.repeats[view.tensor]
    return A.through_repeat(view, w.tensors[view.tensor].shape, w.views[source], groups)


def _computed_mask(w: Walker, node: Any, seq: int) -> tuple[bool, tuple[Canon, str, list[str]]]:
    """(causal, mask input) of an additive mask computed from a model input (masks.py)."""
    found = w.masks.get(node.name)
    if found is None:
        raise V.NotAView("a mask that is neither a constant nor computed from one model input")
    causal = M.padding_mask(found, w.opsets, seq, "add")
    source = found.source.name
    canon, pos = w.canonical(source)
    if pos != 0 or len(canon.shape) != 2:
        raise V.NotAView("a padding mask whose input is not [B, N]")
    w.inputs[:] = [
        replace(i, padding_mask=True) if i.source == source and not i.constant else i
        for i in w.inputs
    ]
    taken = {n for layer in w.layers for n in layer.nodes}
    return causal, (canon, source, [n.name for n in found.nodes if n.name not in taken])


def attention_core(w: Walker, node: Any) -> None:
    """opbench AttentionCore(q, kᵀ, v[, mask]) from rules.py."""
    q, kt, v = (x.name for x in node.inputs[:3])
    try:
        splits = [
            A.head_split(_unrepeated(w, q)),
            A.head_split(_unrepeated(w, kt), seq_last=True),
            A.head_split(_unrepeated(w, v)),
        ]
        A.same_split(*splits)
        A.check_scale(attr(node, "scale"), splits[0].head_dim)
        kind = attr(node, "mask", "none")
        causal, mask = False, None
        if kind == "add" and node.inputs[3].const_value is None:
            causal, mask = _computed_mask(w, node, splits[0].seq)
        elif kind == "add":
            causal = A.causal_from_mask(_const(node.inputs[3]), splits[0].seq, "add")
        elif kind == "where":
            fill = float(_const(node.inputs[4]).reshape(-1)[0])
            causal = A.causal_from_mask(_const(node.inputs[3]), splits[0].seq, "keep", fill)
    except V.NotAView as exc:
        raise Refused(f"attention: {exc}") from None
    repeats = tuple(dict.fromkeys(
        w.repeats[w.views[x].tensor][2] for x in (kt, v) if w.views[x].tensor in w.repeats
    ))  # fmt: skip
    made = _attention_layer(w, node, splits, [q, kt, v], causal, repeats, mask)
    w.set_view_of(node.outputs[0].name, A.output_view(splits[0], made.id, w.batch), made)


def attention_node(w: Walker, node: Any, causal: bool) -> None:
    """ONNX Attention (opset 23): q, k, v as [B, H, S, D], or [B, S, E] with head counts."""
    q_heads, kv_heads = attr(node, "q_num_heads"), attr(node, "kv_num_heads")
    names = [x.name for x in node.inputs[:3]]
    try:
        three_d = len(node.inputs[0].shape) == 3
        found = [w.views[n] for n in names]
        if three_d:
            if not q_heads or kv_heads != q_heads:
                raise V.NotAView(
                    f"q_num_heads {q_heads} and kv_num_heads {kv_heads} (grouped-query)"
                )
            found = [A.from_3d(f, q_heads) for f in found]
        splits = [A.head_split(f) for f in found]
        A.same_split(*splits)
        A.check_scale(attr(node, "scale"), splits[0].head_dim)
        mask = node.inputs[3] if len(node.inputs) > 3 else None
        if mask is not None:
            array = _const(mask)
            if array is None:
                raise V.NotAView("a mask that is not a constant")
            kind = "keep" if array.dtype == bool else "add"
            causal = causal or A.causal_from_mask(array, splits[0].seq, kind, float("-inf"))
    except V.NotAView as exc:
        raise Refused(f"attention: {exc}") from None
    made = _attention_layer(w, node, splits, names, causal)
    view = A.output_view(splits[0], made.id, w.batch)
    if three_d:  # back from [.., H, S, D] to the node's [.., S, E]
        rank = len(view.dims)
        view = V.transpose(view, (*range(rank - 3), rank - 2, rank - 3, rank - 1))
        view = V.reshape(view, out_shape(node))
    w.set_view_of(node.outputs[0].name, view, made)


def attention(w: Walker, node: Any, op: str, reading: OnnxReading) -> None:
    """The attention op's reading placed (ops/onnx_reading.ATTENTION)."""
    if node.op_type == "AttentionCore":
        return attention_core(w, node)
    attention_node(w, node, bool(reading.params.get("causal")))
