"""Decode linears that stream W, K-sliced: each warp owns a slice of every K step.

Same math, formats and epilogue as `linear_stream_q._weight_only_kernel` (x [M, K] fp16,
int8 W with channel scales, or int4 W packed two per byte with group scales [K / G, N]),
and fp16 W as `linear_stream._linear_stream_kernel`'s GEMV (W_BITS 16).

Why a second layout (docs/perf/gemm.md, 2026-11-25 night). In `_weight_only_kernel` the
warps of a program split the output columns: each warp multiplies all 16 rows of x's step
by its BLOCK_N / num_warps columns, so every warp reads the whole x step from shared memory.
At the rule's int8 tile (32 columns, 256 codes, 4 warps: 8 columns per warp) a thread reads
256 B of x per step for 64 B of W (sm_90 SASS: 32 LDS.64 of x, 4 LDSM of W per step).
Here a step's tiles are [WARPS_K, rows, SUB] (slice s holds k = s * SUB .. (s + 1) * SUB)
and the products are one batched dot over s; Triton 3.6 puts every warp on the batch
dimension of a batched mma.sync dot, so with WARPS_K == num_warps each warp multiplies its
own K slice for all BLOCK_N columns and reads only its slice of x (same tile: 8 LDS.64 of
x). The slices are summed once, after the loop. int4: a slice lies inside one scale group
(SUB divides GROUP_SIZE), so a step may span several groups (one scale per slice and
column), and a step of 256 bytes per row needs no more scale multiplies per code than the
one-group steps of the first layout.

Cache hints (evict_first on W) were tried: Triton 3.6 turns these loads into cp.async, whose
PTX then carries no cache hint at all, so the option changed nothing and was dropped.

K tails: K is a multiple of SUB (the launcher checks it), so a slice is either wholly inside
K or wholly past it, and the mask is constant along each slice (loads stay 16-byte wide).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, config_call
from opbench.kernels.linear_kernels import finish_tile
from opbench.kernels.linear_stream_q import _codes, _int4_asm, _int8_asm
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Config


# M changes with the batch: not specializing on it avoids a compile per M.
@triton.jit(do_not_specialize=["M"])
def _weight_only_sliced_kernel(
    x_ptr,  # x [M, K] fp16, unit stride along K
    w_ptr,  # fp16 [N, K] (16), int8 [N, K] (8) or uint8 [N, K // 2] (4), unit stride along K
    w_scale_ptr,  # 8: fp32 [N] channel scales; 4: [K // GROUP_SIZE, N] group scales; 16: unused
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N] (read only if HAS_BIAS)
    partial_ptr,  # fp32 [SPLIT_K, M, N] workspace (unused when SPLIT_K == 1)
    arrivals_ptr,  # int32 [N tiles]: zero between launches; the last arrival resets its slot
    M,
    N,
    K,
    stride_xm,
    stride_wn,  # W row stride in elements (bytes but for fp16)
    stride_sg,  # int4: group-scale row stride (N)
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,  # >= M, >= 16 (tl.dot)
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # codes per step, WARPS_K slices of SUB
    WARPS_K: tl.constexpr,  # slices per step: num_warps (one per warp)
    SPLIT_K: tl.constexpr,
    W_BITS: tl.constexpr,  # 16, 8 or 4
    GROUP_SIZE: tl.constexpr,  # int4 group length along K, a multiple of SUB
    FAST: tl.constexpr,  # fp16 codes by the mantissa trick
    ASM: tl.constexpr,  # fp16 codes by the packed PTX unpack (GPU only)
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask in the K loop
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
):
    tile_n = tl.program_id(0)
    split = tl.program_id(1)
    k_blocks = tl.cdiv(K, BLOCK_K)
    blocks_per_split = tl.cdiv(k_blocks, SPLIT_K)
    first_block = split * blocks_per_split
    last_block = tl.minimum(first_block + blocks_per_split, k_blocks)

    SUB: tl.constexpr = BLOCK_K // WARPS_K  # codes per slice
    W_STEP: tl.constexpr = BLOCK_K // 2 if W_BITS == 4 else BLOCK_K  # W elements per row, step
    W_SUB: tl.constexpr = W_STEP // WARPS_K
    offs_s = tl.arange(0, WARPS_K)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = offs_m[None, :, None] < M  # rows past M load zeros (no memory traffic)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)  # columns past N re-read row 0
    slice_k = first_block * BLOCK_K + offs_s * SUB  # first k of each slice, this step
    w_ptrs = (w_ptr + rows_w[None, :, None] * stride_wn + (first_block * W_STEP + offs_s * W_SUB)[:, None, None]
              + tl.arange(0, W_SUB)[None, None, :])  # fmt: skip
    x_ptrs = (x_ptr + offs_m[None, :, None].to(tl.int64) * stride_xm + slice_k[:, None, None]
              + tl.arange(0, SUB)[None, None, :])  # fmt: skip

    acc = tl.zeros((WARPS_K, BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(first_block, last_block):
        if EVEN_K:
            w = tl.load(w_ptrs)
            x = tl.load(x_ptrs, mask=row_ok, other=0.0)
        else:  # whole slices past K read nothing: zero codes times zero x
            inside = (slice_k < K)[:, None, None]
            w = tl.load(w_ptrs, mask=inside, other=0)
            x = tl.load(x_ptrs, mask=row_ok & inside, other=0.0)
        if W_BITS == 4:
            # x's even and odd columns, split in registers: the low and high nibbles' k.
            x_even, x_odd = tl.split(tl.reshape(x, (WARPS_K, BLOCK_M, SUB // 2, 2)))
            if ASM:
                low, high = _int4_asm(w)
            else:
                low = _codes(w & 0xF, 8, x.dtype, FAST, False)
                high = _codes(w >> 4, 8, x.dtype, FAST, False)
            part = tl.dot(x_even, tl.trans(low, (0, 2, 1)))
            part = tl.dot(x_odd, tl.trans(high, (0, 2, 1)), part)
            group = tl.minimum(slice_k, K - 1) // GROUP_SIZE  # slices past K: any finite scale
            scale = tl.load(w_scale_ptr + group[:, None] * stride_sg + rows_w[None, :])
            acc += part * scale.to(tl.float32)[:, None, :]
        elif W_BITS == 16:  # fp16 W: the layout alone
            acc = tl.dot(x, tl.trans(w, (0, 2, 1)), acc)
        else:  # int8 two's complement: flipping the sign bit gives q + 128 in 0..255
            if ASM:
                codes = _int8_asm(w)
            else:
                codes = _codes(w.to(tl.uint8, bitcast=True) ^ 0x80, 128, x.dtype, FAST, False)
            acc = tl.dot(x, tl.trans(codes, (0, 2, 1)), acc)
        w_ptrs += W_STEP
        x_ptrs += BLOCK_K
        slice_k += BLOCK_K

    total = tl.sum(acc, axis=0)  # [BLOCK_M, BLOCK_N], the slices in a fixed order
    ones = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)  # no per-row scale: x is not quantized
    finish_tile(
        total, offs_m, offs_n, M, N, out_ptr, stride_om, stride_on, bias_ptr, ones,
        w_scale_ptr, out_ptr, partial_ptr, arrivals_ptr, split, tile_n, SPLIT_K, W_BITS == 8,
        HAS_BIAS, ACTIVATION, False,
    )  # fmt: skip


def sliced_calls(
    plan: Config, x2: torch.Tensor, layer: Any, out2: torch.Tensor
) -> tuple[list[KernelCall], list]:
    """The one KernelCall of `_weight_only_sliced_kernel` for x2 [M, K] fp16 -> out2 [M, N]
    with a "stream_qk" plan (`linear_plans.stream_qk_plan`), and its split-K workspace (as
    `linear_stream_q.weight_only_calls`)."""
    if x2.dtype != torch.float16:
        raise ValueError("the K-sliced streaming kernel takes float16 x")
    if x2.stride(1) != 1:
        raise ValueError("the weight-only kernel reads x with unit stride along K")
    M, K = x2.shape
    N = layer.out_features
    w_bits, group = layer.w_bits, layer.group_size
    bm, bn, bk, split = plan["BLOCK_M"], plan["BLOCK_N"], plan["BLOCK_K"], plan["SPLIT_K"]
    slices = plan["WARPS_K"]
    sub = bk // slices
    if M > bm:
        raise ValueError(f"stream_qk plan: BLOCK_M {bm} < M {M} (one M tile only)")
    if K % sub:
        raise ValueError(f"stream_qk plan: K {K} is not a multiple of its slice ({sub} codes)")
    if w_bits == 4 and (group % sub or sub < 32):
        raise ValueError(f"int4 stream_qk plan: slice {sub} must divide group_size {group}, "
                         "and be >= 32 codes")  # fmt: skip
    grid = (cdiv(N, bn), split)
    if grid[0] > layer.arrivals.numel():
        layer.arrivals = torch.zeros(grid[0], dtype=torch.int32, device=x2.device)
    unused = out2  # any pointer, for arguments the constexpr flags switch off
    partial = unused
    if split > 1:
        partial = scratch((split * M * N,), torch.float32, x2.device)  # per launch
    scales = {8: "col_scale", 4: "group_scale"}
    scales = getattr(layer, scales[w_bits]) if w_bits in scales else unused
    bias = layer.bias if layer.bias is not None else unused
    args = (x2, layer.weight, scales, out2, bias, partial, layer.arrivals, M, N, K,
            x2.stride(0), layer.weight.stride(0), N, *out2.stride())  # fmt: skip
    named = dict(WARPS_K=slices, W_BITS=w_bits, GROUP_SIZE=group, FAST=True,
                 ASM=bool(plan.kwargs.get("ASM_UNPACK", False)) and not INTERPRET,
                 EVEN_K=K % bk == 0,
                 HAS_BIAS=layer.bias is not None, ACTIVATION=layer.activation)  # fmt: skip
    return [config_call(_weight_only_sliced_kernel, grid, args, named, plan)], [partial]
