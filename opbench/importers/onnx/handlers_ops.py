"""The ops with weights, the norms, softmax and attention, and `handle`, the dispatch.

Parameters come from node attributes and constants, in the suite's terms (docs/suite-format.md);
weights are named by their initializers so that `opbench run model.onnx` runs the file's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbench.importers.onnx import views as V
from opbench.importers.onnx.canon import Canon
from opbench.importers.onnx.handlers import (
    Refused,
    binary,
    clip,
    concat,
    data_inputs,
    is_view_node,
    unary,
    view_node,
    with_batch,
)
from opbench.importers.onnx.rules import _const
from opbench.importers.onnx.steps import _cax, attr, out_shape
from opbench.importers.onnx.walk import Walker
from opbench.ops.kinds import onnx_imports


def _eps(value: Any) -> float:
    """epsilon as written before it was stored in float32 (1e-05, not 9.9999997e-06)."""
    return float(f"{float(1e-5 if value is None else value):.7g}")


def _nchw(w: Walker, node: Any) -> tuple[Canon, str]:
    x = data_inputs(node)[0]
    canon, pos = w.canonical(x.name)
    if pos not in (0,) and not (w.batch == 1 and canon.shape == (1, *x.shape[1:])):
        raise Refused("its input does not hold the batch in dim 0 (NCHW)")
    return canon, x.name


def _pair(values: Any, what: str) -> list[int]:
    values = [int(v) for v in values]
    if len(values) != 2:
        raise Refused(f"{what} {values} is not 2-D")
    return values


def _pads(pads: Any) -> list[int]:
    if not pads:
        return [0, 0]
    pads = [int(p) for p in pads]
    if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
        raise Refused(f"pads {pads} are not symmetric")
    return pads[:2]


def _auto_pad(node: Any) -> None:
    mode = attr(node, "auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("NOTSET", "VALID"):
        raise Refused(f"auto_pad={mode} (explicit pads are supported)")


def _weight(value: Any, how: str = "asis") -> tuple[str, str]:
    return (value.name, how)


def conv(w: Walker, node: Any) -> None:
    _auto_pad(node)
    canon, x = _nchw(w, node)
    weight = _const(node.inputs[1])
    if weight is None or weight.ndim != 4:
        raise Refused("the weight is not a 4-D constant")
    has_bias = len(node.inputs) > 2 and node.inputs[2] is not None
    params: dict[str, Any] = {
        "out_channels": int(weight.shape[0]),
        "kernel_size": [int(weight.shape[2]), int(weight.shape[3])],
        "stride": _pair(attr(node, "strides", [1, 1]), "strides"),
        "padding": _pads(attr(node, "pads")),
        "dilation": _pair(attr(node, "dilations", [1, 1]), "dilations"),
        "groups": int(attr(node, "group", 1)),
        "bias": has_bias,
    }
    defaults = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1, "bias": True}
    params = {k: v for k, v in params.items() if defaults.get(k) != v}
    weights = {"weight": _weight(node.inputs[1])}
    if has_bias:
        weights["bias"] = _weight(node.inputs[2])
    shape = (w.batch, *out_shape(node)[1:])
    made = w.add_layer("conv2d", params, [(canon, x)], shape, w.body(node), weights)
    w.set_canonical(node.outputs[0].name, made, 0)


def pool(w: Walker, node: Any) -> None:
    _auto_pad(node)
    if attr(node, "ceil_mode", 0):
        raise Refused("ceil_mode=1")
    if any(int(d) != 1 for d in attr(node, "dilations", [1, 1])):
        raise Refused("dilated pooling")
    padding = _pads(attr(node, "pads"))
    if node.op_type == "AveragePool" and any(padding) and not attr(node, "count_include_pad", 0):
        raise Refused("average pooling that leaves the padding out of the count")
    canon, x = _nchw(w, node)
    kernel = _pair(attr(node, "kernel_shape"), "kernel_shape")
    params: dict[str, Any] = {"kernel_size": kernel}
    strides = _pair(attr(node, "strides", [1, 1]), "strides")
    if strides != kernel:
        params["stride"] = strides
    if any(padding):
        params["padding"] = padding
    op = "maxpool2d" if node.op_type == "MaxPool" else "avgpool2d"
    made = w.add_layer(op, params, [(canon, x)], (w.batch, *out_shape(node)[1:]), w.body(node))
    w.set_canonical(node.outputs[0].name, made, 0)


def global_pool(w: Walker, node: Any) -> None:
    canon, x = _nchw(w, node)
    if len(canon.shape) != 4:
        raise Refused("global pooling needs a 4-D input")
    if node.op_type == "ReduceMean":
        axes = attr(node, "axes")
        if axes is None and len(node.inputs) > 1:
            axes = [int(v) for v in _const(node.inputs[1]).reshape(-1)]
        if sorted(int(a) % 4 for a in axes or []) != [2, 3]:
            raise Refused("a mean that is not over H and W (nor part of a norm)")
    params = {"kernel_size": [canon.shape[2], canon.shape[3]]}
    made = w.add_layer("avgpool2d", params, [(canon, x)], (*canon.shape[:2], 1, 1), w.body(node))
    if attr(node, "keepdims", 1):
        w.set_canonical(node.outputs[0].name, made, 0)
    else:  # [N, C]: the pooled [N, C, 1, 1] without its unit dims
        view = V.reshape(V.identity(made.id, made.shape), out_shape(node))
        w.set_view_of(node.outputs[0].name, view, made)


def batchnorm(w: Walker, node: Any) -> None:
    if len(node.outputs) > 1 and any(o is not None and o.name for o in node.outputs[1:]):
        raise Refused("a training-mode batch norm (running statistics as outputs)")
    canon, x = _nchw(w, node)
    keys = ("weight", "bias", "running_mean", "running_var")
    weights = {k: _weight(v) for k, v in zip(keys, node.inputs[1:5], strict=True)}
    params = {"eps": _eps(attr(node, "epsilon"))}
    made = w.add_layer("batchnorm2d", params, [(canon, x)], canon.shape, w.body(node), weights)
    w.set_canonical(node.outputs[0].name, made, 0)


# ---- row-wise ops: over the last axis, whatever the other dims hold --------------------------


def rows(w: Walker, value: str) -> tuple[Canon, V.View]:
    view = w.views[value]
    if V.rows_of_last_axis(view):
        return w.tensor(view), view
    canon, pos = w.canonical(value)
    view = V.identity(canon.id, canon.shape, pos)
    if not V.rows_of_last_axis(view):
        raise Refused("its last dim is the batch")
    return canon, view


def _row_op(
    w: Walker, node: Any, op: str, params: dict, weights: dict, out_last: int | None
) -> None:
    x = data_inputs(node)[0]
    canon, view = rows(w, x.name)
    shape = canon.shape if out_last is None else (*canon.shape[:-1], out_last)
    made = w.add_layer(op, params, [(canon, x.name)], shape, w.body(node), weights)
    w.set_view_of(node.outputs[0].name, V.retarget(view, made.id, shape, last=out_last), made)


def linear(w: Walker, node: Any) -> None:
    """MatMul(x, W), opbench Linear(x, W, b) from the MatMul+Add rule, or Gemm."""
    weight, bias = node.inputs[1], (node.inputs[2] if len(node.inputs) > 2 else None)
    array = _const(weight)
    if array is None or array.ndim != 2:
        raise Refused("the right-hand side is not a 2-D constant")
    how = "transpose"
    if node.op_type == "Gemm":
        if (
            attr(node, "transA", 0)
            or attr(node, "alpha", 1.0) != 1.0
            or attr(node, "beta", 1.0) != 1.0
        ):
            raise Refused("only Gemm with transA=0, alpha=beta=1 is a linear layer")
        if attr(node, "transB", 0):
            how = "asis"
    out = int(array.shape[0] if how == "asis" else array.shape[1])
    weights = {"weight": _weight(weight, how)}
    if bias is not None:
        b = _const(bias)
        if b is None or b.size != out or (b.ndim == 2 and b.shape[0] != 1):
            raise Refused("the addend is not a bias over the output features")
        weights["bias"] = _weight(bias)
    params = {"out_features": out, "bias": bias is not None}
    _row_op(w, node, "linear", params, weights, out)


def layernorm(w: Walker, node: Any) -> None:
    x = data_inputs(node)[0]
    if int(attr(node, "axis", -1)) % len(x.shape) != len(x.shape) - 1:
        raise Refused("a layer norm that is not over the last axis")
    weights = {"weight": _weight(node.inputs[1])}
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        weights["bias"] = _weight(node.inputs[2])
    _row_op(w, node, "layernorm", {"eps": _eps(attr(node, "epsilon"))}, weights, None)


def rmsnorm(w: Walker, node: Any) -> None:
    x = data_inputs(node)[0]
    if int(attr(node, "axis", -1)) % len(x.shape) != len(x.shape) - 1:
        raise Refused("an RMS norm that is not over the last axis")
    params = {"eps": _eps(attr(node, "epsilon"))}
    _row_op(w, node, "rmsnorm", params, {"weight": _weight(node.inputs[1])}, None)


def softmax(w: Walker, node: Any) -> None:
    x = data_inputs(node)[0]
    rank = len(x.shape)
    axis = int(attr(node, "axis", -1)) % rank
    if axis == rank - 1:
        return _row_op(w, node, "softmax", {}, {}, None)
    canon, pos = w.canonical(x.name)
    if axis == pos:
        raise Refused("a softmax over the batch")
    made = w.add_layer(
        "softmax", {"dim": _cax(axis, pos)}, [(canon, x.name)], canon.shape, w.body(node)
    )
    w.set_canonical(node.outputs[0].name, made, pos)


def matmul(w: Walker, node: Any) -> None:
    a, b = node.inputs[:2]
    if b.const_value is not None:
        return linear(w, node)
    if a.const_value is not None:
        raise Refused("a constant on the left of a MatMul")
    (ca, pa), (cb, pb) = w.canonical(a.name), w.canonical(b.name)
    if {pa, pb} - {0, V.ABSENT} or (w.batch > 1 and pa != pb):
        raise Refused("a MatMul whose operands do not lead with the batch")
    shape = with_batch(out_shape(node), pa, w.batch)
    made = w.add_layer("matmul", {}, [(ca, a.name), (cb, b.name)], shape, w.body(node))
    w.set_canonical(node.outputs[0].name, made, pa)


# ---- dispatch -------------------------------------------------------------------------------

Handler = Callable[[Walker, Any], None]

HANDLERS: dict[tuple[str, str], Handler] = {
    ("", "Conv"): conv,
    ("", "MaxPool"): pool,
    ("", "AveragePool"): pool,
    ("", "GlobalAveragePool"): global_pool,
    ("", "ReduceMean"): global_pool,
    ("", "BatchNormalization"): batchnorm,
    ("", "Gemm"): linear,
    ("", "MatMul"): matmul,
    ("opbench", "Linear"): linear,
    ("", "LayerNormalization"): layernorm,
    ("", "RMSNormalization"): rmsnorm,
    ("opbench", "RMSNormalization"): rmsnorm,
    ("", "Softmax"): softmax,
    # Clip is relu6 or relu by its bounds, constant inputs (opset 11+) or attributes: reading
    # those constants is the importer's (rules._scalar), so it stays here, not on the ops.
    ("", "Clip"): clip,
    ("", "Add"): binary,
    ("", "Mul"): binary,
    ("", "Sub"): binary,
    ("", "Div"): binary,
    ("", "Concat"): concat,
}


def _attributes(node: Any) -> dict[str, Any]:
    decoded = {name: attr(node, name) for name in node.attributes}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in decoded.items()}


def declared_op(w: Walker, node: Any) -> bool:
    """A node some op declares in its `onnx_imports` (ops/kinds.py: the registry's, plugins'
    too) as that op's layer; False when no op declares it."""
    readings = onnx_imports().get((node.domain or "", node.op_type))
    if not readings:
        return False
    attributes = _attributes(node)
    for op, implied in readings:
        params = op.from_onnx(implied, attributes)
        if params is not None:
            unary(w, node, op.name, params or None)
            (x,), out = data_inputs(node)[:1], node.outputs[0]
            if out.shape is None:  # shape inference knows no custom domain's node: elementwise
                out.shape = x.shape
            return True
    raise Refused(f"no op reads {node.op_type} with attributes {attributes}")


def handle(w: Walker, node: Any) -> None:
    """Make the node's layers, or raise Refused / NotAView saying why not."""
    from opbench.importers.onnx.handlers_transformer import TRANSFORMER_HANDLERS, is_embedding

    if is_embedding(node):
        return TRANSFORMER_HANDLERS[("", "Gather")](w, node)
    if is_view_node(node):
        return view_node(w, node)
    from opbench.importers.onnx.handlers_attention import ATTENTION_HANDLERS

    key = (node.domain or "", node.op_type)
    handler = HANDLERS.get(key) or TRANSFORMER_HANDLERS.get(key) or ATTENTION_HANDLERS.get(key)
    if handler is not None:
        return handler(w, node)
    if not declared_op(w, node):
        raise Refused("not a supported op")
