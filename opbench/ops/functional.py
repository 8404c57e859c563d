"""Small torch helpers shared by ops (imported lazily): the activation a PyTorch user calls,
and the same activation written out for the high-precision reference.

Names: relu, gelu (erf form), gelu_tanh (GELU's tanh approximation, `gelu` with
`approximate: tanh`), silu, relu6."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def activate(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The baseline: F.relu / F.gelu (exact erf form, PyTorch's default) /
    F.gelu(approximate="tanh") / F.silu / F.relu6."""
    import torch.nn.functional as F

    if activation == "none":
        return x
    if activation == "relu":
        return F.relu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if activation == "silu":
        return F.silu(x)
    if activation == "relu6":
        return F.relu6(x)
    raise ValueError(f"unknown activation {activation!r}")


def activate_reference(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The same functions as formulas, for the float64 reference."""
    import torch

    if activation == "none":
        return x
    if activation == "relu":
        return x.clamp_min(0)
    if activation == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if activation == "gelu_tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1.0 + torch.tanh(inner))
    if activation == "silu":
        return x / (1.0 + torch.exp(-x))
    if activation == "relu6":
        return x.clamp(0.0, 6.0)
    raise ValueError(f"unknown activation {activation!r}")
