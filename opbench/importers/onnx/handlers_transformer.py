"""What the importer places of transformers' pieces; the ops read their own parameters.

- `Gather(table, ids)` of a constant table by computed ids is an `embedding` layer (the op's
  reading, ops/embedding.py); `is_embedding` tells it from a Gather that is a view. The ids are
  a model input of dtype int64 (the suite draws them in range).
- onnxscript's RotaryEmbedding (rules.py: x·cos + rotate_half(x)·sin) is a `rope` layer: the
  op reads theta back from the file's cos/sin tables (ops/rope.py, `rope_theta`). Placed here:
  when x is the usual head split of a projection's [B, S, E] output, the rope reads that
  tensor (`layout: rows`, `head_dim`) and no transpose is made; otherwise it reads
  [B, H, S, D] (`layout: bhsd`).
- RepeatKV (rules.py: repeat_kv's Unsqueeze + Expand) makes no layer: its output stands for
  the kv heads read G times, and attention reads it back as `kv_heads` (attention.py).
"""

from __future__ import annotations

from typing import Any

from opbench.importers.onnx import attention as A
from opbench.importers.onnx import views as V
from opbench.importers.onnx.handlers import Refused
from opbench.importers.onnx.layouts import weights_of
from opbench.importers.onnx.steps import attr
from opbench.importers.onnx.walk import Walker
from opbench.ops.onnx_reading import OnnxReading
from opbench.ops.rope import rope_theta

__all__ = ["is_embedding", "repeat_kv", "rope", "rope_theta"]


def is_embedding(node: Any) -> bool:
    """A Gather of a constant table's rows by computed ids (not a view of one tensor)."""
    return (
        not node.domain
        and node.op_type == "Gather"
        and len(node.inputs) > 1
        and node.inputs[0].const_value is not None
        and node.inputs[1].const_value is None
    )


def rope(w: Walker, node: Any, op: str, reading: OnnxReading) -> None:
    """The rope's layer on x [B, H, S, D], or on the rows its heads are split from."""
    x = node.inputs[0]
    weights = weights_of(node, reading)
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
        params = {"layout": "bhsd", **reading.params}
        made = w.add_layer(op, params, [(canon, x.name)], canon.shape, w.body(node), weights)
        w.set_canonical(out, made, 0)
        return
    canon = w.tensors[split.tensor]
    params = {"layout": "rows", "head_dim": split.head_dim, **reading.params}
    made = w.add_layer(op, params, [(canon, x.name)], canon.shape, w.body(node), weights)
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
