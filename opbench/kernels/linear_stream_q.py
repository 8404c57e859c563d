"""Weight-only int8 / int4 decode linears, second design: no nibble interleave, W as the
left operand, and a CUDA-core path for a few rows.

Math (as `linear_stream.py`; formats from `ops/quant.py`): x [M, K] fp16/bf16, and

     8: Wq int8 [N, K], sw fp32 [N]          y = act( sw[n] * (x @ Wq^T)[m, n] + b[n] )
     4: Wq [N, K / 2] bytes, byte j holding codes k = 2j (low nibble) and 2j + 1 (high), each
        as q + 8; group scales s [K / G, N]:  y = act( sum_g s[g, n] * (x_g @ Wq_g^T)[m, n] + b[n] )

What differs from `_linear_stream_kernel`, and why (docs/perf/gemm.md, 2026-11-25 evening):
  * int4 codes are never joined back into k order (`tl.join` + reshape is a register shuffle
    per element): the low nibbles multiply x's even columns and the high nibbles its odd
    columns, x[m, k0 + 2j] and x[m, k0 + 2j + 1], loaded as two stride-2 tiles. x is tiny and
    read from L1/L2; W's bytes stay in the order they are stored and loaded.
  * USE_DOT: the tensor-core step is acc[n, m] += W[n, :] . x[m, :], i.e. W (dequantized in
    registers) is the *left* operand, whose tile may stay in registers on Hopper's wgmma, and
    the M rows (padded to 16) are the narrow right operand. The old kernel had x on the left
    and W on the right, which wgmma must read from shared memory.
  * Without USE_DOT (a few rows, BLOCK_M <= 4): CUDA-core multiply-adds in fp32, one
    [BLOCK_M, BLOCK_N, BLOCK_K] product summed over k every step. Codes become floats by the
    mantissa trick (OR the non-negative code into 2^23's mantissa, subtract 2^23 + offset),
    which avoids the integer -> float conversion instruction (a quarter of the FMA rate).

A grid of (N tiles, SPLIT_K) programs (one M tile: M <= BLOCK_M); each streams a
[BLOCK_N, K / SPLIT_K] slab of W and ends through `linear_kernels.finish_tile` (the split-K
reduction by the last program to arrive, the int8 channel scale, bias and activation).
Bytes: NK (int8) or NK / 2 + 2NK / G (int4), read once; x (2MK) and y (2MN) are small.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from opbench.kernels.device import dot_operand
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, config_call
from opbench.kernels.linear_kernels import finish_tile
from opbench.kernels.tuning import Config


@triton.jit
def _codes(w, OFFSET: tl.constexpr, DTYPE: tl.constexpr, USE_DOT: tl.constexpr,
           FAST: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """Stored non-negative codes c = q + OFFSET (0..255) -> q, without the integer -> float
    conversion instruction where the mantissa trick applies: the float with c OR-ed into the
    mantissa of 2^23 (fp32) or 1024 (fp16; ulp 1 up to 2048) is 2^23 + c or 1024 + c exactly.
    fp32 on CUDA cores (and under the interpreter with bf16, UPCAST), else x's dtype for the
    tensor cores (bf16 converts: its trick cannot be checked in the interpreter)."""
    if USE_DOT and not UPCAST:
        if FAST:
            q = (w.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True) - (1024.0 + OFFSET)
        else:
            q = (w.to(tl.int16) - OFFSET).to(DTYPE)
    else:
        q = (w.to(tl.int32) | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + OFFSET)
    return q


# M changes with the batch: not specializing on it avoids a compile per M.
@triton.jit(do_not_specialize=["M"])
def _weight_only_kernel(
    # pointers
    x_ptr,  # x [M, K] fp16/bf16, unit stride along K
    w_ptr,  # int8 [N, K] (8) or uint8 [N, K // 2] (4), unit stride along K
    w_scale_ptr,  # 8: fp32 [N] channel scales; 4: [K // GROUP_SIZE, N] group scales
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N] (read only if HAS_BIAS)
    partial_ptr,  # fp32 [SPLIT_K, M, N] workspace (unused when SPLIT_K == 1)
    arrivals_ptr,  # int32 [N tiles]: zero between launches; the last arrival resets its slot
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_xm,
    stride_wn,  # W row stride in bytes
    stride_sg,  # int4: group-scale row stride (N)
    stride_om,
    stride_on,
    # meta-parameters
    BLOCK_M: tl.constexpr,  # >= M; >= 16 with USE_DOT
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # codes per step; divides GROUP_SIZE for int4
    SPLIT_K: tl.constexpr,
    W_BITS: tl.constexpr,  # 8 or 4
    GROUP_SIZE: tl.constexpr,  # int4 group length along K (unused for int8)
    USE_DOT: tl.constexpr,  # tensor-core steps; False: CUDA-core fp32 multiply-adds
    FAST: tl.constexpr,  # fp16 codes by the mantissa trick (tensor-core path, fp16 x)
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask in the K loop (always so for int4)
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    UPCAST: tl.constexpr,  # interpreter + bf16 only (see device.dot_operand)
):
    tile_n = tl.program_id(0)
    split = tl.program_id(1)
    k_blocks = tl.cdiv(K, BLOCK_K)
    blocks_per_split = tl.cdiv(k_blocks, SPLIT_K)
    first_block = split * blocks_per_split
    last_block = tl.minimum(first_block + blocks_per_split, k_blocks)

    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = offs_m[:, None] < M  # rows past M load zeros (no memory traffic)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)  # columns past N re-read row 0
    W_STEP: tl.constexpr = BLOCK_K // 2 if W_BITS == 4 else BLOCK_K  # bytes per row and step
    offs_wk = first_block * W_STEP + tl.arange(0, W_STEP)
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_wk[None, :]
    # int4: x's even and odd columns of the step (the low and high nibbles' k); int8: all.
    X_STRIDE: tl.constexpr = 2 if W_BITS == 4 else 1
    offs_xk = first_block * BLOCK_K + X_STRIDE * tl.arange(0, W_STEP)
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_xk[None, :]

    if USE_DOT:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # y^T: W is the left operand
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(first_block, last_block):
        if EVEN_K:
            w = tl.load(w_ptrs)
            x = tl.load(x_ptrs, mask=row_ok, other=0.0)
        else:  # int8 only: int4's K is a multiple of GROUP_SIZE, itself one of BLOCK_K
            k_ok = offs_wk[None, :] < K - (k_block - first_block) * BLOCK_K
            w = tl.load(w_ptrs, mask=k_ok, other=0)
            x = tl.load(x_ptrs, mask=row_ok & k_ok, other=0.0)
        if W_BITS == 4:
            x_odd = tl.load(x_ptrs + 1, mask=row_ok, other=0.0)
            low = _codes(w & 0xF, 8, x.dtype, USE_DOT, FAST, UPCAST)
            high = _codes(w >> 4, 8, x.dtype, USE_DOT, FAST, UPCAST)
            group = k_block * BLOCK_K // GROUP_SIZE
            scale = tl.load(w_scale_ptr + group * stride_sg + rows_w).to(tl.float32)
            if USE_DOT:
                part = tl.dot(low, tl.trans(dot_operand(x, UPCAST)))
                part = tl.dot(high, tl.trans(dot_operand(x_odd, UPCAST)), part)
                acc += part * scale[:, None]
            else:
                product = (low[None, :, :] * x.to(tl.float32)[:, None, :]
                           + high[None, :, :] * x_odd.to(tl.float32)[:, None, :])  # fmt: skip
                acc += tl.sum(product, axis=2) * scale[None, :]
        else:  # int8 two's complement: flipping the sign bit gives q + 128 in 0..255
            codes = _codes(w.to(tl.uint8, bitcast=True) ^ 0x80, 128, x.dtype, USE_DOT, FAST,
                           UPCAST)  # fmt: skip
            if USE_DOT:
                acc = tl.dot(codes, tl.trans(dot_operand(x, UPCAST)), acc)
            else:
                acc += tl.sum(codes[None, :, :] * x.to(tl.float32)[:, None, :], axis=2)
        w_ptrs += W_STEP
        x_ptrs += BLOCK_K

    total = tl.trans(acc) if USE_DOT else acc  # [BLOCK_M, BLOCK_N]
    ones = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)  # no per-row scale: x is not quantized
    finish_tile(
        total, offs_m, offs_n, M, N, out_ptr, stride_om, stride_on, bias_ptr, ones,
        w_scale_ptr, out_ptr, partial_ptr, arrivals_ptr, split, tile_n, SPLIT_K, W_BITS == 8,
        HAS_BIAS, ACTIVATION, False,
    )  # fmt: skip


def weight_only_calls(
    plan: Config, x2: torch.Tensor, layer: Any, out2: torch.Tensor
) -> tuple[list[KernelCall], list]:
    """The one KernelCall of `_weight_only_kernel` for x2 [M, K] -> out2 [M, N] with a
    "stream_q" plan (`linear_plans.stream_q_plan`), and its workspace (the split-K partials,
    SPLIT_K * M * N fp32, allocated here at bind). `layer` is an `Int8WeightLinear` or an
    `Int4WeightLinear`."""
    if x2.stride(1) != 1:
        raise ValueError("the weight-only kernel reads x with unit stride along K")
    M, K = x2.shape
    N = layer.out_features
    w_bits, group = layer.w_bits, layer.group_size
    bm, bn, bk, split = plan["BLOCK_M"], plan["BLOCK_N"], plan["BLOCK_K"], plan["SPLIT_K"]
    if M > bm:
        raise ValueError(f"stream_q plan: BLOCK_M {bm} < M {M} (one M tile only)")
    if w_bits == 4 and (group % bk or K % group):
        raise ValueError(f"int4 plan: BLOCK_K {bk} must divide group_size {group}, which divides K")
    grid = (cdiv(N, bn), split)
    if grid[0] > layer.arrivals.numel():
        layer.arrivals = torch.zeros(grid[0], dtype=torch.int32, device=x2.device)
    unused = out2  # any pointer, for arguments the constexpr flags switch off
    partial = unused
    if split > 1:
        partial = torch.empty(split * M * N, dtype=torch.float32, device=x2.device)
    scales = layer.col_scale if w_bits == 8 else layer.group_scale
    bias = layer.bias if layer.bias is not None else unused
    args = (x2, layer.weight, scales, out2, bias, partial, layer.arrivals, M, N, K,
            x2.stride(0), layer.weight.stride(0), N, *out2.stride())  # fmt: skip
    upcast = INTERPRET and x2.dtype == torch.bfloat16
    named = dict(W_BITS=w_bits, GROUP_SIZE=group, EVEN_K=K % bk == 0,
                 FAST=x2.dtype == torch.float16, HAS_BIAS=layer.bias is not None,
                 ACTIVATION=layer.activation, UPCAST=upcast)  # fmt: skip
    return [config_call(_weight_only_kernel, grid, args, named, plan)], [partial]
