"""Weight-streaming linears for decode: fp16/bf16 GEMV and weight-only int8 / int4.

Math. x is [M, K] in fp16/bf16 (M small: decode tokens), W is stored in one of three formats
(W_BITS), b is [N]:

    16: W [N, K] in x's dtype            y = act( x @ W^T + b )
     8: Wq int8 [N, K], sw fp32 [N]      y = act( sw[n] * (x @ Wq^T)[m, n] + b[n] )
     4: Wq int4 [N, K] packed two per byte (k = 2j in the low nibble of byte j, 2j + 1 in the
        high one, each stored as q + 8), group scales s [K / G, N] in x's dtype:
                                         y = act( sum_g s[g, n] * (x_g @ Wq_g^T)[m, n] + b[n] )
The codes follow the symmetric rules of `kernels/quant.py` (int8: max|row| / 127 per output
channel; int4: max|group| / 7 per G consecutive k of a row). Codes are small integers, exact in
fp16/bf16, so each step multiplies x by the codes on the tensor cores (fp32 sums) and applies
the int4 group's scale to that step's partial sum ([BLOCK_M, BLOCK_N] products, not
[BLOCK_N, BLOCK_K]); BLOCK_K divides G, so a step never straddles two groups.

Cost. At decode sizes the kernel is a stream over W: 2NK (16), NK + 4N (8) or NK/2 + 2NK/G
(4) bytes, each read once; x (2MK) and y (2MN) are small. The floor is those bytes over the
measured copy bandwidth.

`_linear_stream_kernel`: a grid of (N tiles, SPLIT_K, M tiles); each program streams a
[BLOCK_N, K / SPLIT_K] slab of W and ends through `linear_epilogue.finish_tile` (the split-K
reduction and the fused epilogue: the int8 channel scale, bias, activation). USE_DOT picks the
tensor-core step (x tile [BLOCK_M >= 16, BLOCK_K]); without it (M = 1, BLOCK_M = 1) each step
is a CUDA-core multiply-add into a [BLOCK_N, BLOCK_K] fp32 accumulator summed once at the end.
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
def _unpack_codes(w, W_BITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A loaded W tile as integer codes (int4: [BLOCK_N, BLOCK_K // 2] bytes -> [BLOCK_N,
    BLOCK_K] codes q in -7..7, low nibble first); other formats pass through."""
    if W_BITS == 4:
        low = (w & 0xF).to(tl.int8) - 8
        high = (w >> 4).to(tl.int8) - 8
        w = tl.join(low, high).reshape(BLOCK_N, BLOCK_K)
    return w


@triton.jit
def _codes_as_float(w, W_BITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    DTYPE: tl.constexpr):  # fmt: skip
    """A loaded int4 (packed) or int8 W tile as DTYPE (fp16 or bf16) codes without an
    integer -> float conversion instruction (Hopper runs those at a quarter of the integer
    rate): the code, offset to be non-negative, is OR-ed into the mantissa of a power of two
    whose ulp is 1 (fp16 1024 = 0x6400, bf16 128 = 0x4300), and that power plus the offset is
    subtracted: (1024 + (q + 8)) - 1032 = q exactly. int8 needs 8 mantissa bits: fp16 only.
    The launcher uses it for fp16 only (see stream_calls)."""
    if DTYPE == tl.float16:
        magic: tl.constexpr = 0x6400
        base: tl.constexpr = 1024.0
    else:
        magic: tl.constexpr = 0x4300
        base: tl.constexpr = 128.0
    if W_BITS == 4:
        low = ((w & 0xF).to(tl.int16) | magic).to(DTYPE, bitcast=True) - (base + 8.0)
        high = ((w >> 4).to(tl.int16) | magic).to(DTYPE, bitcast=True) - (base + 8.0)
        codes = tl.join(low, high).reshape(BLOCK_N, BLOCK_K)
    else:  # int8 stored two's complement: flipping the sign bit gives q + 128 in 0..255
        shifted = (w.to(tl.uint8, bitcast=True) ^ 0x80).to(tl.int16)
        codes = (shifted | magic).to(DTYPE, bitcast=True) - (base + 128.0)
    return codes


