"""Row-wise quantization for W8A8 (int8) and fp8 (e4m3): per-token activations (a kernel,
every call) and per-channel weights (torch, at build time), both by the rules of `device.py`:

    int8: s[r] = max_k |v[r, k]| / 127,  q[r, k] = clamp(round_half_away_from_zero(v[r, k] / s[r]))
    fp8:  s[r] = max_k |v[r, k]| / 448,  q[r, k] = round_nearest_even_e4m3(v[r, k] / s[r])

An all-zero row gets s = 0, q = 0.

`_quantize_rows_kernel`: one program per row. A row of up to 16K elements (every LLM width in
the suites) is read once into registers, its max taken and its codes written; a longer row
takes a max-reduction pass and then a quantize pass that re-reads it from L1/L2. Bytes for
x [M, K] in fp16/bf16: reads 2MK, writes MK + 4M.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels.device import (
    fp8_inverse_scale,
    inverse_scale,
    round_to_e4m3,
    round_to_int8,
)
from opbench.kernels.host import INTERPRET, next_power_of_2
from opbench.kernels.launch import KernelCall, tuned_call
from opbench.kernels.tuning import Choice, Config


@triton.jit
def _quantize_rows_kernel(
    # pointers
    x_ptr,  # fp16/bf16/fp32 [M, K] activations (with GATE: the second factor, SwiGLU's up)
    gate_ptr,  # [M, K], x's strides: the first factor (read only if GATE)
    q_ptr,  # int8 or float8e4nv [M, K] quantized activations (row-major, contiguous)
    scale_ptr,  # fp32 [M] per-row scales s[m]
    # shapes
    K,  # row length
    # strides, in elements
    stride_xm,
    stride_xk,
    stride_qm,
    # meta-parameters
    BLOCK_K: tl.constexpr,  # elements per step along the row
    FP8: tl.constexpr,  # False: the int8 rule; True: the fp8 (e4m3) rule
    ONE_STEP: tl.constexpr,  # K <= BLOCK_K: one pass over the row instead of two
    GATE: tl.constexpr,  # 0: quantize x; 1: gate * x; 2: silu(gate) * x (fp32, then quantized)
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    g_row = gate_ptr + row * stride_xm
    q_row = q_ptr + row * stride_qm
    offs = tl.arange(0, BLOCK_K)

    if ONE_STEP:  # the whole row in one block: read it once, keep it in registers
        mask = offs < K
        x = _row_values(x_row, g_row, offs * stride_xk, mask, GATE)
        row_max = tl.max(tl.abs(x), axis=0)
        inv_scale = _store_scale(scale_ptr + row, row_max, FP8)
        tl.store(q_row + offs, _codes(x * inv_scale, FP8), mask=mask)
    else:
        absmax = tl.zeros((BLOCK_K,), dtype=tl.float32)
        for start in range(0, K, BLOCK_K):
            mask = start + offs < K
            x = _row_values(x_row, g_row, (start + offs) * stride_xk, mask, GATE)
            absmax = tl.maximum(absmax, tl.abs(x))
        inv_scale = _store_scale(scale_ptr + row, tl.max(absmax, axis=0), FP8)
        for start in range(0, K, BLOCK_K):
            mask = start + offs < K
            x = _row_values(x_row, g_row, (start + offs) * stride_xk, mask, GATE)
            tl.store(q_row + start + offs, _codes(x * inv_scale, FP8), mask=mask)


@triton.jit
def _row_values(x_row, g_row, offsets, mask, GATE: tl.constexpr):
    """The values to quantize at `offsets` of the row, in fp32 (0 where masked): x, or the
    gated product (silu as the GEMM epilogue's, epilogue.apply_activation)."""
    x = tl.load(x_row + offsets, mask=mask, other=0.0).to(tl.float32)
    if GATE != 0:
        g = tl.load(g_row + offsets, mask=mask, other=0.0).to(tl.float32)
        if GATE == 2:
            g = g / (1.0 + tl.exp(-g))
        x = g * x
    return x


@triton.jit
def _store_scale(scale_ptr, row_max, FP8: tl.constexpr):
    """Store the row's scale (max / 448 or max / 127); return the multiplier to its codes."""
    if FP8:
        tl.store(scale_ptr, row_max / 448.0)
        inv_scale = fp8_inverse_scale(row_max)
    else:
        tl.store(scale_ptr, row_max / 127.0)
        inv_scale = inverse_scale(row_max)
    return inv_scale


@triton.jit
def _codes(scaled, FP8: tl.constexpr):
    """fp32 values already divided by the scale -> int8 or e4m3 codes (device.py's rules)."""
    if FP8:
        q = round_to_e4m3(scaled).to(tl.float8e4nv)
    else:
        q = round_to_int8(scaled)
    return q


def row_config(k: int) -> Config:
    """One step covers rows up to 16K elements (all the LLM widths in our suites): the second
    pass then re-reads the row from L1. Longer rows loop. Warps: 4 up to 4096 elements, 8
    above; measured on an H100 (2026-11-25 evening, docs/perf/gemm.md) at M = 2048, 4096:
    K = 4096 ran at 96-99% of an equal-traffic copy with 4 or 8 warps, K = 11008 (16384-wide
    step) at 77-93% with 8 against 72-82% with 16 or 4, 70-80% with 32."""
    block_k = 64 if INTERPRET else min(next_power_of_2(k), 16384)
    num_warps = 4 if block_k <= 4096 else 8
    return Config.of(BLOCK_K=block_k, num_warps=num_warps, num_stages=3)


# `gate` modes of quantize_rows_call: what multiplies x before it is quantized.
GATES = {"none": 0, "mul": 1, "silu_mul": 2}


def quantize_rows_call(
    x: torch.Tensor,
    q: torch.Tensor,
    scale: torch.Tensor,
    gate: torch.Tensor | None = None,
    gate_mode: str = "none",
) -> tuple[KernelCall, Choice]:
    """The bound `_quantize_rows_kernel` for x [M, K] -> q [M, K] (int8, or float8_e4m3fn
    for the fp8 rule), scale [M] fp32. With `gate` (x's shape, dtype and strides) and
    gate_mode "mul" or "silu_mul": the codes of gate * x or silu(gate) * x, computed in fp32
    (SwiGLU's product quantized where it is made, for the fp8 linear that reads it)."""
    m, k = x.shape
    mode = GATES[gate_mode]
    if (gate is None) != (mode == 0):
        raise ValueError(f"quantize_rows: gate_mode {gate_mode!r} with gate={gate is not None}")
    if gate is not None and (gate.shape != x.shape or gate.stride() != x.stride()
                             or gate.dtype != x.dtype or gate.device != x.device):  # fmt: skip
        raise ValueError("quantize_rows: gate must have x's shape, strides, dtype and device")
    config = row_config(k)
    fp8 = q.dtype == torch.float8_e4m3fn
    key = f"{x.dtype}|{q.dtype}|K{k}" + (f"|{gate_mode}" if mode else "")
    return tuned_call(
        "quantize_rows", _quantize_rows_kernel, key, [config], lambda _: (m,),
        (x, gate if gate is not None else x, q, scale, k, x.stride(0), x.stride(1), q.stride(0)),
        {"FP8": fp8, "ONE_STEP": k <= config["BLOCK_K"], "GATE": mode},
        x.device,
    )  # fmt: skip


def quantize_rows(
    x: torch.Tensor,
    q: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    dtype: torch.dtype = torch.int8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric quantization of a 2-D x to `dtype` (int8 or float8_e4m3fn):
    returns (q [M, K], scale fp32 [M])."""
    if x.dim() != 2:
        raise ValueError(f"quantize_rows expects a 2-D tensor, got shape {tuple(x.shape)}")
    M, K = x.shape
    if q is None:
        q = torch.empty((M, K), dtype=dtype, device=x.device)
    if scale is None:
        scale = torch.empty((M,), dtype=torch.float32, device=x.device)
    if M > 0:
        quantize_rows_call(x, q, scale)[0].call()
    return q, scale


def quantize_per_row(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Build time, torch: the same rule on the rows of a 2-D v (weights [N, K], or a conv's
    [Cout, K]) in float32 -> (q int8 [N, K] contiguous, s fp32 [N])."""
    w = v.detach().to(torch.float32)
    absmax = w.abs().amax(dim=1)
    inv_scale = 127.0 / absmax.clamp_min(1e-30)
    scaled = (w * inv_scale[:, None]).clamp(-127.0, 127.0)
    q = torch.where(scaled >= 0, scaled + 0.5, scaled - 0.5).to(torch.int8).contiguous()
    return q, (absmax / 127.0).contiguous()
