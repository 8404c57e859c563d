"""The attention op's ONNX side (ops/attention.py declares it; its module is at the length
limit): the nodes it reads as attention, and the nodes it is written as.

Reading (`read_attention`): ONNX's Attention (opset 23) and importers/onnx/rules.py's
AttentionCore. What is the op's: the forms it cannot be (present or past key/value, softcap)
and the causal flag a node says. What the importer reads from the graph
(importers/onnx/attention.py): the heads, kv_heads and packing of q, k and v (head splits,
repeat_kv), a mask that is causal or a key padding mask, and a scale that must be 1/sqrt(D).

Writing (`write_attention`, the op's `to_onnx`), always ONNX Attention (opset 23, which
scales by 1/√D):
- one input: q = k = v = the input; packed q | k | v split into three (grouped heads: a
  Split by sizes);
- `separate_qkv`: the three inputs as they are (causal only with as many keys as queries:
  ONNX's is_causal aligns the queries with the first keys);
- `layout: bhsd`, a key padding mask, or a KV cache (`kv_len`, `append`): an explicit
  boolean mask (causal aligned with the last queries, and the padding mask), so neither
  depends on how a runtime combines is_causal with attn_mask; bhsd output transposed back
  to [B, S, H D]; a cache is an initializer, the append a Concat of its first N - S slots
  with the new k and v (the same values the step reads after writing them).
The writer takes the op (for its `dims`): ops/attention.py imports this module, not the
other way round.
"""

from __future__ import annotations

from typing import Any

from opbench.errors import InputError
from opbench.ops.onnx_reading import ATTENTION, OnnxNode, OnnxReading, Refused


def read_attention(node: OnnxNode) -> OnnxReading:
    if node.op_type == "AttentionCore":  # q, kᵀ, v [, mask | keep, fill]
        return OnnxReading({}, ATTENTION, reads=(0, 1, 2))
    if any(o is not None for o in node.outputs[1:]):
        raise Refused("Attention with present key/value or score outputs")
    if any(x is not None for x in node.inputs[4:]):
        raise Refused("Attention with past key/value inputs")
    if node.attr("softcap", 0.0):
        raise Refused("Attention with softcap")
    params = {"causal": True} if node.attr("is_causal", 0) else {}
    return OnnxReading(params, ATTENTION, reads=(0, 1, 2))


def write_attention(op: Any, scope: Any, x: Any, weights: Any, layer: Any) -> str:
    """The layer's nodes, added through `scope`; the output tensor's name."""
    p = layer.params
    if p["layout"] == "bhsd" or p["mask"] or p["kv_len"] is not None:
        return _explicit(op, scope, x, weights, layer)
    heads = p["heads"]
    kv_heads = p["kv_heads"] or heads
    xs = (x,) if isinstance(x, str) else tuple(x)
    if p["separate_qkv"]:  # three inputs: q, k and v from separate projections
        q, k, v = xs
        (_, seq, _), (_, keys, _) = layer.input_shapes[0], layer.input_shapes[1]
        if p["causal"] and keys != seq:
            raise InputError(
                f"layer {scope.layer!r}: causal attention over more keys than queries has no "
                "ONNX form (ONNX Attention's is_causal aligns the queries with the first keys)"
            )
    elif p["packed_qkv"] and kv_heads != heads:
        head_dim = layer.input_shape[-1] // (heads + 2 * kv_heads)
        sizes = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        q, k, v = scope.node("Split", [xs[0], scope.ints("split", sizes)], outputs=3, axis=-1)
    elif p["packed_qkv"]:
        q, k, v = scope.node("Split", [xs[0]], outputs=3, axis=-1, num_outputs=3)
    else:
        q = k = v = xs[0]
    return scope.one(
        "Attention", [q, k, v], q_num_heads=heads, kv_num_heads=kv_heads,
        is_causal=int(p["causal"]),
    )  # fmt: skip


def _explicit(op: Any, scope: Any, x: Any, weights: Any, layer: Any) -> str:
    """bhsd / mask / KV-cache attention as ONNX Attention with an explicit boolean mask."""
    import numpy as np

    p = layer.params
    xs = (x,) if isinstance(x, str) else tuple(x)
    mask = xs[-1] if p["mask"] else None
    xs = xs[:-1] if p["mask"] else xs
    seq, heads, kv_heads, d, n = op.dims(layer.input_shapes, p)
    if p["kv_len"] is not None and not p["separate_qkv"]:
        q = xs[0]
        if p["append"]:
            sizes = scope.ints("split", [heads * d, kv_heads * d, kv_heads * d])
            q, k_new, v_new = scope.node("Split", [xs[0], sizes], outputs=3, axis=-1)
            past = [scope.ints(key, v) for key, v in (("past_start", [0]),
                    ("past_end", [n - seq]), ("past_axis", [1]))]  # fmt: skip
            k, v = (scope.one("Concat", [scope.one("Slice", [scope.weight(key, weights[key]),
                                                             *past]), new], axis=1)
                    for key, new in (("k_cache", k_new), ("v_cache", v_new)))  # fmt: skip
        else:
            k = scope.weight("k_cache", weights["k_cache"])
            v = scope.weight("v_cache", weights["v_cache"])
    else:
        q, k, v = xs
    seen = np.ones((seq, n), dtype=bool)
    if p["causal"]:
        seen = np.tril(seen, n - seq)
    allowed = scope.weight("visible", seen)
    if mask is not None:  # [B, N] -> [B, 1, 1, N], and the causal part
        keys = scope.one("Cast", [mask], to=9)  # BOOL
        keys = scope.one("Unsqueeze", [keys, scope.ints("axes", [1, 2])])
        allowed = scope.one("And", [keys, allowed])
    if p["layout"] == "bhsd":
        out = scope.one("Attention", [q, k, v, allowed])
        out = scope.one("Transpose", [out], perm=[0, 2, 1, 3])
        return scope.one("Reshape", [out, scope.ints("merged", [0, 0, -1])])
    return scope.one("Attention", [q, k, v, allowed], q_num_heads=heads, kv_num_heads=kv_heads)
