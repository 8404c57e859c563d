"""`handle`: which op reads a node, asked of the registry (plugins' ops too), never a table here.

Each op declares the ONNX nodes it reads (`Op.onnx_imports`, derived by `ops.kinds.onnx_imports`)
and reads one in `Op.read_onnx` from its description (layouts.describe); the first op whose
reading takes the node makes its layer, placed by the reading's layout (layouts.py, and
attention's and rope's in handlers_attention.py / handlers_transformer.py). What stays here:
view nodes (views.py, steps.py), a Gather that is an embedding rather than a view, and
rules.py's RepeatKV, which is no op's layer (attention reads it back as kv_heads).
"""

from __future__ import annotations

from typing import Any

from opbench.importers.onnx.handlers import Refused, is_view_node, view_node
from opbench.importers.onnx.handlers_attention import attention
from opbench.importers.onnx.handlers_transformer import is_embedding, repeat_kv, rope
from opbench.importers.onnx.layouts import LAYOUTS, describe
from opbench.importers.onnx.walk import Walker
from opbench.ops import onnx_reading as R
from opbench.ops.kinds import onnx_imports

PLACES = {**LAYOUTS, R.HEADS: rope, R.ATTENTION: attention}
#: rules.py's nodes that are the importer's own: no op's layer.
OWN = {("opbench", "RepeatKV"): repeat_kv}


def declared_op(w: Walker, node: Any) -> bool:
    """The node as the layer of the first op that reads it (`onnx_imports`, `read_onnx`); False
    when no op declares it. Refused: every op that declares it declined or refused it (the
    first reason given)."""
    readings = onnx_imports().get((node.domain or "", node.op_type))
    if not readings:
        return False
    described = describe(node)
    reasons = []
    for op, implied in readings:
        try:
            reading = op.read_onnx(described, implied)
        except Refused as exc:
            reasons.append(str(exc))
            continue
        if reading is not None:
            place = PLACES.get(reading.layout)
            if place is None:
                raise Refused(
                    f"{op.name} reads it in a layout the importer has not: {reading.layout}"
                )
            place(w, node, op.name, reading)
            return True
    if reasons:
        raise Refused(reasons[0])
    raise Refused(f"no op reads {node.op_type} with attributes {dict(described.attributes)}")


def handle(w: Walker, node: Any) -> None:
    """Make the node's layers, or raise Refused / NotAView saying why not."""
    if is_view_node(node) and not is_embedding(node):
        return view_node(w, node)
    own = OWN.get((node.domain or "", node.op_type))
    if own is not None:
        return own(w, node)
    if not declared_op(w, node):
        raise Refused("not a supported op")
