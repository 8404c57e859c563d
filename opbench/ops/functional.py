"""A conv's or linear's `activation:` applied to its output (imported lazily, with torch) or
exported after it (`activate_onnx`): the op whose kernel epilogue the name is (ops/kinds.py)
computes and exports it, so that the function is written once, in its op (ops/activation.py).
"none" leaves x as it is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opbench.errors import InputError
from opbench.ops.kinds import epilogue_op

if TYPE_CHECKING:
    import torch


def activate(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The baseline: the activation op's torch call (F.relu, F.gelu, ...)."""
    return x if activation == "none" else epilogue_op(activation).activate(x, {})


def activate_reference(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The same function as the op's written-out formula, for the float64 reference."""
    return x if activation == "none" else epilogue_op(activation).activate_reference(x, {})


def activate_onnx(scope: Any, x: str, activation: str) -> str:
    """The ONNX nodes of the activation op (`Activation.onnx_nodes`) after tensor `x`, added
    through the layer's `scope`; InputError when the op has no ONNX form."""
    if activation == "none":
        return x
    try:
        op = epilogue_op(activation)
    except ValueError:
        op = None
    if not getattr(op, "exports_to_onnx", False) or not hasattr(op, "onnx_nodes"):
        raise InputError(f"layer {scope.layer!r}: activation {activation!r} has no ONNX form")
    return op.onnx_nodes(scope, x, {})  # type: ignore[union-attr]