# M changes with the batch: not specializing on it avoids a compile per M.
@triton.jit(do_not_specialize=["M"])
def _linear_stream_kernel(
    # pointers
    x_ptr,  # x [M, K] fp16/bf16, unit stride along K
    w_ptr,  # W: [N, K] in x's dtype (16), int8 [N, K] (8), uint8 [N, K // 2] (4)
    w_scale_ptr,  # 8: fp32 [N] channel scales; 4: [K // GROUP_SIZE, N] group scales; 16: unused
    out_ptr,  # y [M, N]
    bias_ptr,  # fp32 [N] (read only if HAS_BIAS)
    partial_ptr,  # fp32 [SPLIT_K, M, N] workspace (unused when SPLIT_K == 1)
    arrivals_ptr,  # int32 [tiles]: zero between launches; the last arrival resets its slot
    # shapes
    M,
    N,
    K,
    # strides, in elements
    stride_xm,
    stride_wn,  # W row stride (bytes of a packed row for int4)
    stride_sg,  # int4: group-scale row stride (N)
    stride_om,
    stride_on,
    # meta-parameters
    BLOCK_M: tl.constexpr,  # >= 16 with USE_DOT; 1 without
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # codes per step; divides GROUP_SIZE for int4
    SPLIT_K: tl.constexpr,
    W_BITS: tl.constexpr,  # 16, 8 or 4
    GROUP_SIZE: tl.constexpr,  # int4 group length along K (unused otherwise)
    USE_DOT: tl.constexpr,  # tensor-core steps; False: CUDA-core GEMV (BLOCK_M == 1)
    FAST_UNPACK: tl.constexpr,  # codes -> floats by _codes_as_float (int4; int8 with fp16)
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask in the K loop
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    UPCAST: tl.constexpr,  # interpreter + bf16 only (see device.dot_operand)
    # RoPE in the epilogue (linear_epilogue.rope_store; ROPE 0: none; 16-bit W only)
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
    # Balanced splits: lengths differ by at most one step (any SPLIT_K, e.g. wave-sized
    # grids), where ceil-sized ones would leave the last split short or empty.
    first_block = split * k_blocks // SPLIT_K
    last_block = (split + 1) * k_blocks // SPLIT_K

    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = first_block * BLOCK_K + tl.arange(0, BLOCK_K)
    # Rows past M (columns past N) re-read row 0; the store mask drops their results.
    rows_x = tl.where(offs_m < M, offs_m, 0).to(tl.int64)
    rows_w = tl.where(offs_n < N, offs_n, 0).to(tl.int64)
    x_ptrs = x_ptr + rows_x[:, None] * stride_xm + offs_k[None, :]
    W_STEP: tl.constexpr = BLOCK_K // 2 if W_BITS == 4 else BLOCK_K  # W elements per step
    offs_wk = first_block * W_STEP + tl.arange(0, W_STEP)
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_wk[None, :]

    if USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k_block in range(first_block, last_block):
        if EVEN_K:
            x = tl.load(x_ptrs)
            w = tl.load(w_ptrs)
        else:  # int4 never comes here: K is a multiple of GROUP_SIZE, a multiple of BLOCK_K
            k_mask = offs_k[None, :] < K - (k_block - first_block) * BLOCK_K
            x = tl.load(x_ptrs, mask=k_mask, other=0.0)
            w = tl.load(w_ptrs, mask=k_mask, other=0.0)
        if FAST_UNPACK and W_BITS != 16:
            w = _codes_as_float(w, W_BITS, BLOCK_N, BLOCK_K, x.dtype)
            w = w.to(tl.float32) if UPCAST else w
        else:
            w = _unpack_codes(w, W_BITS, BLOCK_N, BLOCK_K)
            # Codes go to the tensor cores in x's dtype (exact: |q| <= 127); the interpreter's
            # integer -> bf16 cast is broken, so there (UPCAST) they go to fp32 directly.
            w = w.to(tl.float32) if UPCAST else w.to(x.dtype)
        if W_BITS == 4:
            group = k_block * BLOCK_K // GROUP_SIZE
            scale = tl.load(w_scale_ptr + group * stride_sg + rows_w).to(tl.float32)
        if USE_DOT:
            if W_BITS == 4:
                part = tl.dot(dot_operand(x, UPCAST), tl.trans(dot_operand(w, UPCAST)))
                acc += part * scale[None, :]
            else:
                acc = tl.dot(dot_operand(x, UPCAST), tl.trans(dot_operand(w, UPCAST)), acc)
        else:
            product = w.to(tl.float32) * x.to(tl.float32)  # [BLOCK_N, BLOCK_K] * [1, BLOCK_K]
            if W_BITS == 4:
                product = product * scale[:, None]
            acc += product
        x_ptrs += BLOCK_K
        w_ptrs += W_STEP

    if USE_DOT:
        total = acc
    else:
        total = tl.sum(acc, axis=1)[None, :]  # [1, BLOCK_N]
    ones = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)  # no per-row scale: x is not quantized
    tile_id = tile_m * tl.num_programs(0) + tile_n
    finish_tile(
        total, offs_m, offs_n, Output(out_ptr, M, N, stride_om, stride_on),
        EpilogueInputs(bias_ptr, ones, w_scale_ptr, out_ptr),  # no residual
        RopeArgs(rope_seq, rope_offset, rope_rotated, rope_freq),
        SplitK(partial_ptr, arrivals_ptr, split, tile_id),
        SPLIT_K, W_BITS == 8, HAS_BIAS, ACTIVATION, False, ROPE, ROPE_D,
    )  # fmt: skip


