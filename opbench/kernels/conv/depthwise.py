"""Depthwise 2-D convolution (groups = in_channels = out_channels), NCHW out, with a folded
batchnorm and an activation in the epilogue: MobileNet's 3x3 depthwise layers.

    out[n, c, oh, ow] = act( bias[c] + sum_{r < KH, s < KW} x[n, c, oh*SH - PH + r*DH,
                                                              ow*SW - PW + s*DW] * w[c, r, s] )

Each channel sees only its own plane, so there is no reduction over channels to feed tensor
cores: 2*KH*KW FLOPs per output against one input read and one output write, i.e. the layer is
memory-bound (bytes: x + out once, 2*(N*C*H*W + N*C*OH*OW) in fp16; the KH*KW re-reads of
neighbouring pixels hit L1/L2). One program owns BLOCK_C channels x BLOCK_P output pixels of one
image; the taps are unrolled (KH, KW are compile-time constants), every tap a masked gather of
a [BLOCK_C, BLOCK_P] tile through x's strides (NCHW: runs along pixels; channels_last: runs
along channels; the tuner picks the tile shape that suits the layout and the map size).
Weights and bias are float32, folded with the batchnorm in float64 at build time: the
products run on CUDA cores in fp32 anyway, so keeping the weights at fp32 costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.conv.conv_shapes import output_size
from opbench.kernels.epilogue import activation_code, apply_activation
from opbench.kernels.host import INTERPRET, cdiv, check_float, fold_batchnorm, next_power_of_2, pair
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.tuning import Config


@triton.jit
def _depthwise_kernel(
    # pointers
    x_ptr,  # input, element (n, c, h, w) at n*STRIDE_XN + c*STRIDE_XC + h*STRIDE_XH + w*STRIDE_XW
    w_ptr,  # float32 [C, KH*KW] folded weights
    bias_ptr,  # float32 [C] (unused unless HAS_BIAS)
    out_ptr,  # contiguous NCHW output
    # shapes
    C: tl.constexpr,
    H: tl.constexpr,
    W: tl.constexpr,
    OH: tl.constexpr,
    OW: tl.constexpr,
    # strides, in elements
    STRIDE_XN: tl.constexpr,
    STRIDE_XC: tl.constexpr,
    STRIDE_XH: tl.constexpr,
    STRIDE_XW: tl.constexpr,
    # meta-parameters
    KH: tl.constexpr,
    KW: tl.constexpr,
    SH: tl.constexpr,
    SW: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    DH: tl.constexpr,
    DW: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # code from epilogue.activation_code
    BLOCK_C: tl.constexpr,  # channels per program
    BLOCK_P: tl.constexpr,  # output pixels per program
):
    pid = tl.program_id(0)
    pixel_blocks = (OH * OW + BLOCK_P - 1) // BLOCK_P
    channel_blocks = (C + BLOCK_C - 1) // BLOCK_C
    image = (pid // (pixel_blocks * channel_blocks)).to(tl.int64)
    offs_c = ((pid // pixel_blocks) % channel_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_p = (pid % pixel_blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    c_ok = offs_c < C
    p_ok = offs_p < OH * OW
    ih0 = (offs_p // OW) * SH - PH
    iw0 = (offs_p % OW) * SW - PW
    planes = x_ptr + image * STRIDE_XN + (offs_c * STRIDE_XC)[:, None]

    acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
    for r in tl.static_range(KH):
        ih = ih0 + r * DH
        row_ok = p_ok & (ih >= 0) & (ih < H)
        for s in tl.static_range(KW):
            iw = iw0 + s * DW
            ok = row_ok & (iw >= 0) & (iw < W)
            pixels = (ih * STRIDE_XH + iw * STRIDE_XW)[None, :]
            x = tl.load(planes + pixels, mask=c_ok[:, None] & ok[None, :], other=0.0)
            tap = tl.load(w_ptr + offs_c * (KH * KW) + (r * KW + s), mask=c_ok, other=0.0)
            acc += x.to(tl.float32) * tap[:, None]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_c, mask=c_ok, other=0.0)[:, None]
    acc = apply_activation(acc, ACTIVATION)
    out_rows = out_ptr + image * (C * OH * OW) + (offs_c * (OH * OW))[:, None]
    mask = c_ok[:, None] & p_ok[None, :]
    tl.store(out_rows + offs_p[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


def tile_configs(channels: int, pixels: int) -> list[Config]:
    """[BLOCK_C, BLOCK_P] tiles of 512-2048 outputs, trimmed to the problem (a 7x7 map gets
    no 1024-pixel rows, a 32-channel layer no 64-channel tiles)."""
    if INTERPRET:
        return [Config.of(BLOCK_C=4, BLOCK_P=32, num_warps=4)]
    shapes = [(1, 1024, 4), (2, 512, 4), (4, 256, 4), (8, 128, 4), (16, 64, 4), (32, 32, 4),
              (64, 16, 4), (4, 512, 8), (16, 128, 8), (32, 64, 8)]  # fmt: skip
    max_c, max_p = next_power_of_2(channels), max(16, next_power_of_2(pixels))
    kept = [(c, p, w) for c, p, w in shapes if c <= max_c and p <= max_p]
    kept = kept or [min(shapes, key=lambda t: t[0] * t[1])]
    return [Config.of(BLOCK_C=c, BLOCK_P=p, num_warps=w) for c, p, w in kept]


class DepthwiseConv:
    """A depthwise conv built once (batchnorm folded): `bind(x)` or `conv(x, out=None)`."""

    def __init__(self, weight32: torch.Tensor, bias32: torch.Tensor | None, geometry: dict,
                 activation: int, dtype: torch.dtype) -> None:  # fmt: skip
        self.weight32, self.bias32, self.geometry = weight32, bias32, geometry
        self.activation, self.dtype = activation, dtype
        self.channels = weight32.shape[0]

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.bind(x, out).launch()

    def bind(
        self, x: torch.Tensor, out: torch.Tensor | None = None, config: Config | None = None
    ) -> BoundKernels:
        check_float(x, "depthwise conv2d")
        if x.dtype != self.dtype:
            raise TypeError(f"x is {x.dtype} but the layer was prepared for {self.dtype}")
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise ValueError(f"x must be [N, {self.channels}, H, W], got {tuple(x.shape)}")
        n, c, h, w = x.shape
        g = self.geometry
        oh, ow = output_size(h, w, g["KH"], g["KW"], g["SH"], g["SW"], g["PH"], g["PW"], g["DH"],
                             g["DW"])  # fmt: skip
        shape = (n, c, oh, ow)
        if out is None:
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
        elif tuple(out.shape) != shape or out.dtype != x.dtype or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous {x.dtype} tensor of shape {shape}")
        if max(x.numel(), out.numel()) >= 2**31:
            raise Unsupported("tensors of 2**31 elements or more (32-bit indexing)")
        if out.numel() == 0:
            return BoundKernels.of([], out)
        sxn, sxc, sxh, sxw = x.stride()
        named = dict(C=c, H=h, W=w, OH=oh, OW=ow, STRIDE_XN=sxn, STRIDE_XC=sxc, STRIDE_XH=sxh,
                     STRIDE_XW=sxw, **g, HAS_BIAS=self.bias32 is not None,
                     ACTIVATION=self.activation)  # fmt: skip
        bias = self.bias32 if self.bias32 is not None else self.weight32
        key = f"{x.dtype}|{tuple(x.shape)}|{x.stride()}|" + ",".join(
            f"{k}{v}" for k, v in g.items()
        )

        def grid(cfg: Config) -> tuple[int]:
            return (n * cdiv(c, cfg["BLOCK_C"]) * cdiv(oh * ow, cfg["BLOCK_P"]),)

        call, choice = tuned_call("depthwise_conv2d", _depthwise_kernel, key,
                                  tile_configs(c, oh * ow), grid,
                                  (x, self.weight32, bias, out), named, x.device, config)  # fmt: skip
        return BoundKernels.of([call], out, [choice])


def build_depthwise_conv2d(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    activation: str = "none",
    batchnorm: dict | None = None,
) -> DepthwiseConv:
    """Build-time work: check the weight is depthwise ([C, 1, KH, KW]), fold the batchnorm in
    float64, keep float32 weights and bias."""
    if weight.dim() != 4 or weight.shape[1] != 1:
        raise ValueError(f"depthwise weight must be [C, 1, kh, kw], got {tuple(weight.shape)}")
    check_float(weight, "depthwise conv2d")
    channels, _, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    master_w = weight.double().reshape(channels, kh * kw)
    master_b = bias.double() if bias is not None else None
    if batchnorm is not None:
        scale, shift = fold_batchnorm(batchnorm["running_mean"], batchnorm["running_var"],
                                      batchnorm.get("weight"), batchnorm.get("bias"),
                                      float(batchnorm.get("eps", 1e-5)))  # fmt: skip
        master_w = master_w * scale[:, None]
        master_b = (master_b * scale if master_b is not None else 0.0) + shift
    geometry = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "PH": ph, "PW": pw, "DH": dh, "DW": dw}
    return DepthwiseConv(
        master_w.float().contiguous(),
        master_b.float().contiguous() if master_b is not None else None,
        geometry, activation_code(activation, weight.dtype), weight.dtype,
    )  # fmt: skip
