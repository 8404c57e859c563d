"""An op's reading of a node (ops/onnx_reading.py) placed on the walk: the importer's part.

`describe` gives an op the node as plain values (`OnnxNode`: decoded attributes, constant
inputs as numpy, shapes); the op answers with an `OnnxReading` (parameters, weights, the inputs
it reads, a layout), and the layout's function here makes the layer: where the batch sits, which
canonical tensor or view each input is, constant operands as model inputs, and the view the
output is. attention and rope place theirs in handlers_attention.py and handlers_transformer.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from onnxscript import ir

from opbench.importers.onnx import views as V
from opbench.importers.onnx.canon import Canon
from opbench.importers.onnx.handlers import Refused, constant_input, data_inputs, with_batch
from opbench.importers.onnx.rules import _const
from opbench.importers.onnx.steps import _cax, attr, out_shape
from opbench.importers.onnx.walk import Walker
from opbench.ops import onnx_reading as R
from opbench.ops.kinds import epilogue_ops
from opbench.ops.registry import OPS

# ---- the node as an op sees it --------------------------------------------------------------


def _value(value: Any) -> R.OnnxValue:
    """A value as plain data; its constant read only if the op asks (weights can be large)."""
    shape = None
    if value.shape is not None:  # static after load.py; a symbolic dim would be None
        shape = tuple(d if isinstance(d, int) else None for d in value.shape)
    return R.OnnxValue(
        shape=shape,  # type: ignore[arg-type]
        is_constant=value.const_value is not None,
        integer=value.dtype is not None and value.dtype.is_integer(),
        read=lambda: _const(value),
    )


def attributes(node: Any) -> dict[str, Any]:
    decoded = {name: attr(node, name) for name in node.attributes}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in decoded.items()}


def describe(node: Any) -> R.OnnxNode:
    return R.OnnxNode(
        domain=node.domain or "",
        op_type=node.op_type,
        attributes=attributes(node),
        inputs=tuple(None if v is None else _value(v) for v in node.inputs),
        outputs=tuple(_value(o) if o is not None and o.name else None for o in node.outputs),
    )


def weights_of(node: Any, reading: R.OnnxReading) -> dict[str, tuple[str, str]]:
    """The op's weight keys → the initializers of the file that hold them, and how."""
    return {key: (node.inputs[i].name, how) for key, (i, how) in reading.weights.items()}


def _read(node: Any, reading: R.OnnxReading) -> list[Any]:
    return [
        node.inputs[i] for i in reading.reads if i < len(node.inputs) and node.inputs[i] is not None
    ]


# ---- elementwise: one input, its view kept; an activation may fold into the layer before ----


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


def elementwise(w: Walker, node: Any, op: str, reading: R.OnnxReading) -> None:
    (x,) = data_inputs(node)[:1]
    params = dict(reading.params)
    canon, view = elementwise_input(w, x.name)
    index = w.layer_of(canon)
    producer = w.layers[index] if index is not None else None
    out = node.outputs[0]
    if out.shape is None:  # shape inference knows no custom domain's node: elementwise
        out.shape = x.shape
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
        params = {**producer.params, "activation": OPS[op].epilogue}
        nodes = (*producer.nodes, *w.body(node))
        w.replace_layer(index, replace(producer, params=params, nodes=nodes))
        w.views[out.name] = view
        w.chains[out.name] = (out.name, ())
        if x.name in w.canon_of:
            w.canon_of[out.name] = w.canon_of[x.name]
        return
    made = w.add_layer(op, params, [(canon, x.name)], canon.shape, w.body(node))
    w.set_view_of(out.name, V.retarget(view, made.id, made.shape), made)


# ---- NCHW and rows --------------------------------------------------------------------------


def nchw(w: Walker, node: Any, op: str, reading: R.OnnxReading) -> None:
    (x,) = _read(node, reading)[:1]
    canon, pos = w.canonical(x.name)
    if pos not in (0,) and not (w.batch == 1 and canon.shape == (1, *x.shape[1:])):
        raise Refused("its input does not hold the batch in dim 0 (NCHW)")
    out = out_shape(node)
    shape = (w.batch, *out[1:])
    shape += (1,) * (len(canon.shape) - len(shape))  # [N, C] of a pooling: [N, C, 1, 1]
    made = w.add_layer(
        op, dict(reading.params), [(canon, x.name)], shape, w.body(node), weights_of(node, reading)
    )
    if len(out) == len(shape):
        w.set_canonical(node.outputs[0].name, made, 0)
    else:  # without the unit dims
        w.set_view_of(node.outputs[0].name, V.reshape(V.identity(made.id, shape), out), made)


