"""Small torch helpers shared by op reference implementations (imported lazily by ops)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def activate(x: torch.Tensor, activation: str) -> torch.Tensor:
    import torch.nn.functional as F

    if activation == "none":
        return x
    if activation == "relu":
        return F.relu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation == "silu":
        return F.silu(x)
    raise ValueError(f"unknown activation {activation!r}")
