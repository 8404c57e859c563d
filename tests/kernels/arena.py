"""Test helper: bind a layer inside a ScratchArena group so that its scratch comes from the
arena's one block (kernels/scratch.py)."""

from __future__ import annotations

from typing import Any

import torch

from opbench.kernels.scratch import ScratchArena


def bind_in_arena(layer: Any, x: torch.Tensor, out: torch.Tensor, plan: Any):
    """(bound launch, arena): the first round learns the need, the second binds into the
    fitted block."""
    arena = ScratchArena(x.device)
    for _ in range(2):
        arena.need = 0
        with arena.group():
            bound = layer.bind(x, out, config=plan)
        if not arena.fit():
            break
    return bound, arena
