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

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.conv import (
    INT8_TILES,
    INTERPRET,
    K_CHANNEL_BLOCKS,
    K_GATHER,
    MIN_CHANNELS_FOR_BLOCKS,
    CompiledLaunch,
    Tile,
    check_output,
    conv_launch,
    fitting_tiles,
    output_size,
    pack_weight,
    select_plan,
)

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
    amax = tl.where(amax > 0.0, amax, 1.0)  # an all-zero image quantizes to zeros with any scale
    inv_scale = 127.0 / amax

    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    mask = (offs_c < C)[:, None] & (offs_p < HW)[None, :]
    x_ptrs = x_ptr + image * STRIDE_XN + offs_c[:, None] * STRIDE_XC + offs_p[None, :] * STRIDE_XP
    values = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    q = tl.floor(values * inv_scale + 0.5)  # |x| <= amax keeps q in [-127, 127]
    q = tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int8)
    tl.store(q_ptr + image * (HW * C) + offs_p[None, :] * C + offs_c[:, None], q, mask=mask)
    if (pid_p == 0) & (pid_c == 0):
        tl.store(x_scale_ptr + image, amax / 127.0)


def quantize_weight_per_channel(master_w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Build time: packed int8 weights [Cout, K_pad] and float32 scales [Cout]."""
    amax = master_w.abs().amax(dim=(1, 2, 3))
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(master_w / scale[:, None, None, None]).clamp_(-127, 127)
    return pack_weight(q, torch.int8), scale.float().contiguous()


class Int8Plan:
    """Run-time quantization of x (two kernels) and the int8 conv, for one input signature."""

    def __init__(self, layer: Int8Conv, x: torch.Tensor, out_shape: tuple, tile: Tile):
        n, c, h, w = x.shape
        chw, hw = c * h * w, h * w
        self.name = f"int8 {tile}"
        block = 256 if INTERPRET else 1024
        num_chunks = max(1, min(MAX_CHUNKS, triton.cdiv(chw, CHUNK_TARGET)))
        chunk = triton.cdiv(triton.cdiv(chw, num_chunks), block) * block
        num_chunks = triton.cdiv(chw, chunk)
        self.partials_shape, self.xq_shape, self.n = (n, num_chunks), (n, h, w, c), n
        meta = dict(CHW=chw, CHUNK=chunk, NUM_CHUNKS=num_chunks, STRIDE_XN=x.stride(0), BLOCK=block)
        self.absmax = CompiledLaunch(_absmax_partials_kernel, (num_chunks, n), meta, 4, 1)
        block_c, block_p = (16, 32) if INTERPRET else (64, 64)
        meta = dict(C=c, HW=hw, NUM_CHUNKS=num_chunks, STRIDE_XN=x.stride(0), STRIDE_XC=x.stride(1))
        meta.update(STRIDE_XP=x.stride(3), BLOCK_CHUNKS=triton.next_power_of_2(num_chunks))
        meta.update(BLOCK_C=block_c, BLOCK_P=block_p)
        grid = (triton.cdiv(hw, block_p), triton.cdiv(c, block_c), n)
        self.quantize = CompiledLaunch(_quantize_nhwc_kernel, grid, meta, 4, 1)
        k_mode = K_GATHER if c < MIN_CHANNELS_FOR_BLOCKS else K_CHANNEL_BLOCKS
        self.conv = conv_launch(
            x.shape, (hw * c, 1, w * c, c), out_shape, layer.packed, layer.geometry,
            k_mode=k_mode, activation=layer.activation, has_bias=layer.bias32 is not None,
            is_int8=True, upcast=False, tile=tile,
        )  # fmt: skip
        self.layer = layer

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        partials = torch.empty(self.partials_shape, device=x.device, dtype=torch.float32)
        xq = torch.empty(self.xq_shape, device=x.device, dtype=torch.int8)
        x_scale = torch.empty((self.n,), device=x.device, dtype=torch.float32)
        self.absmax(x, partials)
        self.quantize(x, partials, xq, x_scale)
        bias = self.layer.bias32 if self.layer.bias32 is not None else out
        self.conv(xq, self.layer.packed, bias, x_scale, self.layer.w_scale, out)


class Int8Conv:
    """The callable returned by `prepare_conv2d` for quant="int8" (batchnorm already folded)."""

    def __init__(self, master_w: torch.Tensor, bias32, geometry: dict, activation: int):
        self.cout, self.cin, _, _ = master_w.shape
        self.packed, self.w_scale = quantize_weight_per_channel(master_w)
        self.bias32, self.geometry, self.activation = bias32, geometry, activation
        self.plans: dict = {}
        self.timings: dict = {}  # plan name -> median ms, from the first-call selection

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if x.dtype == torch.float32:
            raise Unsupported("int8 convolution of float32 input: only float16/bfloat16")
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
        if x.dim() != 4 or x.shape[1] != self.cin:
            raise ValueError(f"x must be [N, {self.cin}, H, W], got {tuple(x.shape)}")
        if not (x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last)):
            raise ValueError("x must be contiguous NCHW or channels_last")
        n, c, h, w = x.shape
        g = self.geometry
        oh, ow = output_size(
            h, w, g["KH"], g["KW"], g["SH"], g["SW"], g["PH"], g["PW"], g["DH"], g["DW"]
        )
        out = check_output(out, (n, self.cout, oh, ow), x.dtype, x.device)
        key = (x.shape, x.stride(), x.dtype, x.device)
        plan = self.plans.get(key)
        if plan is None:
            gather = c < MIN_CHANNELS_FOR_BLOCKS
            tiles = fitting_tiles(INT8_TILES, self.cout, c, gather)
            plans = [Int8Plan(self, x, out.shape, tile) for tile in tiles]
            plan = self.plans[key] = select_plan(plans, x, out, self.timings)
        plan(x, out)
        return out
