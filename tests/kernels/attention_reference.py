"""The float64 attention the attention kernel tests check against."""

from __future__ import annotations

import math

import torch

from opbench.kernels.attention import split_heads


def reference(x: torch.Tensor, heads: int, causal: bool, packed: bool = True) -> torch.Tensor:
    """softmax(Q K^T / sqrt(D)) V in float64 on the [B, S, 3 H D] (packed) or split input,
    as [B, S, H D]."""
    q, k, v = (t.double().transpose(1, 2) for t in split_heads(x.double(), heads, packed))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = scores.shape[-1]
        hidden = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
