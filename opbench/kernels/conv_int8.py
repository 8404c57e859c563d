"""int8 convolution: per-channel weight scales (build time), per-image activation scales (run time).

Quantization. Weights: w_q[o] = round(w[o] / sw[o]), sw[o] = max|w[o]| / 127, at build time.
Activations: one scale per image, sx[n] = max over (c, h, w) of |x[n]| / 127, computed on every call:

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

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.conv import (
    INTERPRET,
    K_CHANNEL_BLOCKS,
    K_GATHER,
    MIN_CHANNELS_FOR_BLOCKS,
    check_output,
    launch_conv,
    output_size,
    pack_weight,
)

# Elements each absmax program reduces (at most MAX_CHUNKS programs per image).
CHUNK_TARGET = 8192 if not INTERPRET else 256
MAX_CHUNKS = 128


@triton.jit
def _absmax_partials_kernel(
    # pointers
    x_ptr,  # input; image n is the dense block [n*stride_xn, n*stride_xn + CHW)
    partial_ptr,  # float32 [N, NUM_CHUNKS]: max |x| over each chunk of each image
    # shapes
    CHW,  # elements per image
    CHUNK,  # elements per program (a multiple of BLOCK)
    NUM_CHUNKS,  # programs per image
    # strides, in elements
    stride_xn,
    # meta-parameters
    BLOCK: tl.constexpr,
):
    chunk = tl.program_id(0)
    image = tl.program_id(1)
    start = chunk * CHUNK
    end = tl.minimum(start + CHUNK, CHW)
    running = tl.zeros((BLOCK,), dtype=tl.float32)
    for offset in range(start, end, BLOCK):
        offs = offset + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + image * stride_xn + offs, mask=offs < end, other=0.0)
        running = tl.maximum(running, tl.abs(values.to(tl.float32)))
    tl.store(partial_ptr + image * NUM_CHUNKS + chunk, tl.max(running, axis=0))


@triton.jit
def _quantize_nhwc_kernel(
    # pointers
    x_ptr,  # input [N, C, H, W], element (n, c, p) at n*stride_xn + c*stride_xc + p*stride_xp
    partial_ptr,  # float32 [N, NUM_CHUNKS] from _absmax_partials_kernel
    q_ptr,  # int8 output [N, H*W, C] (NHWC)
    x_scale_ptr,  # float32 [N] output: sx[n] = max|x[n]| / 127
    # shapes
    C,
    HW,  # H*W
    NUM_CHUNKS,
    # strides, in elements
    stride_xn,
    stride_xc,
    stride_xp,
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
    amax = tl.where(amax > 0.0, amax, 1.0)  # an all-zero image quantizes to zeros with any scale
    inv_scale = 127.0 / amax

    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    mask = (offs_c < C)[:, None] & (offs_p < HW)[None, :]
    x_ptrs = x_ptr + image * stride_xn + offs_c[:, None] * stride_xc + offs_p[None, :] * stride_xp
    values = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    q = tl.floor(values * inv_scale + 0.5)  # |x| <= amax keeps q in [-127, 127]
    q = tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int8)
    tl.store(q_ptr + image * HW * C + offs_p[None, :] * C + offs_c[:, None], q, mask=mask)
    if (pid_p == 0) & (pid_c == 0):
        tl.store(x_scale_ptr + image, amax / 127.0)


def quantize_weight_per_channel(master_w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Build time: packed int8 weights [Cout, K_pad] and float32 scales [Cout]."""
    amax = master_w.abs().amax(dim=(1, 2, 3))
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(master_w / scale[:, None, None, None]).clamp_(-127, 127)
    return pack_weight(q, torch.int8), scale.float().contiguous()


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run time, two Triton kernels: x (NCHW or channels_last) -> (xq NHWC int8, sx float32 [N])."""
    n, c, h, w = x.shape
    chw, hw = c * h * w, h * w
    num_chunks = max(1, min(MAX_CHUNKS, triton.cdiv(chw, CHUNK_TARGET)))
    block = 1024 if not INTERPRET else 256
    chunk = triton.cdiv(triton.cdiv(chw, num_chunks), block) * block
    num_chunks = triton.cdiv(chw, chunk)
    partials = torch.empty((n, num_chunks), device=x.device, dtype=torch.float32)
    _absmax_partials_kernel[(num_chunks, n)](
        x, partials, chw, chunk, num_chunks, x.stride(0), BLOCK=block, num_warps=4
    )
    xq = torch.empty((n, h, w, c), device=x.device, dtype=torch.int8)
    x_scale = torch.empty((n,), device=x.device, dtype=torch.float32)
    block_c, block_p = (64, 64) if not INTERPRET else (16, 32)
    grid = (triton.cdiv(hw, block_p), triton.cdiv(c, block_c), n)
    _quantize_nhwc_kernel[grid](
        x,
        partials,
        xq,
        x_scale,
        c,
        hw,
        num_chunks,
        x.stride(0),
        x.stride(1),
        x.stride(3),
        BLOCK_CHUNKS=triton.next_power_of_2(num_chunks),
        BLOCK_C=block_c,
        BLOCK_P=block_p,
        num_warps=4,
    )
    return xq, x_scale


def make_int8_conv(
    master_w: torch.Tensor,
    bias32: torch.Tensor | None,
    *,
    geometry: tuple[int, int, int, int, int, int],
    activation: int,
    dtype: torch.dtype,
) -> Callable[..., torch.Tensor]:
    """The int8 callable for `conv.prepare_conv2d` (batchnorm already folded into master_w/bias32)."""
    cout, cin, kh, kw = master_w.shape
    sh, sw, ph, pw, dh, dw = geometry
    packed, w_scale = quantize_weight_per_channel(master_w)
    meta = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "PH": ph, "PW": pw, "DH": dh, "DW": dw}

    def conv(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if x.dtype == torch.float32:
            raise Unsupported("int8 convolution of float32 input: only float16/bfloat16")
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
        if x.dim() != 4 or x.shape[1] != cin:
            raise ValueError(f"x must be [N, {cin}, H, W], got {tuple(x.shape)}")
        if not (x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last)):
            raise ValueError("x must be contiguous NCHW or channels_last")
        if x.numel() >= 2**31:
            raise Unsupported("inputs of 2**31 elements or more (32-bit indexing)")
        n, c, h, w = x.shape
        oh, ow = output_size(h, w, kh, kw, sh, sw, ph, pw, dh, dw)
        out = check_output(out, (n, cout, oh, ow), x.dtype, x.device)
        xq, x_scale = quantize_activations(x)
        k_mode = K_GATHER if c < MIN_CHANNELS_FOR_BLOCKS else K_CHANNEL_BLOCKS
        source = xq.permute(0, 3, 1, 2)  # [N, C, H, W] view of the NHWC buffer
        launch_conv(
            source, packed, bias32, x_scale, w_scale, out, meta, k_mode, activation, True, "tf32"
        )
        return out

    return conv
