"""Weight-only int8 / int4 decode linears, second design: int4 nibbles never interleaved
back into k order, and a choice of which operand W is.

Math (as `linear_stream.py`; formats from `kernels/quant.py`): x [M, K] fp16/bf16, and

     8: Wq int8 [N, K], sw fp32 [N]          y = act( sw[n] * (x @ Wq^T)[m, n] + b[n] )
     4: Wq [N, K / 2] bytes, byte j holding codes k = 2j (low nibble) and 2j + 1 (high), each
        as q + 8; group scales s [K / G, N]:  y = act( sum_g s[g, n] * (x_g @ Wq_g^T)[m, n] + b[n] )

What differs from `_linear_stream_kernel`, and why (docs/perf/gemm.md, 2026-11-25 evening):
  * int4 codes are never joined back into k order (`tl.join` + reshape of W): x's step is
    split in registers into its even and odd columns, which the low and high nibbles
    multiply (two tensor-core products per step, K/2 deep each); W's bytes stay as stored.
  * W_LEFT: the product can run as acc[n, m] += W[n, :] . x[m, :], W (dequantized in
    registers) the left operand (the one Hopper's wgmma may take from registers) and the
    16-row x the right; else as the first kernel, x left and W right.
A CUDA-core variant (fp32 multiply-adds, a [BLOCK_M, BLOCK_N, BLOCK_K] product summed over k
each step) was measured 1.7-30x slower than every tensor-core plan on an H100 and removed
(commit 8a3ccf9 has it; docs/perf/gemm.md).
W stored tile by tile (W_TILED: each step one contiguous block, here and in the first
kernel) left the rules' times within 0-5% on an H100 (median 1.00-1.03x) and was removed
(commit 016ba13 has it; docs/perf/gemm.md).

A grid of (N tiles, SPLIT_K) programs (one M tile: M <= BLOCK_M); each streams a
[BLOCK_N, K / SPLIT_K] slab of W and ends through `linear_epilogue.finish_tile` (the split-K
reduction by the last program to arrive, the int8 channel scale, bias and activation).
Bytes: NK (int8) or NK / 2 + 2NK / G (int4), read once; x (2MK) and y (2MN) are small.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from opbench.kernels.device import dot_operand
from opbench.kernels.gemm.linear_epilogue import (
    EpilogueInputs,
    Output,
    RopeArgs,
    SplitK,
    finish_tile,
)
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, config_call
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Config


@triton.jit
def _codes(w, OFFSET: tl.constexpr, DTYPE: tl.constexpr, FAST: tl.constexpr,
           UPCAST: tl.constexpr):  # fmt: skip
    """Stored non-negative codes c = q + OFFSET (0..255) -> q in the dot's operand type.
    FAST (fp16): c OR-ed into the mantissa of 1024 (ulp 1 up to 2048) is the fp16 1024 + c
    exactly, so no integer -> float conversion instruction runs (Hopper issues those at a
    quarter of the FMA rate). bf16 converts (its trick cannot be checked in the interpreter);
    under the interpreter bf16 operands are fp32 (UPCAST)."""
    if UPCAST:
        q = (w.to(tl.int16) - OFFSET).to(tl.float32)
    elif FAST:
        q = (w.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True) - (1024.0 + OFFSET)
    else:
        q = (w.to(tl.int16) - OFFSET).to(DTYPE)
    return q


# Packed unpack (ASM), 4 codes per 32-bit register instead of one per lane: the tricks of
# FasterTransformer's and Marlin's dequantizers, written here as PTX. fp16 only; not runnable in
# Triton's interpreter (CPU tests run the Triton-op path, the GPU run checks this one).
# int8: flip each byte's sign bit (q + 128), interleave the bytes with 0x64 (fp16 1024 + c, by
# PRMT), subtract 1152 from both halves at once (sub.f16x2).
_INT8_ASM = tl.constexpr("""{
.reg .b32 t, c;
xor.b32 t, $2, 0x80808080;
mov.b32 c, 0x64806480;
prmt.b32 $0, t, 0x64646464, 0x5150;
prmt.b32 $1, t, 0x64646464, 0x5352;
sub.f16x2 $0, $0, c;
sub.f16x2 $1, $1, c;
}""")
# int4: bytes reordered to (b0, b2, b1, b3) so that nibble 0 of each 16-bit half is the low
# nibble of b0 and b1; shifting by 8, 4, 12 brings b2/b3 low and b0/b1, b2/b3 high nibbles
# there; (v & 0x000F000F) | 0x64006400 (one LOP3) is fp16 1024 + c in both halves; minus 1032.
_INT4_ASM = tl.constexpr("""{
.reg .b32 v, t, c;
prmt.b32 v, $4, 0, 0x3120;
mov.b32 c, 0x64086408;
lop3.b32 $0, v, 0x000f000f, 0x64006400, 0xea;
shr.b32 t, v, 8;
lop3.b32 $1, t, 0x000f000f, 0x64006400, 0xea;
shr.b32 t, v, 4;
lop3.b32 $2, t, 0x000f000f, 0x64006400, 0xea;
shr.b32 t, v, 12;
lop3.b32 $3, t, 0x000f000f, 0x64006400, 0xea;
sub.f16x2 $0, $0, c;
sub.f16x2 $1, $1, c;
sub.f16x2 $2, $2, c;
sub.f16x2 $3, $3, c;
}""")


@triton.jit
def _int8_asm(w):
    """int8 codes [.., n] -> fp16 [.., n], 4 per register (see _INT8_ASM)."""
    return tl.inline_asm_elementwise(_INT8_ASM, "=r,=r,r", [w], dtype=tl.float16,
                                     is_pure=True, pack=4)  # fmt: skip


@triton.jit
def _int4_asm(w):
    """Packed int4 bytes [.., n] -> (low nibbles, high nibbles) as fp16 q, 4 bytes per
    register (see _INT4_ASM)."""
    return tl.inline_asm_elementwise(_INT4_ASM, "=r,=r,=r,=r,r", [w],
                                     dtype=(tl.float16, tl.float16), is_pure=True, pack=4)  # fmt: skip


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
    BLOCK_M: tl.constexpr,  # >= M, >= 16 (tl.dot)
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # codes per step; divides GROUP_SIZE for int4
    SPLIT_K: tl.constexpr,
    W_BITS: tl.constexpr,  # 8 or 4
    GROUP_SIZE: tl.constexpr,  # int4 group length along K (unused for int8)
    W_LEFT: tl.constexpr,  # W the left operand (acc is y^T), else x (acc is y)
    FAST: tl.constexpr,  # fp16 codes by the mantissa trick (fp16 x)
    ASM: tl.constexpr,  # fp16 codes by the packed PTX unpack (fp16 x, GPU only)
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask in the K loop (always so for int4)
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    UPCAST: tl.constexpr,  # interpreter + bf16 only (see device.dot_operand)
):
    tile_n = tl.program_id(0)
    split = tl.program_id(1)
    k_blocks = tl.cdiv(K, BLOCK_K)
    # Balanced splits: lengths differ by at most one step (any SPLIT_K, e.g. wave-sized
    # grids), where ceil-sized ones would leave the last split short or empty.
    first_block = split * k_blocks // SPLIT_K
    last_block = (split + 1) * k_blocks // SPLIT_K

    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = offs_m[:, None] < M  # rows past M load zeros (no memory traffic)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)  # columns past N re-read row 0
    W_STEP: tl.constexpr = BLOCK_K // 2 if W_BITS == 4 else BLOCK_K  # bytes per row and step
    offs_wk = first_block * W_STEP + tl.arange(0, W_STEP)
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_wk[None, :]
    offs_k = first_block * BLOCK_K + tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]

    if W_LEFT:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(first_block, last_block):
        if EVEN_K:
            w = tl.load(w_ptrs)
            x = tl.load(x_ptrs, mask=row_ok, other=0.0)
        else:  # int8 only: int4's K is a multiple of GROUP_SIZE, itself one of BLOCK_K
            k_left = K - (k_block - first_block) * BLOCK_K
            w = tl.load(w_ptrs, mask=offs_wk[None, :] < k_left, other=0)
            x = tl.load(x_ptrs, mask=row_ok & (offs_k[None, :] < k_left), other=0.0)
        x = dot_operand(x, UPCAST)
        if W_BITS == 4:
            # x's even and odd columns, split in registers: the low and high nibbles' k.
            x_even, x_odd = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_K // 2, 2)))
            if ASM:
                low, high = _int4_asm(w)
            else:
                low = _codes(w & 0xF, 8, x.dtype, FAST, UPCAST)
                high = _codes(w >> 4, 8, x.dtype, FAST, UPCAST)
            group = k_block * BLOCK_K // GROUP_SIZE
            scale = tl.load(w_scale_ptr + group * stride_sg + rows_w).to(tl.float32)
            if W_LEFT:
                part = tl.dot(low, tl.trans(x_even))
                part = tl.dot(high, tl.trans(x_odd), part)
                acc += part * scale[:, None]
            else:
                part = tl.dot(x_even, tl.trans(low))
                part = tl.dot(x_odd, tl.trans(high), part)
                acc += part * scale[None, :]
        else:  # int8 two's complement: flipping the sign bit gives q + 128 in 0..255
            if ASM:
                codes = _int8_asm(w)
            else:
                codes = _codes(w.to(tl.uint8, bitcast=True) ^ 0x80, 128, x.dtype, FAST, UPCAST)
            if W_LEFT:
                acc = tl.dot(codes, tl.trans(x), acc)
            else:
                acc = tl.dot(x, tl.trans(codes), acc)
        w_ptrs += W_STEP
        x_ptrs += BLOCK_K

    total = tl.trans(acc) if W_LEFT else acc  # [BLOCK_M, BLOCK_N]
    ones = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)  # no per-row scale: x is not quantized
    finish_tile(
        total, offs_m, offs_n, Output(out_ptr, M, N, stride_om, stride_on),
        EpilogueInputs(bias_ptr, ones, w_scale_ptr, out_ptr),  # no residual
        RopeArgs(1, 0, 0, 0.0), SplitK(partial_ptr, arrivals_ptr, split, tile_n),
        SPLIT_K, W_BITS == 8, HAS_BIAS, ACTIVATION, False, 0, 2,  # no RoPE
    )  # fmt: skip


def weight_only_calls(
    plan: Config, x2: torch.Tensor, layer: Any, out2: torch.Tensor
) -> tuple[list[KernelCall], list]:
    """The one KernelCall of `_weight_only_kernel` for x2 [M, K] -> out2 [M, N] with a
    "stream_q" plan (`stream_plans.stream_q_plan`), and its workspace: the split-K partials,
    SPLIT_K * M * N fp32, per-launch scratch (`scratch.scratch`) taken here at bind; the tile
    counters (`layer.arrivals`) are state and stay the layer's. `layer` is an
    `Int8WeightLinear` or an `Int4WeightLinear`."""
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
        partial = scratch((split * M * N,), torch.float32, x2.device)  # per launch
    scales = layer.col_scale if w_bits == 8 else layer.group_scale
    bias = layer.bias if layer.bias is not None else unused
    args = (x2, layer.weight, scales, out2, bias, partial, layer.arrivals, M, N, K,
            x2.stride(0), layer.weight.stride(0), N, *out2.stride())  # fmt: skip
    upcast = INTERPRET and x2.dtype == torch.bfloat16
    named = dict(W_BITS=w_bits, GROUP_SIZE=group, EVEN_K=K % bk == 0,
                 FAST=x2.dtype == torch.float16, HAS_BIAS=layer.bias is not None,
                 ACTIVATION=layer.activation, UPCAST=upcast)  # fmt: skip
    # The packed PTX unpack: asked for by the plan, run for fp16 on a GPU; elsewhere the same
    # codes by Triton ops (the interpreter cannot run inline PTX).
    named["ASM"] = bool(plan.kwargs.get("ASM_UNPACK", False)) and named["FAST"] and not INTERPRET
    if w_bits == 4 and bk < 32:
        raise ValueError(f"int4 plan: BLOCK_K {bk} < 32 (each half-step product needs K >= 16)")
    return [config_call(_weight_only_kernel, grid, args, named, plan)], [partial]
