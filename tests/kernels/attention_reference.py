"""The float64 attention the attention kernel tests check against."""

from __future__ import annotations

import math

import torch

from opbench.kernels.attention.attention import split_heads


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


def int8_codes(t: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """t [..., S, D] (float64) by the int8 rule (kernels/device.py) with one scale per `rows`
    rows: the codes (as float64) and each row's scale [..., S, 1]."""
    codes, scales = torch.empty_like(t), torch.empty_like(t[..., :1])
    for start in range(0, t.shape[-2], rows):
        part = t[..., start : start + rows, :]
        amax = part.abs().amax(dim=(-1, -2), keepdim=True).clamp_min(1e-12)
        scaled = part * (127.0 / amax)
        codes[..., start : start + rows, :] = (scaled.abs() + 0.5).floor().clamp(
            max=127
        ) * scaled.sign()
        scales[..., start : start + rows, :] = amax / 127.0
    return codes, scales


def int8_model(x: torch.Tensor, heads: int, causal: bool, q_rows: int,
               packed: bool = True) -> torch.Tensor:  # fmt: skip
    """What the int8 attention kernels compute, in float64: Q (the softmax scale log2(e)/sqrt(D)
    folded in) quantized per `q_rows` query rows (the portable kernel's BLOCK_M, the
    warp-specialized one's 64), K minus its mean over the sequence per KEY_BLOCK (128) keys,
    both by the int8 rule; scores q8 k8^T q_scale k_scale; softmax in base 2; P V unquantized.
    As [B, S, H D]. Only fp32 sums and the 16-bit rounding of P and the output separate the
    kernels from it."""
    q, k, v = (t.double().transpose(1, 2) for t in split_heads(x.double(), heads, packed))
    head_dim = q.shape[-1]
    q8, q_scale = int8_codes(q * (math.log2(math.e) / math.sqrt(head_dim)), q_rows)
    k8, k_scale = int8_codes(k - k.mean(2, keepdim=True), 128)
    scores = (q8 @ k8.transpose(-1, -2)) * q_scale * k_scale.transpose(-1, -2)
    if causal:
        s = scores.shape[-1]
        hidden = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    p = torch.exp2(scores - scores.amax(-1, keepdim=True))
    return ((p @ v) / p.sum(-1, keepdim=True)).transpose(1, 2).flatten(2)
