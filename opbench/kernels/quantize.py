"""Symmetric int8 quantization for the W8A8 linear: per-token activations, per-channel weights.

Math. A row r (a token of x, or an output channel of W) gets one scale

    s[r] = max_k |v[r, k]| / 127,      q[r, k] = round(v[r, k] / s[r])  in [-127, 127]

with round-half-away-from-zero, so v[r, k] ~= s[r] * q[r, k]. An all-zero row gets s = 0, q = 0.

Activations are quantized on every call by `_quantize_rows_kernel`: one program per row, a
max-reduction pass then a quantize pass over the row (the second pass re-reads the row from
L1/L2). Bytes for x [M, K] in fp16/bf16: reads 2MK (DRAM) + 2MK (cache), writes MK + 4M.

Weights are quantized once, at prepare time, by `quantize_weight_per_channel` (torch is allowed
there: it runs before timing).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def round_to_int8(v):
    """Round an fp32 block already scaled into [-127, 127] half away from zero, to int8.
    (Float-to-int conversion truncates toward zero, hence the +-0.5.)"""
    v = tl.minimum(tl.maximum(v, -127.0), 127.0)
    return tl.where(v >= 0, v + 0.5, v - 0.5).to(tl.int8)


@triton.jit
def _quantize_rows_kernel(
    # pointers
    x_ptr,  # fp16/bf16/fp32 [M, K] activations
    q_ptr,  # int8 [M, K] quantized activations (row-major, contiguous)
    scale_ptr,  # fp32 [M] per-row scales s[m]
    # shapes
    K,  # row length
    # strides, in elements
    stride_xm,
    stride_xk,
    stride_qm,
    # meta-parameters
    BLOCK_K: tl.constexpr,  # elements per step along the row
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    q_row = q_ptr + row * stride_qm
    offs = tl.arange(0, BLOCK_K)

    absmax = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        mask = start + offs < K
        x = tl.load(x_row + (start + offs) * stride_xk, mask=mask, other=0.0)
        absmax = tl.maximum(absmax, tl.abs(x.to(tl.float32)))
    row_max = tl.max(absmax, axis=0)
    # A zero row would divide by zero: its codes are 0 whatever the multiplier, and s = 0.
    inv_scale = 127.0 / tl.maximum(row_max, 1e-30)
    tl.store(scale_ptr + row, row_max / 127.0)

    for start in range(0, K, BLOCK_K):
        mask = start + offs < K
        x = tl.load(x_row + (start + offs) * stride_xk, mask=mask, other=0.0)
        tl.store(q_row + start + offs, round_to_int8(x.to(tl.float32) * inv_scale), mask=mask)


def quantize_rows_launch(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> tuple:
    """(grid, args, meta) of `_quantize_rows_kernel` for x [M, K] -> q [M, K], scale [M]."""
    M, K = x.shape
    # One step covers rows up to 16K elements (all the LLM widths in our suites): the second pass
    # then re-reads the row from L1. Longer rows loop.
    block_k = 64 if INTERPRET else min(1 << (K - 1).bit_length(), 16384)
    num_warps = 4 if block_k <= 2048 else (8 if block_k <= 8192 else 16)
    args = (x, q, scale, K, x.stride(0), x.stride(1), q.stride(0))
    return (M,), args, dict(BLOCK_K=block_k, num_warps=num_warps)


def quantize_rows(
    x: torch.Tensor, q: torch.Tensor | None = None, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 quantization of a 2-D x: returns (q int8 [M, K], scale fp32 [M])."""
    if x.dim() != 2:
        raise ValueError(f"quantize_rows expects a 2-D tensor, got shape {tuple(x.shape)}")
    M, K = x.shape
    if q is None:
        q = torch.empty((M, K), dtype=torch.int8, device=x.device)
    if scale is None:
        scale = torch.empty((M,), dtype=torch.float32, device=x.device)
    if M > 0:
        grid, args, meta = quantize_rows_launch(x, q, scale)
        _quantize_rows_kernel[grid](*args, **meta)
    return q, scale


def quantize_weight_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Build-time: W [N, K] -> (Wq int8 [N, K] contiguous, sw fp32 [N]), same rounding as above."""
    w = weight.detach().to(torch.float32)
    absmax = w.abs().amax(dim=1)
    inv_scale = 127.0 / absmax.clamp_min(1e-30)
    scaled = (w * inv_scale[:, None]).clamp(-127.0, 127.0)
    q = (scaled.sign() * (scaled.abs() + 0.5).floor()).to(torch.int8).contiguous()
    return q, (absmax / 127.0).contiguous()