def stream_calls(
    plan: Config, x2: torch.Tensor, layer: Any, out2: torch.Tensor
) -> tuple[list[KernelCall], list]:
    """The launcher: the one KernelCall of `_linear_stream_kernel` for x2 [M, K] -> out2
    [M, N] with a "stream" plan, and the workspace it uses (the split-K partials). `layer` is
    a `linear.Linear` (its weight, scales, bias, activation, w_bits, group_size, counters)."""
    if x2.stride(1) != 1:
        raise ValueError("the streaming kernel reads x with unit stride along K")
    M, K = x2.shape
    N = layer.out_features
    w_bits = layer.w_bits
    bm, bn, bk, split = plan["BLOCK_M"], plan["BLOCK_N"], plan["BLOCK_K"], plan["SPLIT_K"]
    group = layer.group_size
    if w_bits == 4 and (group % bk or K % group):
        raise ValueError(f"int4 plan: BLOCK_K {bk} must divide group_size {group}, which divides K")
    grid = (cdiv(N, bn), split, cdiv(M, bm))
    if grid[0] * grid[2] > layer.arrivals.numel():
        # Many M tiles (a weight-only layer at prefill sizes): one zeroed counter per tile.
        layer.arrivals = torch.zeros(grid[0] * grid[2], dtype=torch.int32, device=x2.device)
    unused = out2  # any pointer, for arguments the constexpr flags switch off
    partial = unused
    if split > 1:
        partial = scratch((split * M * N,), torch.float32, x2.device)  # per launch
    scales = layer.col_scale if w_bits == 8 else layer.group_scale if w_bits == 4 else unused
    bias = layer.bias if layer.bias is not None else unused
    args = (x2, layer.weight, scales, out2, bias, partial, layer.arrivals, M, N, K,
            x2.stride(0), layer.weight.stride(0), N, *out2.stride())  # fmt: skip
    # The mantissa trick for fp16 activations only: its bf16 form (0x4300) runs nowhere this
    # project can check it (Triton's interpreter has no bf16 constants), so bf16 converts.
    fast = plan.kwargs.get("FAST_UNPACK", False) and x2.dtype == torch.float16
    named = dict(W_BITS=w_bits, GROUP_SIZE=group, EVEN_K=K % bk == 0,
                 HAS_BIAS=layer.bias is not None, ACTIVATION=layer.activation,
                 UPCAST=INTERPRET and x2.dtype == torch.bfloat16, **layer.rope_named())  # fmt: skip
    # After the plan's meta (config_call lets meta win): FAST_UNPACK only where it applies.
    plan = plan.with_meta(FAST_UNPACK=fast)
    return [config_call(_linear_stream_kernel, grid, args, named, plan)], [partial]
