"""Each ONNX node (or rule call node) as suite layers: dispatch, views, joins and placeholders.

handlers_ops.py holds the ops with weights and attention; this module the glue: which handler
a node gets, view nodes, elementwise activations, Add/Mul/Concat joins (a constant operand
becomes a model input fed with the file's values), and the placeholder a node nothing handles
becomes, so that the graph stays connected.
"""

from __future__ import annotations

import re
from typing import Any

from opbench.importers.onnx import views as V
from opbench.importers.onnx.canon import Canon, Step
from opbench.importers.onnx.file_data import canonical_constant
from opbench.importers.onnx.model import ModelInput
from opbench.importers.onnx.rules import _const, _scalar
from opbench.importers.onnx.steps import VIEW_OPS, _cax, attr, out_shape, step_layers, view_op
from opbench.importers.onnx.walk import Walker
from opbench.ops.kinds import epilogue_ops
from opbench.ops.registry import OPS


class Refused(ValueError):
    """The node is not a suite op here; the message says why (one line for the user)."""


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


def view_node(w: Walker, node: Any) -> None:
    source = data_inputs(node)
    if len(source) != 1:
        raise Refused(f"{node.op_type} of {len(source)} data inputs")
    src = source[0].name
    for index, out in enumerate(node.outputs):
        if not out.name:
            continue
        try:
            if w.eager_views(node):
                raise V.NotAView("a layer of its own in the file")
            w.set_view(node, out.name, view_op(node, w.views[src], index), src)
        except V.NotAView:  # data moves: the node becomes layers on the canonical tensor
            canon, pos = w.canonical(src)
            made, made_pos = step_layers(w, Step(node, out.name), canon, pos)
            w.set_canonical(out.name, made, made_pos)


# ---- elementwise ----------------------------------------------------------------------------


def elementwise_input(w: Walker, value: str) -> tuple[Canon, V.View]:
    """An elementwise op runs on the canonical tensor when the value is that tensor (batch
    anywhere) or a layer's own output; after reshapes/transposes it needs them as layers
    first, so that the layers keep the graph's order."""
    view = w.views[value]
    start, steps = w.chains[value]
    if V.canonical_position(view) is not None or not steps:
        return w.tensor(view), view
    canon, pos = w.canonical(value)
    return canon, V.identity(canon.id, canon.shape, pos)


def unary(w: Walker, node: Any, op: str, params: dict[str, Any] | None = None) -> None:
    (x,) = data_inputs(node)[:1]
    canon, view = elementwise_input(w, x.name)
    index = w.layer_of(canon)
    producer = w.layers[index] if index is not None else None
    if (
        producer is not None
        and not params
        and op in epilogue_ops()  # the conv's or linear's epilogue applies it (ops/kinds.py)
        and producer.op in ("conv2d", "linear")
        and producer.params.get("activation", "none") == "none"
        and w.chains[x.name][1] == ()
        and w.consumers.get(x.name, 0) == 1
        and w.fold_activations(node, producer)
    ):
        from dataclasses import replace

        nodes = (*producer.nodes, *w.body(node))
        w.replace_layer(
            index,
            replace(
                producer,
                params={**producer.params, "activation": OPS[op].epilogue},
                nodes=nodes,
            ),
        )
        w.views[node.outputs[0].name] = view
        w.chains[node.outputs[0].name] = (node.outputs[0].name, ())
        if x.name in w.canon_of:
            w.canon_of[node.outputs[0].name] = w.canon_of[x.name]
        return
    made = w.add_layer(op, dict(params or {}), [(canon, x.name)], canon.shape, w.body(node))
    w.set_view_of(node.outputs[0].name, V.retarget(view, made.id, made.shape), made)


def clip(w: Walker, node: Any) -> None:
    low = _scalar(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    high = _scalar(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if low is None:
        low = attr(node, "min")
    if high is None:
        high = attr(node, "max")
    if low == 0.0 and high == 6.0:
        return unary(w, node, "relu6")
    if low == 0.0 and (high is None or high >= 3.4e38):
        return unary(w, node, "relu")
    raise Refused(f"Clip({low}, {high}) is neither relu nor relu6")


# ---- joins ----------------------------------------------------------------------------------


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


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    return len(small) == len(big) and all(s in (1, b) for s, b in zip(small, big, strict=True))


def binary(w: Walker, node: Any) -> None:
    op = {"Add": "add", "Mul": "mul"}.get(node.op_type)
    if op is None:
        raise Refused(f"{node.op_type} is not a suite op (add and mul are)")
    a, b = node.inputs[:2]
    out = node.outputs[0]
    if a.const_value is not None or b.const_value is not None:
        data, const = (b, a) if a.const_value is not None else (a, b)
        canon, pos = w.canonical(data.name)
        other = constant_input(w, const, len(out_shape(node)), pos)
        made = w.add_layer(op, {}, [(canon, data.name), (other, None)], canon.shape, w.body(node))
        w.set_canonical(out.name, made, pos)
        return
    va, vb = w.views[a.name], w.views[b.name]
    if V.same_layout(va, vb):
        ta, tb = w.tensor(va), w.tensor(vb)
        made = w.add_layer(op, {}, [(ta, a.name), (tb, b.name)], ta.shape, w.body(node))
        w.set_view_of(out.name, V.retarget(va, made.id, made.shape), made)
        return
    (ca, pa), (cb, pb) = w.canonical(a.name), w.canonical(b.name)
    if pa != pb and w.batch > 1:
        raise Refused("the operands hold the batch in different dims")
    first, second = ((ca, a), (cb, b)) if _broadcasts(cb.shape, ca.shape) else ((cb, b), (ca, a))
    if not _broadcasts(second[0].shape, first[0].shape):
        raise Refused(f"operands {list(ca.shape)} and {list(cb.shape)} do not broadcast")
    made = w.add_layer(
        op,
        {},
        [(first[0], first[1].name), (second[0], second[1].name)],
        first[0].shape,
        w.body(node),
    )
    w.set_canonical(out.name, made, pa)


def concat(w: Walker, node: Any) -> None:
    shape = out_shape(node)
    rank = len(shape)
    axis = int(attr(node, "axis", 0)) % rank
    found = [w.canonical(v.name) for v in data_inputs(node)]
    positions = {pos for _, pos in found}
    if len(positions) != 1:
        raise Refused("the inputs hold the batch in different dims")
    pos = positions.pop()
    if axis == pos:
        raise Refused("a concat along the batch")
    items: list[tuple[Canon, str | None]] = []
    for value in node.inputs:
        if value.const_value is not None:
            items.append((constant_input(w, value, rank, pos), None))
        else:
            items.append((w.canonical(value.name)[0], value.name))
    made = w.add_layer(
        "concat", {"axis": _cax(axis, pos)}, items, with_batch(shape, pos, w.batch), w.body(node)
    )
    w.set_canonical(node.outputs[0].name, made, pos)


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
    return not node.domain and node.op_type in VIEW_OPS
