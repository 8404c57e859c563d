"""What transformers add to the graph: token embeddings, the rotary embedding, repeat_kv.

- `Gather(table, ids)` of a constant [V, E] table by integer ids is an `embedding` layer; the
  ids are a model input of dtype int64 (the suite draws them in range).
- onnxscript's RotaryEmbedding (rules.py: x·cos + rotate_half(x)·sin) is a `rope` layer. Its
  cos/sin tables are constants of the file; `rope` computes them from `theta`, so the tables are
  read back into theta and checked entry by entry (a scaled or shifted table is refused). The
  file's tables are also the layer's `cos`/`sin` state, so `opbench run model.onnx` uses them.
  When x is the usual head split of a projection's [B, S, E] output, the rope reads that
  tensor (`layout: rows`) and no transpose is made; otherwise it reads [B, H, S, D].
- RepeatKV (rules.py: repeat_kv's Unsqueeze + Expand) makes no layer: its output stands for
  the kv heads read G times, and attention reads it back as `kv_heads` (attention.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from opbench.importers.onnx import attention as A
from opbench.importers.onnx import views as V
from opbench.importers.onnx.handlers import Refused
from opbench.importers.onnx.rules import _const
from opbench.importers.onnx.steps import attr
from opbench.importers.onnx.walk import Walker


def _table_atol(seq: int) -> float:
    """How close the file's cos/sin tables must be to the ones `rope` computes: float32
    angles lose about an ulp of the position (2.4e-4 at position 4096)."""
    return 1e-4 + 1e-7 * seq


def embedding(w: Walker, node: Any) -> None:
    """Gather(table, ids) over axis 0 of a constant 2-D table: rows gathered by integer ids."""
    table, ids = node.inputs[:2]
    array = _const(table)
    if array is None or array.ndim != 2 or int(attr(node, "axis", 0)) != 0:
        raise Refused("a Gather of rows that is not a constant 2-D table over axis 0")
    if ids.dtype is None or not ids.dtype.is_integer():
        raise Refused("a Gather whose indices are not integers")
    canon, pos = w.canonical(ids.name)
    params = {"num_embeddings": int(array.shape[0]), "embedding_dim": int(array.shape[1])}
    shape = (*canon.shape, int(array.shape[1]))
    weights = {"weight": (table.name, "asis")}
    made = w.add_layer("embedding", params, [(canon, ids.name)], shape, w.body(node), weights)
    w.set_canonical(node.outputs[0].name, made, pos)


def is_embedding(node: Any) -> bool:
    """A Gather of a constant table's rows by computed ids (not a view of one tensor)."""
    return (
        not node.domain
        and node.op_type == "Gather"
        and len(node.inputs) > 1
        and node.inputs[0].const_value is not None
        and node.inputs[1].const_value is None
    )


def _table(value: Any, seq: int, d: int) -> np.ndarray:
    array = _const(value)
    if array is None:
        raise Refused("rotary embedding: cos/sin are not constants")
    if array.shape[-2:] != (seq, d) or array.size != seq * d:
        raise Refused(
            f"rotary embedding: a cos/sin table of shape {list(array.shape)}, not one [S, D]"
        )
    return array.reshape(seq, d).astype(np.float64)


def rope_theta(cos: np.ndarray, sin: np.ndarray) -> float:
    """The base θ of tables cos/sin [S, D] = [cos a, cos a] with a[t, i] = t · θ^(-2i/D) at
    positions 0 .. S-1, or Refused saying how they differ."""
    seq, d = cos.shape
    half = d // 2
    if seq < 2 or half < 2:
        raise Refused("rotary embedding: too few positions or frequencies to read θ from")
    # angle step from position 0 to 1 is the frequency itself (no wrap: every frequency ≤ 1)
    step = np.arctan2(sin[1, :half], cos[1, :half]) - np.arctan2(sin[0, :half], cos[0, :half])
    estimate = float(step[1] ** (-d / 2))  # float32 tables: a few parts in 1e6
    t = np.arange(seq, dtype=np.float64)[:, None]

    def fits(theta: float) -> bool:
        freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angles = np.concatenate([t * freq, t * freq], axis=1)
        atol = _table_atol(seq)
        return np.allclose(np.cos(angles), cos, atol=atol) and np.allclose(
            np.sin(angles), sin, atol=atol
        )

    # The shortest θ that gives the file's tables: 500000, not 500001.3.
    for digits in range(2, 8):
        theta = float(f"{estimate:.{digits}g}")
        if fits(theta):
            return theta
    raise Refused(
        "rotary embedding: the cos/sin tables are not cos/sin(t · θ^(-2i/D)) at positions "
        "0 .. S-1 (scaled, shifted or interleaved tables are not the suite's rope)"
    )


def rope(w: Walker, node: Any) -> None:
    """RotaryEmbedding(x, cos, sin) of x [B, H, S, D] (rotate-half, non-interleaved)."""
    x, cos, sin = node.inputs[:3]
    if attr(node, "interleaved", 0):
        raise Refused("an interleaved rotary embedding")
    _, _, seq, d = (int(n) for n in x.shape)
    theta = rope_theta(_table(cos, seq, d), _table(sin, seq, d))
    weights = {"cos": (cos.name, "asis"), "sin": (sin.name, "asis")}
    view = w.views[x.name]
    out = node.outputs[0].name
    try:
        split = A.head_split(view)
        if split.packed is not None:
            raise V.NotAView("a part of a packed tensor")
    except V.NotAView:
        canon, pos = w.canonical(x.name)
        if pos != 0 or len(canon.shape) != 4:
            raise Refused("rotary embedding: its input is not [B, H, S, D]") from None
        params = {"layout": "bhsd", "theta": theta}
        made = w.add_layer("rope", params, [(canon, x.name)], canon.shape, w.body(node), weights)
        w.set_canonical(out, made, 0)
        return
    canon = w.tensors[split.tensor]
    params = {"layout": "rows", "head_dim": split.head_dim, "theta": theta}
    made = w.add_layer("rope", params, [(canon, x.name)], canon.shape, w.body(node), weights)
    w.set_view_of(out, V.retarget(view, made.id, made.shape), made)


def repeat_kv(w: Walker, node: Any) -> None:
    """RepeatKV(x [B, Hkv, S, D]) → [B, Hkv, G, S, D]: a stand-in tensor only attention reads."""
    (x,) = node.inputs[:1]
    if w.batch > 1 and V.batch_dim(w.views[x.name]) != 0:
        raise Refused("repeat_kv of a tensor whose batch is not dim 0")
    _, heads, seq, d = (int(n) for n in x.shape)
    groups = int(attr(node, "groups"))
    stand_in = w.new_tensor((w.batch, heads, groups, seq, d), "")
    w.repeats[stand_in.id] = (x.name, groups, node)
    w.set_canonical(node.outputs[0].name, stand_in, 0)


TRANSFORMER_HANDLERS = {
    ("", "Gather"): embedding,
    ("ai.onnxruntime._fusion", "RotaryEmbedding"): rope,
    ("opbench", "RepeatKV"): repeat_kv,
}
