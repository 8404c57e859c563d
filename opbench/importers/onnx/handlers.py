"""The importer's glue around the ops' readings: view nodes, constant operands as model
inputs, and the placeholder a node nothing reads becomes, so that the graph stays connected.

dispatch.py asks which op reads a node (ops declare it: `Op.onnx_imports`, `Op.read_onnx`) and
layouts.py places the layer the op's reading makes.
"""

from __future__ import annotations

import re
from typing import Any

from opbench.errors import NodeRefused as Refused
from opbench.importers.onnx import views as V
from opbench.importers.onnx.canon import Canon, Step
from opbench.importers.onnx.file_data import canonical_constant
from opbench.importers.onnx.model import ModelInput
from opbench.importers.onnx.rules import _const
from opbench.importers.onnx.steps import VIEW_OPS, step_layers, view_op
from opbench.importers.onnx.walk import Walker


def data_inputs(node: Any) -> list[Any]:
    return [v for v in node.inputs if v is not None and v.const_value is None]


def with_batch(shape: tuple[int, ...], pos: int, batch: int) -> tuple[int, ...]:
    """An ONNX shape with its batch dim (at `pos`, or ABSENT) moved to the front."""
    if pos == V.ABSENT:
        return (batch, *shape)
    if shape[pos] != batch:
        raise Refused(f"dim {pos} of {list(shape)} is not the batch ({batch})")
    return (batch, *shape[:pos], *shape[pos + 1 :])


# ---- views --------------------------------------------------------------------------------


def is_zero_pad(node: Any) -> bool:
    """A Pad whose pads are a constant of zeros (Swin pads a map to a multiple of its window,
    by nothing where it already is one): the identity, whatever its mode or fill value."""
    if node.domain or node.op_type != "Pad" or len(node.inputs) < 2:
        return False
    pads = _const(node.inputs[1])
    return pads is not None and not pads.any()


def view_node(w: Walker, node: Any) -> None:
    """A view node's output as a view of its input; where data moves, the layers it becomes.
    A zero Pad is the identity, kept as a view like Identity: absorbed into the layer that
    reads through it and listed there (`Layer.absorbed`), never dropped unseen."""
    source = data_inputs(node)
    if len(source) != 1:
        raise Refused(f"{node.op_type} of {len(source)} data inputs")
    src = source[0].name
    for index, out in enumerate(node.outputs):
        if not out.name:
            continue
        try:
            if is_zero_pad(node):
                w.set_view(node, out.name, w.views[src], src)
                continue
            if w.eager_views(node):
                raise V.NotAView("a layer of its own in the file")
            w.set_view(node, out.name, view_op(node, w.views[src], index), src)
        except V.NotAView:  # data moves: the node becomes layers on the canonical tensor
            canon, pos = w.canonical(src)
            made, made_pos = step_layers(w, Step(node, out.name), canon, pos)
            w.set_canonical(out.name, made, made_pos)


# ---- constant operands ------------------------------------------------------------------


def _name(text: str) -> str:
    """A model input's name (letters, digits, '_' and '-': no dots)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-") or "const"


def constant_input(w: Walker, value: Any, rank: int, pos: int) -> Canon:
    """A constant operand of a join as a model input (batch first, broadcast over the batch)."""
    try:
        canon_array = canonical_constant(_const(value), rank, pos)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    shape = (w.batch, *canon_array.shape[1:])
    key = (value.name, shape)
    if key not in w.constant_inputs:
        base = name = _name(value.name)
        taken = {i.name for i in w.inputs}
        k = 2
        while name in taken or name == "input":
            name, k = f"{base}_{k}", k + 1
        item = ModelInput(name, shape, value.name, constant=value.name, batch_axis=pos, rank=rank)
        w.inputs.append(item)
        w.constant_inputs[key] = name
        w.new_tensor(shape, name)
    name = w.constant_inputs[key]
    return next(c for c in w.tensors.values() if c.producer == name)


# ---- nothing handles it ---------------------------------------------------------------------


def placeholder(w: Walker, node: Any) -> None:
    """A layer that stands for an unsupported node and keeps the graph connected."""
    reads: list[tuple[Canon, str | None]] = []
    pos = 0
    for k, value in enumerate(data_inputs(node)):
        try:
            canon, p = w.canonical(value.name)
        except V.NotAView:
            canon, p = w.tensor(w.views[value.name]), V.batch_dim(w.views[value.name])
        reads.append((canon, value.name))
        if k == 0 and p is not None:
            pos = p
    if not reads:
        # A node of constants alone (a random draw, say): the placeholder reads the first
        # model input for its batch only, so that it is a layer of the graph like any other.
        first = w.inputs[0]
        reads.append((next(c for c in w.tensors.values() if c.producer == first.name), None))
    for out in node.outputs:
        if not out.name or out.shape is None:
            continue
        shape = tuple(int(d) for d in out.shape)
        if pos != V.ABSENT and (pos >= len(shape) or shape[pos] != w.batch):
            hits = [i for i, n in enumerate(shape) if n == w.batch]
            pos = hits[0] if hits else V.ABSENT
        canon_shape = with_batch(shape, pos, w.batch) if pos != V.ABSENT or w.batch == 1 else None
        if canon_shape is None:
            raise Refused("its output has no batch dim to keep the graph connected with")
        params: dict[str, Any] = {"stands_for": node.op_type, "shape": list(canon_shape[1:])}
        if len(reads) != 1:
            params["reads"] = len(reads)
        made = w.add_layer(
            "placeholder", params, reads, canon_shape, w.body(node), placeholder_for=node.op_type
        )
        w.set_canonical(out.name, made, pos)


def is_view_node(node: Any) -> bool:
    return (not node.domain and node.op_type in VIEW_OPS) or is_zero_pad(node)
