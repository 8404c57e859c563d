"""A conv's or linear's `activation:` applied to its output (imported lazily, with torch): the
op whose kernel epilogue the name is (ops/kinds.py) computes it, so that the function is
written once, in its op (ops/activation.py). "none" leaves x as it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opbench.ops.kinds import epilogue_op

if TYPE_CHECKING:
    import torch


def activate(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The baseline: the activation op's torch call (F.relu, F.gelu, ...)."""
    return x if activation == "none" else epilogue_op(activation).activate(x, {})


def activate_reference(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The same function as the op's written-out formula, for the float64 reference."""
    return x if activation == "none" else epilogue_op(activation).activate_reference(x, {})