def rows_of(w: Walker, value: str) -> tuple[Canon, V.View]:
    view = w.views[value]
    if V.rows_of_last_axis(view):
        return w.tensor(view), view
    canon, pos = w.canonical(value)
    view = V.identity(canon.id, canon.shape, pos)
    if not V.rows_of_last_axis(view):
        raise Refused("its last dim is the batch")
    return canon, view


def rows(w: Walker, node: Any, op: str, reading: R.OnnxReading) -> None:
    (x,) = _read(node, reading)[:1]
    canon, view = rows_of(w, x.name)
    last = reading.last_dim
    out = node.outputs[0]
    if out.shape is None:  # shape inference knows no custom domain's node: the rows' shape
        out.shape = x.shape if last is None else ir.Shape([*x.shape[:-1], last])
    shape = canon.shape if last is None else (*canon.shape[:-1], last)
    made = w.add_layer(
        op, dict(reading.params), [(canon, x.name)], shape, w.body(node), weights_of(node, reading)
    )
    w.set_view_of(out.name, V.retarget(view, made.id, shape, last=last), made)


# ---- joins: whole tensors, the batch in one dim ---------------------------------------------


def join(w: Walker, node: Any, op: str, reading: R.OnnxReading) -> None:
    shape = out_shape(node)
    rank = len(shape)
    values = _read(node, reading)
    positions = {w.canonical(v.name)[1] for v in values if v.const_value is None}
    if len(positions) != 1:
        raise Refused("the inputs hold the batch in different dims")
    pos = positions.pop()
    params = dict(reading.params)
    for key in reading.axes:
        axis = int(params[key]) % rank
        if axis == pos:
            raise Refused(f"a {op} along the batch")
        params[key] = _cax(axis, pos)
    items: list[tuple[Canon, str | None]] = [
        (constant_input(w, v, rank, pos), None)
        if v.const_value is not None
        else (w.canonical(v.name)[0], v.name)
        for v in values
    ]
    made = w.add_layer(
        op, params, items, with_batch(shape, pos, w.batch), w.body(node), weights_of(node, reading)
    )
    w.set_canonical(node.outputs[0].name, made, pos)


def batched(w: Walker, node: Any, op: str, reading: R.OnnxReading) -> None:
    a, b = _read(node, reading)
    (ca, pa), (cb, pb) = w.canonical(a.name), w.canonical(b.name)
    if {pa, pb} - {0, V.ABSENT} or (w.batch > 1 and pa != pb):
        raise Refused(f"a {node.op_type} whose operands do not lead with the batch")
    shape = with_batch(out_shape(node), pa, w.batch)
    made = w.add_layer(op, dict(reading.params), [(ca, a.name), (cb, b.name)], shape, w.body(node))
    w.set_canonical(node.outputs[0].name, made, pa)


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    return len(small) == len(big) and all(s in (1, b) for s, b in zip(small, big, strict=True))


def broadcast(w: Walker, node: Any, op: str, reading: R.OnnxReading) -> None:
    a, b = _read(node, reading)
    out = node.outputs[0]
    params = dict(reading.params)
    if a.const_value is not None or b.const_value is not None:
        data, const = (b, a) if a.const_value is not None else (a, b)
        canon, pos = w.canonical(data.name)
        other = constant_input(w, const, len(out_shape(node)), pos)
        made = w.add_layer(
            op, params, [(canon, data.name), (other, None)], canon.shape, w.body(node)
        )
        w.set_canonical(out.name, made, pos)
        return
    va, vb = w.views[a.name], w.views[b.name]
    if V.same_layout(va, vb):
        ta, tb = w.tensor(va), w.tensor(vb)
        made = w.add_layer(op, params, [(ta, a.name), (tb, b.name)], ta.shape, w.body(node))
        w.set_view_of(out.name, V.retarget(va, made.id, made.shape), made)
        return
    (ca, pa), (cb, pb) = w.canonical(a.name), w.canonical(b.name)
    if pa != pb and w.batch > 1:
        raise Refused("the operands hold the batch in different dims")
    first, second = ((ca, a), (cb, b)) if _broadcasts(cb.shape, ca.shape) else ((cb, b), (ca, a))
    if not _broadcasts(second[0].shape, first[0].shape):
        raise Refused(f"operands {list(ca.shape)} and {list(cb.shape)} do not broadcast")
    items = [(first[0], first[1].name), (second[0], second[1].name)]
    made = w.add_layer(op, params, items, first[0].shape, w.body(node))
    w.set_canonical(out.name, made, pa)


LAYOUTS = {
    R.ELEMENTWISE: elementwise,
    R.NCHW: nchw,
    R.ROWS: rows,
    R.JOIN: join,
    R.BATCHED: batched,
    R.BROADCAST: broadcast,
}
