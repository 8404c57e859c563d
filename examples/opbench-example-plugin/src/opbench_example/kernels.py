"""The example's Triton kernels and their launchers (torch tensors in, torch tensors out).

Imported only when a layer is built, after opbench has set TRITON_INTERPRET for --device cpu.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    # One program per row; the whole row fits in one block.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    n_cols = x.shape[-1]
    x2 = x.contiguous().view(-1, n_cols)
    y = torch.empty_like(x2)
    block = triton.next_power_of_2(n_cols)
    _rmsnorm_kernel[(x2.shape[0],)](x2, weight, y, n_cols, eps, BLOCK=block)
    return y.view(x.shape)


@triton.jit
def _swiglu_kernel(x_ptr, y_ptr, n_out, half, beta, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    row = offs // half
    col = offs - row * half
    a = tl.load(x_ptr + row * 2 * half + col, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + row * 2 * half + half + col, mask=mask, other=0.0).to(tl.float32)
    y = a * tl.sigmoid(beta * a) * b
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


SWIGLU_BLOCK = 1024


def swiglu(x: torch.Tensor, beta: float, out: torch.Tensor | None = None) -> torch.Tensor:
    half = x.shape[-1] // 2
    if out is None:
        out = torch.empty((*x.shape[:-1], half), dtype=x.dtype, device=x.device)
    n_out = out.numel()
    grid = (triton.cdiv(n_out, SWIGLU_BLOCK),)
    _swiglu_kernel[grid](x, out, n_out, half, beta, BLOCK=SWIGLU_BLOCK)
    return out
