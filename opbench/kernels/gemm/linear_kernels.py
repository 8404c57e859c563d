"""Linear layers as Triton GEMMs: y = act(x @ W^T + b), with bias and activation fused.

Math. x is [M, K] (all leading dimensions of the input folded into M), W is [N, K] (torch's
layout), b is [N]:

    y[m, n] = act( sum_k x[m, k] * W[n, k] + b[n] )

For W8A8 (`linear_int8.py`) x and W arrive as int8 with a scale per row of x (per token) and
per row of W (per output channel), and the epilogue first dequantizes (SCALED):

    y[m, n] = act( sx[m] * sw[n] * sum_k xq[m, k] * Wq[n, k] + b[n] )

fp8 (`linear_fp8.py`) is the same with e4m3 operands (Triton's float8e4nv) summed in fp32 on
the fp8 tensor cores: IS_INT8 picks the int32 accumulator, SCALED the dequantizing epilogue.

Cost. 2*M*N*K FLOPs (int8: OPs). Bytes at least e*(M*K + N*K + M*N) with e = 2 for fp16/bf16
(W alone is e*N*K). With M <= 64 (decode) W dominates: the kernel is a stream over W, and
the int8 path halves that stream. With M >= 512 the tensor cores bound it.

Three kernels, one epilogue:
  * `_linear_tiled_kernel`: one [BLOCK_M, BLOCK_N] output tile per program, pointer loads
    pipelined by `num_stages`, tiles visited in L2-friendly groups of GROUP_M rows.
  * `_linear_tma_kernel`: the same tile loop fed by TMA tensor descriptors (Hopper+), run as a
    persistent grid (one program per SM walking tiles) or one program per tile.
  * `_linear_split_k_kernel`: for few rows (M <= 64). Splits K over SPLIT_K programs so that
    enough programs stream W; partial sums go to a workspace and the last program of each tile
    to arrive (an atomic counter) reduces them in a fixed order and runs the epilogue. For
    int8 it can also quantize x itself (QUANTIZE_A), saving the separate quantize launch.
All three accumulate in fp32 (int32 for int8), then `linear_epilogue.epilogue_store` applies
the dequant scales, bias and activation (or RoPE: ROPE, linear_rope.py) in fp32 and stores in
the output's dtype; `linear_epilogue.finish_tile` is the split-K end (also used by the
weight-streaming kernels). Which kernel and tiles: `linear_plans.py`; binding and launching:
`linear.py`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from opbench.kernels.device import dot_accumulate, inverse_scale, round_to_int8
from opbench.kernels.gemm.linear_epilogue import (
    EpilogueInputs,
    Output,
    RopeArgs,
    SplitK,
    epilogue_store,
    finish_tile,
    load_row_scale,
)


@triton.jit
def _tile_coords(tile_id, num_tiles_m, num_tiles_n, GROUP_M: tl.constexpr):
    """Map a linear tile id to (tile_m, tile_n), walking GROUP_M tile-rows per column sweep so
    the A rows and W columns in use stay resident in L2."""
    tiles_per_group = GROUP_M * num_tiles_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_tiles_m - first_m, GROUP_M)
    tile_m = first_m + (tile_id % tiles_per_group) % group_rows
    tile_n = (tile_id % tiles_per_group) // group_rows
    return tile_m, tile_n


@triton.jit
def _zero_accumulator(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_INT8: tl.constexpr):
    if IS_INT8:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    return acc


# M changes with the batch: not specializing on it (M == 1, M % 16) avoids a compile per M.
@triton.jit(do_not_specialize=["M"])
def _linear_tiled_kernel(
    # pointers
    a_ptr,  # x [M, K] (int8 when IS_INT8)
    w_ptr,  # W [N, K], same dtype as x
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N]
    row_scale_ptr,  # fp32 [M]
    col_scale_ptr,  # fp32 [N]
    res_ptr,  # residual [M, N] with out's strides (read only if HAS_RESIDUAL)
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_am,
    stride_ak,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    # meta-parameters
    BLOCK_M: tl.constexpr,  # output rows per program
    BLOCK_N: tl.constexpr,  # output columns per program
    BLOCK_K: tl.constexpr,  # reduction step
    GROUP_M: tl.constexpr,  # tile-rows per L2 group
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask in the K loop
    IS_INT8: tl.constexpr,  # int8 operands, int32 accumulator
    SCALED: tl.constexpr,  # int8 or fp8 operands: dequantize (sx[m] * sw[n]) in the epilogue
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # code from epilogue.activation_code
    HAS_RESIDUAL: tl.constexpr,  # add the residual tile after the activation
    DOT_PRECISION: tl.constexpr,  # "ieee" (true fp32) or "tf32"; fp16/bf16 ignore it
    UPCAST: tl.constexpr,  # interpreter + bf16 only (see device.dot_operand)
    # RoPE in the epilogue (linear_epilogue.rope_store; ROPE 0: none)
    rope_seq,
    rope_offset,
    rope_rotated,
    rope_freq,
    ROPE: tl.constexpr,
    ROPE_D: tl.constexpr,
):
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    tile_m, tile_n = _tile_coords(tl.program_id(0), num_tiles_m, num_tiles_n, GROUP_M)
    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past M (columns past N) re-read row 0: the loads need no M/N mask and the store
    # mask drops those results.
    rows_a = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_k[None, :] * stride_wk

    acc = _zero_accumulator(BLOCK_M, BLOCK_N, IS_INT8)
    for k_step in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_mask = offs_k[None, :] < K - k_step * BLOCK_K
            a = tl.load(a_ptrs, mask=k_mask, other=0.0)
            w = tl.load(w_ptrs, mask=k_mask, other=0.0)
        acc = dot_accumulate(a, tl.trans(w), acc, IS_INT8, DOT_PRECISION, UPCAST)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    row_scale = load_row_scale(row_scale_ptr, offs_m, M, SCALED)
    epilogue_store(
        acc, offs_m, offs_n, Output(out_ptr, M, N, stride_om, stride_on),
        EpilogueInputs(bias_ptr, row_scale, col_scale_ptr, res_ptr),
        RopeArgs(rope_seq, rope_offset, rope_rotated, rope_freq),
        SCALED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, ROPE, ROPE_D,
    )  # fmt: skip


# M changes with the batch: not specializing on it (M == 1, M % 16) avoids a compile per M.
@triton.jit(do_not_specialize=["M", "NUM_PROGRAMS"])
def _linear_tma_kernel(
    # tensor descriptors (block shapes [BLOCK_M, BLOCK_K] and [BLOCK_N, BLOCK_K]; out-of-bounds
    # reads return zeros, so no masks anywhere in the K loop)
    a_desc,  # x [M, K]
    w_desc,  # W [N, K]
    # pointers
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N]
    row_scale_ptr,  # fp32 [M]
    col_scale_ptr,  # fp32 [N]
    res_ptr,  # residual [M, N] with out's strides (read only if HAS_RESIDUAL)
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_om,
    stride_on,
    # launch
    NUM_PROGRAMS,  # grid size: tiles are dealt round-robin to the programs
    # meta-parameters
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    IS_INT8: tl.constexpr,
    SCALED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,  # Hopper/Blackwell: TMA-load warps apart from the MMA warps
    FLATTEN: tl.constexpr,  # not WARP_SPECIALIZE (set by the host)
    # RoPE in the epilogue (linear_epilogue.rope_store; ROPE 0: none)
    rope_seq,
    rope_offset,
    rope_rotated,
    rope_freq,
    ROPE: tl.constexpr,
    ROPE_D: tl.constexpr,
):
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # flatten=True lets the pipeliner prefetch the next tile's operands during this epilogue;
    # with WARP_SPECIALIZE the compiler's producer/consumer partition does that instead.
    for tile_id in tl.range(
        tl.program_id(0), num_tiles_m * num_tiles_n, NUM_PROGRAMS,
        flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE,
    ):  # fmt: skip
        tile_m, tile_n = _tile_coords(tile_id, num_tiles_m, num_tiles_n, GROUP_M)
        acc = _zero_accumulator(BLOCK_M, BLOCK_N, IS_INT8)
        for k_step in range(k_steps):
            a = a_desc.load([tile_m * BLOCK_M, k_step * BLOCK_K])
            w = w_desc.load([tile_n * BLOCK_N, k_step * BLOCK_K])
            acc = dot_accumulate(a, w.T, acc, IS_INT8, DOT_PRECISION, UPCAST)
        offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_scale = load_row_scale(row_scale_ptr, offs_m, M, SCALED)
        epilogue_store(
            acc, offs_m, offs_n, Output(out_ptr, M, N, stride_om, stride_on),
            EpilogueInputs(bias_ptr, row_scale, col_scale_ptr, res_ptr),
            RopeArgs(rope_seq, rope_offset, rope_rotated, rope_freq),
            SCALED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, ROPE, ROPE_D,
        )  # fmt: skip


# M changes with the batch: not specializing on it (M == 1, M % 16) avoids a compile per M.
@triton.jit(do_not_specialize=["M"])
def _linear_split_k_kernel(
    # pointers
    a_ptr,  # x [M, K]: int8, or fp16/bf16 when QUANTIZE_A
    w_ptr,  # W [N, K]
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N]
    row_scale_ptr,  # fp32 [M] (unused when QUANTIZE_A: the kernel computes sx itself)
    col_scale_ptr,  # fp32 [N]
    res_ptr,  # residual [M, N] with out's strides (read only if HAS_RESIDUAL)
    partial_ptr,  # [SPLIT_K, M, N] fp32/int32 workspace (unused when SPLIT_K == 1)
    arrivals_ptr,  # int32 [tiles]: zero between launches; the last arrival resets its slot
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_am,
    stride_ak,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    # meta-parameters
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,  # programs sharing one output tile, each a contiguous K range
    EVEN_K: tl.constexpr,
    QUANTIZE_A: tl.constexpr,  # int8 path, x still fp16/bf16: quantize it per token in here
    QUANT_BLOCK_K: tl.constexpr,  # row chunk of the absmax prologue (QUANTIZE_A)
    IS_INT8: tl.constexpr,
    SCALED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    # RoPE in the epilogue (linear_epilogue.rope_store; ROPE 0: none)
    rope_seq,
    rope_offset,
    rope_rotated,
    rope_freq,
    ROPE: tl.constexpr,
    ROPE_D: tl.constexpr,
):
    tile_n = tl.program_id(0)
    split = tl.program_id(1)
    tile_m = tl.program_id(2)
    k_blocks = tl.cdiv(K, BLOCK_K)
    blocks_per_split = tl.cdiv(k_blocks, SPLIT_K)
    first_block = split * blocks_per_split
    last_block = tl.minimum(first_block + blocks_per_split, k_blocks)

    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = first_block * BLOCK_K + tl.arange(0, BLOCK_K)
    rows_a = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_k[None, :] * stride_wk

    if QUANTIZE_A:
        # Saves the separate quantize launch when M is tiny. Each program needs the absmax of
        # whole rows, so it reads all M*K of x (from L2: a few KB per row).
        row_max = tl.zeros((BLOCK_M,), dtype=tl.float32)
        offs_q = tl.arange(0, QUANT_BLOCK_K)
        for start in range(0, K, QUANT_BLOCK_K):
            x = tl.load(a_ptr + rows_a[:, None] * stride_am + (start + offs_q)[None, :] * stride_ak,
                        mask=(start + offs_q)[None, :] < K, other=0.0)  # fmt: skip
            row_max = tl.maximum(row_max, tl.max(tl.abs(x.to(tl.float32)), axis=1))
        inv_scale = inverse_scale(row_max)
        row_scale = row_max / 127.0
    else:
        row_scale = load_row_scale(row_scale_ptr, offs_m, M, SCALED)

    acc = _zero_accumulator(BLOCK_M, BLOCK_N, IS_INT8)
    for k_block in range(first_block, last_block):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_mask = offs_k[None, :] < K - (k_block - first_block) * BLOCK_K
            a = tl.load(a_ptrs, mask=k_mask, other=0.0)
            w = tl.load(w_ptrs, mask=k_mask, other=0.0)
        if QUANTIZE_A:
            a = round_to_int8(a.to(tl.float32) * inv_scale[:, None])
        acc = dot_accumulate(a, tl.trans(w), acc, IS_INT8, DOT_PRECISION, UPCAST)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    tile_id = tile_m * tl.num_programs(0) + tile_n
    finish_tile(
        acc, offs_m, offs_n, Output(out_ptr, M, N, stride_om, stride_on),
        EpilogueInputs(bias_ptr, row_scale, col_scale_ptr, res_ptr),
        RopeArgs(rope_seq, rope_offset, rope_rotated, rope_freq),
        SplitK(partial_ptr, arrivals_ptr, split, tile_id),
        SPLIT_K, SCALED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL, ROPE, ROPE_D,
    )  # fmt: skip
