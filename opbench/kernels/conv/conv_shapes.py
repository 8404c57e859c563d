"""Host-side pieces of the implicit-GEMM conv (conv.py, conv_int8.py): the built layer, weight
packing, output geometry and the layouts the kernel accepts for its input copy and residual.
Plain torch; no kernels here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from opbench.kernels.host import cdiv

# Packed weight rows are zero-padded to this many elements, so the "gather" path reads B unmasked
# and rows start 16-byte aligned.
K_ALIGN = 128


@dataclass(frozen=True)
class ConvLayer:
    """What the build step fixed: packed weights, fp32 bias, geometry, activation code."""

    packed: torch.Tensor  # [Cout, K_pad], (r, s, c) order
    bias32: torch.Tensor | None
    geometry: dict = field(hash=False)
    activation: int
    cout: int
    cin: int
    w_scale: torch.Tensor | None = None  # int8: fp32 per-channel weight scales


def pack_weight(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[Cout, C, KH, KW] -> [Cout, K_pad] in (r, s, c) order, zero-padded to a multiple of K_ALIGN."""
    cout, c, kh, kw = weight.shape
    k = kh * kw * c
    packed = torch.zeros((cout, cdiv(k, K_ALIGN) * K_ALIGN), dtype=dtype, device=weight.device)
    packed[:, :k] = weight.permute(0, 2, 3, 1).reshape(cout, k).to(dtype)
    return packed


def output_size(
    h: int, w: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, dh: int, dw: int
) -> tuple[int, int]:
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"input {h}x{w} is smaller than the dilated kernel")
    return oh, ow


def output_for(layer: ConvLayer, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The output buffer for x: `out` checked, or a new contiguous NCHW tensor."""
    if x.dim() != 4 or x.shape[1] != layer.cin:
        raise ValueError(f"x must be [N, {layer.cin}, H, W], got {tuple(x.shape)}")
    n, _, h, w = x.shape
    g = layer.geometry
    oh, ow = output_size(h, w, g["KH"], g["KW"], g["SH"], g["SW"], g["PH"], g["PW"], g["DH"],
                         g["DW"])  # fmt: skip
    shape = (n, layer.cout, oh, ow)
    if out is None:
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if tuple(out.shape) != shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {x.dtype} tensor of shape {shape}")
    return out


def residual_strides(residual: torch.Tensor | None, out: torch.Tensor) -> tuple[int, int, int]:
    """(image, channel, pixel) element strides of a residual of out's shape and dtype whose
    rows of pixels are dense (NCHW or channels_last); zeros without a residual."""
    if residual is None:
        return (0, 0, 0)
    if tuple(residual.shape) != tuple(out.shape) or residual.dtype != out.dtype or \
            residual.device != out.device:  # fmt: skip
        raise ValueError(f"residual must be {tuple(out.shape)} {out.dtype} on {out.device}, "
                         f"got {tuple(residual.shape)} {residual.dtype} on {residual.device}")  # fmt: skip
    n_stride, c_stride, h_stride, w_stride = residual.stride()
    _, _, oh, ow = out.shape
    if oh == 1:
        pixel = w_stride
    elif ow == 1:
        pixel = h_stride
    elif h_stride == ow * w_stride:
        pixel = w_stride
    else:
        raise ValueError(
            "residual rows must be dense: pass a contiguous NCHW or channels_last tensor"
        )
    return (n_stride, c_stride, pixel)


def nhwc_strides(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(n, c, h, w) strides of a contiguous [N, H, W, C] buffer."""
    _, c, h, w = shape
    return (h * w * c, 1, w * c, c)
