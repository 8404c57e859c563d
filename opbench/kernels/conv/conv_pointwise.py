"""1x1 convolution on NCHW as a plain GEMM per image: the conv's "pointwise" plan (conv.py).

The math. A 1x1 conv with stride (SH, SW) and no padding has OH = (H - 1) // SH + 1 (OW alike);
with P = OH*OW output pixels per image and p = oh*OW + ow,

    out[n, o, p] = bias[o] + sum_{c < C} w[o, c] * x[n, c, oh*SH, ow*SW]

so for each image n, out[n] (COUT x P) = W (COUT x C) @ X[n] (C x P): in NCHW both X[n] and
out[n] are row-major matrices with the pixels contiguous. This kernel computes that GEMM with
the batch as the grid's second axis; a program owns a [BLOCK_O, BLOCK_P] tile of out[n].

Why not conv.py's implicit GEMM (rows m = (n, oh, ow), columns o)? There the contiguous
direction of x and out is the GEMM's row axis M = N*P, a run-time value: a mask `m < M` whose
alignment the compiler cannot know splits every load and store into 2-byte accesses, so the A
operand cannot stream through cp.async and the NCHW store, the residual read and the loads all
run scalar. Here the masked axis is p < P, a compile-time constant: runs of pixels stay
vectorized (16-byte accesses when P is a multiple of 8: 56x56, 28x28), the MMA's accumulator
rows are output channels and its columns pixels, so the epilogue's store and skip read walk
along memory, as a row-major GEMM's would. W (a few MB at most) stays in L2; programs next to
each other walk the output-channel tiles of one pixel tile, so that X[n] tile is read from HBM
about once.

Cost: FLOPs = 2*N*P*COUT*C; bytes = x (its strided pixels, once) + w + out (+ skip), fp16. For
ResNet-50's 1x1 layers K = C is 64..2048: the 64- and 128-deep ones (one or two K steps) are
bound by the output store, the deep ones by the MMAs.

Epilogue: bias (a folded batchnorm's shift), optionally a residual of out's shape (a residual
block's skip connection), the activation, then the store. Strided 1x1 (a downsample branch)
reads every SW-th pixel of every SH-th row: 2-byte gathers. Correct, but on an H100 it lost to
conv.py's direct and NHWC paths on all three ResNet-50 downsamples (0.11-0.13 ms against
0.037-0.058; a variant loading (even, odd) pairs as 4-byte accesses was worse still), so
conv_plans offers this kernel for stride 1 only.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.conv.conv_shapes import ConvLayer, residual_strides
from opbench.kernels.device import dot_accumulate
from opbench.kernels.epilogue import apply_activation
from opbench.kernels.host import INTERPRET, cdiv
from opbench.kernels.launch import KernelCall, config_call
from opbench.kernels.tuning import Config


@triton.jit
def _pointwise_conv_kernel(
    x_ptr,  # input, element (n, c, h, w) at n*STRIDE_XN + c*STRIDE_XC + h*STRIDE_XH + w*STRIDE_XW
    w_ptr,  # packed weights [COUT, STRIDE_WO]: row o holds w[o, :C], then zeros
    bias_ptr,  # float32 [COUT]; unused unless HAS_BIAS
    out_ptr,  # contiguous NCHW output, element (n, o, p) at n*COUT*P + o*P + p
    res_ptr,  # residual, out's shape, (n, o, p) at n*STRIDE_RN + o*STRIDE_RC + p*STRIDE_RP
    C: tl.constexpr,  # input channels: the GEMM's K
    COUT: tl.constexpr,  # output channels: the GEMM's rows
    OW: tl.constexpr,  # output width
    P: tl.constexpr,  # OH*OW output pixels per image: the GEMM's columns
    STRIDE_XN: tl.constexpr,
    STRIDE_XC: tl.constexpr,
    STRIDE_XH: tl.constexpr,  # already times the conv's stride SH
    STRIDE_XW: tl.constexpr,  # already times the conv's stride SW
    STRIDE_XP: tl.constexpr,  # > 0: output pixel p reads x at p*STRIDE_XP (one run); 0: (oh, ow)
    STRIDE_WO: tl.constexpr,
    STRIDE_RN: tl.constexpr,  # residual strides (unused unless HAS_RESIDUAL)
    STRIDE_RC: tl.constexpr,
    STRIDE_RP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # code from epilogue.activation_code
    HAS_RESIDUAL: tl.constexpr,  # add res_ptr's tile after bias/batchnorm, before the activation
    INPUT_PRECISION: tl.constexpr,  # "ieee" for true fp32 products; ignored by 16-bit dots
    UPCAST_OPERANDS: tl.constexpr,  # True only under the CPU interpreter with bfloat16
    BLOCK_O: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Output-channel tiles vary fastest: neighbouring programs share one X[n] pixel tile in L2.
    pid = tl.program_id(0)
    image = tl.program_id(1)
    num_o = (COUT + BLOCK_O - 1) // BLOCK_O
    pid_o = pid % num_o
    pid_p = pid // num_o

    offs_o = pid_o * BLOCK_O + tl.arange(0, BLOCK_O)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_k = tl.arange(0, BLOCK_K)
    o_valid = offs_o < COUT
    p_valid = offs_p < P  # P is a constant: the compiler knows the mask's runs
    if STRIDE_XP > 0:
        x_pixel = offs_p * STRIDE_XP
    else:
        x_pixel = (offs_p // OW) * STRIDE_XH + (offs_p % OW) * STRIDE_XW
    x_cols = x_ptr + image * STRIDE_XN + x_pixel
    w_rows = w_ptr + offs_o * STRIDE_WO

    acc = tl.zeros((BLOCK_O, BLOCK_P), dtype=tl.float32)
    for k0 in range(0, C, BLOCK_K):
        k = k0 + offs_k
        k_ok = k < C
        a = tl.load(w_rows[:, None] + k[None, :], mask=o_valid[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(x_cols[None, :] + (k * STRIDE_XC)[:, None],
                    mask=k_ok[:, None] & p_valid[None, :], other=0.0)  # fmt: skip
        acc = dot_accumulate(a, b, acc, False, INPUT_PRECISION, UPCAST_OPERANDS)

    result = acc
    if HAS_BIAS:
        result += tl.load(bias_ptr + offs_o, mask=o_valid, other=0.0)[:, None]
    out_mask = o_valid[:, None] & p_valid[None, :]
    if HAS_RESIDUAL:
        # A residual block's tail, relu(bn(conv(x)) + skip): the skip tile is read here, once.
        res_ptrs = res_ptr + image * STRIDE_RN + (offs_o * STRIDE_RC)[:, None] + \
            (offs_p * STRIDE_RP)[None, :]  # fmt: skip
        result += tl.load(res_ptrs, mask=out_mask, other=0.0).to(tl.float32)
    result = apply_activation(result, ACTIVATION)
    out_ptrs = out_ptr + image * (COUT * P) + (offs_o * P)[:, None] + offs_p[None, :]
    tl.store(out_ptrs, result.to(out_ptr.dtype.element_ty), mask=out_mask)


def pixel_run_stride(shape: tuple[int, ...], strides: tuple[int, ...], geometry: dict) -> int:
    """The element stride between neighbouring output pixels' inputs when all P of them form
    one run (stride 1 on dense rows, or a single row or column); 0 when the kernel must split
    p into (oh, ow)."""
    _, _, h, w = shape
    _, _, sxh, sxw = strides
    if (geometry["SH"], geometry["SW"]) != (1, 1):
        return 0
    if h == 1:
        return sxw
    if w == 1:
        return sxh
    return sxw if sxh == w * sxw else 0


def pointwise_call(
    layer: ConvLayer,
    x: torch.Tensor,
    out: torch.Tensor,
    plan: Config,
    residual: torch.Tensor | None = None,
) -> KernelCall:
    """The launch of `_pointwise_conv_kernel` for a 1x1, unpadded conv of x into out
    (contiguous NCHW); `residual` (out's shape) is added before the activation."""
    g = layer.geometry
    if (g["KH"], g["KW"], g["PH"], g["PW"]) != (1, 1, 0, 0):
        raise ValueError("the pointwise path needs a 1x1 kernel and no padding")
    n, c, _, _ = x.shape
    _, cout, oh, ow = out.shape
    if max(x.numel(), out.numel()) >= 2**31:
        raise Unsupported("tensors of 2**31 elements or more (32-bit indexing)")
    sxn, sxc, sxh, sxw = x.stride()
    rn, rc, rp = residual_strides(residual, out)
    named = dict(
        C=c, COUT=cout, OW=ow, P=oh * ow, STRIDE_XN=sxn, STRIDE_XC=sxc,
        STRIDE_XH=sxh * g["SH"], STRIDE_XW=sxw * g["SW"],
        STRIDE_XP=pixel_run_stride(tuple(x.shape), x.stride(), g),
        STRIDE_WO=layer.packed.stride(0), STRIDE_RN=rn, STRIDE_RC=rc, STRIDE_RP=rp,
        HAS_BIAS=layer.bias32 is not None, ACTIVATION=layer.activation,
        HAS_RESIDUAL=residual is not None,
        INPUT_PRECISION="ieee" if layer.packed.dtype == torch.float32 else "tf32",
        UPCAST_OPERANDS=INTERPRET and x.dtype == torch.bfloat16,
    )  # fmt: skip
    grid = (cdiv(cout, plan["BLOCK_O"]) * cdiv(oh * ow, plan["BLOCK_P"]), n)
    bias = layer.bias32 if layer.bias32 is not None else out
    skip = residual if residual is not None else out
    return config_call(_pointwise_conv_kernel, grid, (x, layer.packed, bias, out, skip), named,
                       plan)  # fmt: skip
