"""int8 convolution: per-channel weight scales (build time), per-image activation scales (run time).

Quantization, by the int8 rule of `device.py`. Weights: sw[o] = max|w[o]| / 127, at build
time. Activations: one scale per image, sx[n] = max over (c, h, w) of |x[n]| / 127, computed on
every call:

    out[n, o, p] = sx[n] * sw[o] * sum_k xq[n, k(p)] * w_q[o, k]  (+ bias, activation)

Why per image. Every row m = (n, oh, ow) of the implicit GEMM reads KH*KW input pixels, all of
image n. A per-pixel scale would differ between the taps of one row and could not be taken out of
the int32 sum; a per-image scale can, so the whole K loop stays one int32 dot and the dequant is a
single multiply in the epilogue. Per image rather than per tensor keeps each sample's result
independent of what else is in the batch (and closer to the sample's own range).

Run-time work (all Triton), bytes for an fp16 x of E = N*C*H*W elements:
  1. `_absmax_partials_kernel`: reads x (2E bytes), writes N*chunks partial maxima.
  2. `_quantize_nhwc_kernel`: reduces image n's partials, reads x again (2E), writes xq as NHWC
     int8 (E bytes) and sx[n]. NHWC makes each A-tile row a contiguous run of channels, the
     K-major layout int8 wgmma needs.
  3. `conv._conv2d_kernel` with IS_INT8: int8 x int8 -> int32 on tensor cores (twice the fp16
     rate), epilogue acc * sx[n] * sw[o] + bias, activation, store in x's dtype.
So the quantization costs ~5E bytes of traffic before the conv reads E: int8 pays off on
MMA-bound layers (3x3, C and Cout >= 128), not on memory-bound 1x1 ones.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.conv.conv import BoundPlan, conv_call, prepare_conv
from opbench.kernels.conv.conv_plans import int8_candidates
from opbench.kernels.conv.conv_shapes import ConvLayer, nhwc_strides, output_for, pack_weight
from opbench.kernels.device import inverse_scale, round_to_int8
from opbench.kernels.host import INTERPRET, cdiv, next_power_of_2
from opbench.kernels.launch import BoundKernels, KernelCall, sequence
from opbench.kernels.memory.quantize import quantize_per_row
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Choice, Config, choose, device_tag

# Elements each absmax program reduces (at most MAX_CHUNKS programs per image).
CHUNK_TARGET = 8192 if not INTERPRET else 256
MAX_CHUNKS = 128


@triton.jit
def _absmax_partials_kernel(
    # pointers
    x_ptr,  # input; image n is the dense block [n*STRIDE_XN, n*STRIDE_XN + CHW)
    partial_ptr,  # float32 [N, NUM_CHUNKS]: max |x| over each chunk of each image
    # shapes
    CHW: tl.constexpr,  # elements per image
    CHUNK: tl.constexpr,  # elements per program (a multiple of BLOCK)
    NUM_CHUNKS: tl.constexpr,  # programs per image
    # strides, in elements
    STRIDE_XN: tl.constexpr,
    # meta-parameters
    BLOCK: tl.constexpr,
):
    chunk = tl.program_id(0)
    image = tl.program_id(1)
    running = tl.zeros((BLOCK,), dtype=tl.float32)
    for offset in range(0, CHUNK, BLOCK):
        offs = chunk * CHUNK + offset + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + image * STRIDE_XN + offs, mask=offs < CHW, other=0.0)
        running = tl.maximum(running, tl.abs(values.to(tl.float32)))
    tl.store(partial_ptr + image * NUM_CHUNKS + chunk, tl.max(running, axis=0))


@triton.jit
def _quantize_nhwc_kernel(
    # pointers
    x_ptr,  # input [N, C, H, W], element (n, c, p) at n*STRIDE_XN + c*STRIDE_XC + p*STRIDE_XP
    partial_ptr,  # float32 [N, NUM_CHUNKS] from _absmax_partials_kernel
    q_ptr,  # int8 output [N, H*W, C] (NHWC)
    x_scale_ptr,  # float32 [N] output: sx[n] = max|x[n]| / 127
    # shapes
    C: tl.constexpr,
    HW: tl.constexpr,  # H*W
    NUM_CHUNKS: tl.constexpr,
    # strides, in elements
    STRIDE_XN: tl.constexpr,
    STRIDE_XC: tl.constexpr,
    STRIDE_XP: tl.constexpr,
    # meta-parameters
    BLOCK_CHUNKS: tl.constexpr,  # next power of two >= NUM_CHUNKS
    BLOCK_C: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    pid_p = tl.program_id(0)
    pid_c = tl.program_id(1)
    image = tl.program_id(2)
    chunk = tl.arange(0, BLOCK_CHUNKS)
    partials = tl.load(partial_ptr + image * NUM_CHUNKS + chunk, mask=chunk < NUM_CHUNKS, other=0.0)
    amax = tl.max(partials, axis=0)
    inv_scale = inverse_scale(amax)

    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    mask = (offs_c < C)[:, None] & (offs_p < HW)[None, :]
    x_ptrs = x_ptr + image * STRIDE_XN + offs_c[:, None] * STRIDE_XC + offs_p[None, :] * STRIDE_XP
    values = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    q = round_to_int8(values * inv_scale)
    tl.store(q_ptr + image * (HW * C) + offs_p[None, :] * C + offs_c[:, None], q, mask=mask)
    if (pid_p == 0) & (pid_c == 0):
        tl.store(x_scale_ptr + image, amax / 127.0)


def quantize_calls(
    x: torch.Tensor, xq: torch.Tensor, x_scale: torch.Tensor
) -> tuple[list[KernelCall], list[torch.Tensor]]:
    """The two fixed launches that quantize x per image into xq [N, H, W, C] and x_scale [N]."""
    n, c, h, w = x.shape
    chw, hw = c * h * w, h * w
    block = 256 if INTERPRET else 1024
    num_chunks = max(1, min(MAX_CHUNKS, cdiv(chw, CHUNK_TARGET)))
    chunk = cdiv(cdiv(chw, num_chunks), block) * block
    num_chunks = cdiv(chw, chunk)
    partials = scratch((n, num_chunks), torch.float32, x.device)
    absmax = KernelCall(
        _absmax_partials_kernel, (num_chunks, n), (x, partials),
        dict(CHW=chw, CHUNK=chunk, NUM_CHUNKS=num_chunks, STRIDE_XN=x.stride(0), BLOCK=block),
        {"num_warps": 4, "num_stages": 1},
    )  # fmt: skip
    block_c, block_p = (16, 32) if INTERPRET else (64, 64)
    quantize = KernelCall(
        _quantize_nhwc_kernel, (cdiv(hw, block_p), cdiv(c, block_c), n),
        (x, partials, xq, x_scale),
        dict(C=c, HW=hw, NUM_CHUNKS=num_chunks, STRIDE_XN=x.stride(0), STRIDE_XC=x.stride(1),
             STRIDE_XP=x.stride(3), BLOCK_CHUNKS=next_power_of_2(num_chunks), BLOCK_C=block_c,
             BLOCK_P=block_p),
        {"num_warps": 4, "num_stages": 1},
    )  # fmt: skip
    return [absmax, quantize], [partials]


class Int8Conv:
    """An int8 conv built once (batchnorm already folded): `bind(x)` or `conv(x, out=None)`."""

    def __init__(self, layer: ConvLayer):
        self.layer = layer
        self.packed, self.w_scale = layer.packed, layer.w_scale

    def __call__(
        self, x: torch.Tensor, out: torch.Tensor | None = None, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.bind(x, out, residual=residual).launch()

    def bind(
        self,
        x: torch.Tensor,
        out: torch.Tensor | None = None,
        config: Config | None = None,
        residual: torch.Tensor | None = None,
    ) -> BoundKernels:
        """Bound to x (and `residual`, added before the activation: a residual block's tail)."""
        if x.dtype == torch.float32:
            raise Unsupported("int8 convolution of float32 input: only float16/bfloat16")
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
        if x.dim() == 4 and not (
            x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last)
        ):
            raise ValueError("x must be contiguous NCHW or channels_last")
        out = output_for(self.layer, x, out)
        n, c, h, w = x.shape
        # Scratch: the quantize launches rewrite xq and x_scale before every conv launch.
        xq = scratch((n, h, w, c), torch.int8, x.device)
        x_scale = scratch((n,), torch.float32, x.device)
        quantize, keep = quantize_calls(x, xq, x_scale)
        key = f"{x.dtype}|{tuple(x.shape)}|Cout{self.layer.cout}|" + ",".join(
            f"{k}{v}" for k, v in self.layer.geometry.items()) + \
            ("|residual" if residual is not None else "")  # fmt: skip

        def plan_calls(plan: Config) -> BoundPlan:
            conv = conv_call(self.layer, xq, x.shape, nhwc_strides(x.shape), out, plan,
                             x_scale=x_scale, residual=residual)  # fmt: skip
            return BoundPlan([*quantize, conv], [xq, x_scale, *keep], [])

        if config is not None:
            choice = Choice("conv2d_int8", key, device_tag(x.device), config, "forced")
        else:
            choice = choose("conv2d_int8", key, int8_candidates(c, self.layer.cout), x.device,
                            lambda cfg: sequence(plan_calls(cfg).calls, out))  # fmt: skip
        bound = plan_calls(choice.config)
        return BoundKernels.of(bound.calls, out, [choice], keep=bound.keep)


def build_conv2d_int8(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    activation: str = "none",
    batchnorm: dict | None = None,
    **geometry: Any,
) -> Int8Conv:
    """Build-time work for an int8 conv: fold batchnorm, quantize and pack the weights;
    geometry: stride, padding, dilation, groups as in F.conv2d."""
    if weight.dtype == torch.float32:
        raise Unsupported("int8 quantization of a float32 layer: only float16/bfloat16 inputs")

    def pack(master: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        codes, w_scale = quantize_per_row(master.reshape(master.shape[0], -1))
        return pack_weight(codes.view(master.shape), torch.int8), w_scale

    return Int8Conv(prepare_conv(weight, bias, activation, batchnorm, pack, **geometry))
