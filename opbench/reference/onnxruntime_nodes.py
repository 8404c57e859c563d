"""What one node of an ONNX Runtime profile is: its shapes (old ORT writes them as strings),
whether ORT inserted it (reorders, copies, reshapes around a fused Gemm: engine overhead), and
which ONNX ops a fused node covers (`FusedConv` = Conv + activation; a Conv with a fourth input
of its output's shape = Conv + residual Add [+ activation]). Used by the reader
(reference/onnxruntime.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from opbench.reference.interface import Flag

_OVERHEAD_OPS = frozenset(
    {"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost", "Memcpy"}
)
_DATA_MOVEMENT_OPS = frozenset(
    {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Flatten"}
)
# Names ONNX Runtime gives the nodes its optimizer inserts: reorders, copies, the reshapes
# around a fused Gemm, "<Op>_token_<n>", and a bare op type ("Squeeze", beside the
# "Squeeze_token_9" of the same split fusion). Exporters name a model's own nodes with a scope
# ("/attn/Reshape"), a number ("Reshape_12") or a prefix ("node_Reshape_12").
_INSERTED_NAME = re.compile(
    r"^(reorder|memcpy|gemm_(input|output)_reshape)|_token_\d+$"
    r"|^(Reshape|Transpose|Squeeze|Unsqueeze|Identity|Flatten)$",
    re.IGNORECASE,
)
_ACTIVATIONS = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Clip",
        "HardSigmoid",
        "Gelu",
        "FastGelu",
        "Silu",
        "Elu",
        "Selu",
    }
)
_NODE_OP = re.compile(r"^(?:.*/)?([A-Za-z]+)(?:_\d+)?$")
_FUSED = ("FusedConv", "FusedGemm")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _shape_list(args: dict[str, Any], key: str) -> list[tuple[int, ...] | None]:
    shapes = args.get(key)
    if isinstance(shapes, str):  # old ORT wrote every args value as a string
        try:
            shapes = json.loads(shapes)
        except ValueError:
            return []
    if not isinstance(shapes, list):
        return []
    out: list[tuple[int, ...] | None] = []
    for item in shapes:
        dims = next(iter(item.values()), None) if isinstance(item, dict) else None
        ok = isinstance(dims, list) and all(
            isinstance(d, int) and not isinstance(d, bool) for d in dims
        )
        out.append(tuple(dims) if ok else None)
    return out


def _shape(args: dict[str, Any]) -> tuple[int, ...] | None:
    shapes = _shape_list(args, "output_type_shape")
    return shapes[0] if shapes else None


def _input_shapes(args: dict[str, Any]) -> tuple[tuple[int, ...] | None, ...]:
    return tuple(_shape_list(args, "input_type_shape"))


def _name_op(name: str) -> str | None:
    """The op type a node's name gives: ``/fc/Relu_3`` → ``Relu``; ORT's renamed fused nodes
    drop their ``_nchwc`` and ``_output_<n>`` tails first (``/b/c1/Relu_output_0_nchwc``,
    ``relu_2_nchwc``). Activations are told whatever their case (dynamo names ``relu_2``)."""
    last = name.rsplit("/", 1)[-1]
    last = re.sub(r"(_output_\d+)?(_nchwc)?$", "", last)
    match = _NODE_OP.match(last)
    if match is None:
        return None
    word = match.group(1)
    return next((a for a in _ACTIVATIONS if a.casefold() == word.casefold()), word)


def _sum_input(inputs: tuple[tuple[int, ...] | None, ...], shape: tuple[int, ...] | None) -> bool:
    """A conv input past X and W of the output's own shape: Z, the residual ORT adds before the
    activation. Found by shape, not position: a conv without bias has it third (X, W, Z), one
    with bias fourth (X, W, B, Z); a bias is 1-D, so it never passes for Z."""
    if not shape or len(shape) < 3:
        return False
    return any(dims == shape for dims in inputs[2:])


def node_members(
    name: str,
    op: str | None,
    inputs: tuple[tuple[int, ...] | None, ...] = (),
    shape: tuple[int, ...] | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(members, flags) of a node from its name, op_name and shapes."""
    name_op = _name_op(name)
    renamed = name.endswith("_nchwc") or (op in _FUSED and name_op in _ACTIVATIONS)
    flags: tuple[str, ...] = (Flag.RENAMED_BY_ENGINE,) if renamed else ()
    if name.endswith("_nchwc"):
        flags = (*flags, Flag.BLOCKED_LAYOUT)
    # a FusedConv/FusedGemm holds an activation, of a kind its name may not say; an NCHWc
    # conv that adds a residual holds one only where the model has one after the add
    activation = name_op if name_op in _ACTIVATIONS else "Activation"
    if op in ("Conv", "FusedConv") and _sum_input(inputs, shape):
        # the NCHWc and fused convs add Z, a residual of the output's shape, before their
        # activation (ResNet's conv3 + Add + Relu is one such node)
        if op == "Conv" and name_op not in _ACTIVATIONS:
            activation = "Activation?"
        return ("Conv", "Add", activation), flags
    if op in _FUSED:
        return (op.removeprefix("Fused"), activation), flags
    if op == "Conv" and renamed and name_op in _ACTIVATIONS:
        # an NCHWc conv named after the activation it fused (``relu_nchwc``)
        return ("Conv", name_op), flags
    if "MatMulAddFusion" in name:
        return ("MatMul", "Add"), flags
    return (), flags


def is_overhead(name: str, op: str | None) -> bool:
    """ORT-inserted work: layout reorders, memory copies, reshapes around a fused Gemm."""
    if op in _OVERHEAD_OPS or name.lower().startswith(("reorder", "memcpy")):
        return True
    return op in _DATA_MOVEMENT_OPS and bool(_INSERTED_NAME.search(name))
