"""The ONNX forms of the transformer ops (export/onnx_ops.py's table takes them from here):

- embedding: Gather(table, ids, axis=0); a position embedding gathers the constant positions
  offset .. offset + S - 1 and Expands them over the batch;
- rope: x · cos + rotate_half(x) · sin with the layer's cos/sin tables as initializers (Hugging
  Face's exported form); rows/packed rows are reshaped to [B, S, n, D] first, the v heads of
  packed rows carried through with cos = 1, sin = 0 (exact);
- attention with `layout: bhsd`, a key padding mask, or a KV cache (`kv_len`, `append`):
  ONNX Attention (opset 23) with an explicit boolean mask (causal aligned with the last
  queries, and the padding mask), so neither depends on how a runtime combines is_causal
  with attn_mask; bhsd output transposed back to [B, S, H D]; a cache is an initializer, the
  append a Concat of its first N - S slots with the new k and v (the same values the step
  reads after writing them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from opbench.spec.model import LayerSpec


def _ints(scope, key: str, values) -> str:
    return scope.weight(key, np.array(values, dtype=np.int64))


def embedding(scope, ids: str, w, layer: LayerSpec) -> str:
    p = layer.params
    table = scope.weight("weight", w["weight"])
    if not p["positions"]:
        return scope.one("Gather", [table, ids], axis=0)
    seq = layer.input_shape[-1]
    positions = _ints(scope, "positions", np.arange(p["offset"], p["offset"] + seq))
    rows = scope.one("Gather", [table, positions], axis=0)
    return scope.one("Expand", [rows, _ints(scope, "shape", layer.output_shape)])


def _rotate_half(scope, x: str, d: int, rank: int, interleaved: bool) -> str:
    """[-x2, x1] of each pair along the last axis of a rank-`rank` tensor."""
    axis = rank - 1
    if interleaved:
        pairs = scope.one("Reshape", [x, _ints(scope, "pairs", [0] * axis + [d // 2, 2])])
        first, second = scope.node("Split", [pairs], outputs=2, axis=rank, num_outputs=2)
        turned = scope.one("Concat", [scope.one("Neg", [second]), first], axis=rank)
        return scope.one("Reshape", [turned, _ints(scope, "unpairs", [0] * axis + [d])])
    first, second = scope.node("Split", [x], outputs=2, axis=axis, num_outputs=2)
    return scope.one("Concat", [scope.one("Neg", [second]), first], axis=axis)


def rope(scope, x: str, w, layer: LayerSpec) -> str:
    from opbench.ops.rope import Rope

    p = layer.params
    _, d, rotated = Rope.geometry(layer.input_shape, p)
    cos, sin = w["cos"], w["sin"]  # [S, D]
    if p["layout"] == "bhsd":
        heads = x
    else:  # [B, S, n, D], tables [S, n, D]: the v heads of packed rows turn by angle 0
        n = layer.input_shape[-1] // d
        cos = np.repeat(cos[:, None, :], n, axis=1)
        sin = np.repeat(sin[:, None, :], n, axis=1)
        cos[:, rotated // d :], sin[:, rotated // d :] = 1.0, 0.0
        heads = scope.one("Reshape", [x, _ints(scope, "heads", [0, 0, n, d])])
    turned = _rotate_half(scope, heads, d, 4, p["style"] == "interleaved")
    y = scope.one("Add", [scope.one("Mul", [heads, scope.weight("cos", cos)]),
                          scope.one("Mul", [turned, scope.weight("sin", sin)])])  # fmt: skip
    if p["layout"] == "bhsd":
        return y
    return scope.one("Reshape", [y, _ints(scope, "rows", [0, 0, -1])])


def needs_explicit_form(p) -> bool:
    """Attention that onnx_ops' plain form does not cover."""
    return p["layout"] == "bhsd" or p["mask"] or p["kv_len"] is not None


def attention(scope, x: Any, w, layer: LayerSpec) -> str:
    """bhsd / mask / KV-cache attention as ONNX Attention with an explicit boolean mask."""
    from opbench.ops.attention import Attention

    p = layer.params
    xs = (x,) if isinstance(x, str) else tuple(x)
    mask = xs[-1] if p["mask"] else None
    xs = xs[:-1] if p["mask"] else xs
    seq, heads, kv_heads, d, n = Attention.dims(layer.input_shapes, p)
    if p["kv_len"] is not None and not p["separate_qkv"]:
        q = xs[0]
        if p["append"]:
            sizes = _ints(scope, "split", [heads * d, kv_heads * d, kv_heads * d])
            q, k_new, v_new = scope.node("Split", [xs[0], sizes], outputs=3, axis=-1)
            past = [_ints(scope, key, v) for key, v in (("past_start", [0]),
                    ("past_end", [n - seq]), ("past_axis", [1]))]  # fmt: skip
            k, v = (scope.one("Concat", [scope.one("Slice", [scope.weight(key, w[key]), *past]),
                                         new], axis=1)
                    for key, new in (("k_cache", k_new), ("v_cache", v_new)))  # fmt: skip
        else:
            k, v = scope.weight("k_cache", w["k_cache"]), scope.weight("v_cache", w["v_cache"])
    else:
        q, k, v = xs
    seen = np.ones((seq, n), dtype=bool)
    if p["causal"]:
        seen = np.tril(seen, n - seq)
    allowed = scope.weight("visible", seen)
    if mask is not None:  # [B, N] -> [B, 1, 1, N], and the causal part
        keys = scope.one("Cast", [mask], to=9)  # BOOL
        keys = scope.one("Unsqueeze", [keys, _ints(scope, "axes", [1, 2])])
        allowed = scope.one("And", [keys, allowed])
    if p["layout"] == "bhsd":
        out = scope.one("Attention", [q, k, v, allowed])
        out = scope.one("Transpose", [out], perm=[0, 2, 1, 3])
        return scope.one("Reshape", [out, _ints(scope, "merged", [0, 0, -1])])
    return scope.one("Attention", [q, k, v, allowed], q_num_heads=heads, kv_num_heads=kv_heads)
