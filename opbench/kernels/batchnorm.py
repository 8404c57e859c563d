"""BatchNorm2d for inference: a per-channel affine map of an NCHW tensor.

    scale = weight / sqrt(running_var + eps);  shift = bias - running_mean * scale   (build time)
    y[n, c, h, w] = x[n, c, h, w] * scale[c] + shift[c]                              (per call)

Bytes: 2 * numel * element_size (+ 8 bytes per channel), 2 FLOPs per element: memory-bound.

Folding the running statistics into (scale, shift) happens once in `fold_batchnorm`, before
timing, like any weight preparation. The kernel walks the tensor as a matrix of N*C planes
by H*W pixels: one program owns BLOCK_P planes x BLOCK_HW pixels, so the channel (and its
two parameters) is looked up once per row of the tile instead of once per element.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.transpose import cdiv, check_float, next_power_of_2, resolve_out

# --------------------------------------------------------------------------------------
# Build-time folding
# --------------------------------------------------------------------------------------


def fold_batchnorm(
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift), float32 [C], such that batchnorm(x) = x * scale + shift."""
    inv_std = torch.rsqrt(running_var.double() + eps)
    scale = inv_std if weight is None else weight.double() * inv_std
    shift = -running_mean.double() * scale
    if bias is not None:
        shift = shift + bias.double()
    return scale.float().contiguous(), shift.float().contiguous()


# --------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------


@triton.jit
def _batchnorm_kernel(
    # pointers
    x_ptr,  # [N, C, H, W] input; H and W walkable as one axis
    y_ptr,  # [N, C, H, W] output, same dtype
    scale_ptr,  # [C] float32
    shift_ptr,  # [C] float32
    # shapes
    channels,  # C
    planes,  # N * C
    pixels,  # H * W
    # strides, in elements
    x_stride_n,
    x_stride_c,
    x_stride_hw,  # stride of the flattened H*W axis (x.stride(3))
    y_stride_n,
    y_stride_c,
    y_stride_hw,
    # meta-parameters
    BLOCK_P: tl.constexpr,  # planes per program
    BLOCK_HW: tl.constexpr,  # pixels per program
):
    # Pixel blocks vary fastest, so neighbouring programs stream one plane.
    pid = tl.program_id(0)
    blocks_hw = tl.cdiv(pixels, BLOCK_HW)
    plane = (pid // blocks_hw) * BLOCK_P + tl.arange(0, BLOCK_P)
    pixel = (pid % blocks_hw) * BLOCK_HW + tl.arange(0, BLOCK_HW)
    plane_mask = plane < planes
    channel = plane % channels
    batch = (plane // channels).to(tl.int64)
    scale = tl.load(scale_ptr + channel, mask=plane_mask, other=0.0)
    shift = tl.load(shift_ptr + channel, mask=plane_mask, other=0.0)

    x_rows = x_ptr + batch * x_stride_n + channel.to(tl.int64) * x_stride_c
    y_rows = y_ptr + batch * y_stride_n + channel.to(tl.int64) * y_stride_c
    mask = plane_mask[:, None] & (pixel < pixels)[None, :]
    x = tl.load(x_rows[:, None] + pixel[None, :] * x_stride_hw, mask=mask).to(tl.float32)
    y = x * scale[:, None] + shift[:, None]
    tl.store(
        y_rows[:, None] + pixel[None, :] * y_stride_hw, y.to(y_ptr.dtype.element_ty), mask=mask
    )


def _configs() -> list[triton.Config]:
    """Tiles of 1K-8K elements; `_fit_tile_to_planes` reshapes them for small images."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return [triton.Config({"BLOCK_P": 2, "BLOCK_HW": 32}, num_warps=4)]
    shapes = [(1, 1024, 4), (1, 2048, 4), (1, 4096, 8), (2, 2048, 8), (1, 8192, 8), (4, 1024, 4)]
    return [triton.Config({"BLOCK_P": p, "BLOCK_HW": hw}, num_warps=w) for p, hw, w in shapes]


def _fit_tile_to_planes(configs: list[triton.Config], named_args: dict, **kwargs) -> list:
    """Narrow tiles to the plane size, giving the spare elements to more planes."""
    fitted: dict[tuple[int, int, int], triton.Config] = {}
    max_hw = next_power_of_2(named_args["pixels"])
    max_p = next_power_of_2(named_args["planes"])
    for config in configs:
        block_p, block_hw = config.kwargs["BLOCK_P"], config.kwargs["BLOCK_HW"]
        if block_hw > max_hw:
            block_p, block_hw = block_p * (block_hw // max_hw), max_hw
        block_p = min(block_p, max_p)
        key = (block_p, block_hw, config.num_warps)
        fitted.setdefault(
            key,
            triton.Config({"BLOCK_P": block_p, "BLOCK_HW": block_hw}, num_warps=config.num_warps),
        )
    return list(fitted.values())


_batchnorm = triton.autotune(
    configs=_configs(),
    key=["channels", "pixels", "x_stride_hw"],
    prune_configs_by={"early_config_prune": _fit_tile_to_planes},
)(_batchnorm_kernel)


# --------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------


def batchnorm2d(
    x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Inference batchnorm of NCHW x with folded per-channel (scale, shift)."""
    check_float(x, "batchnorm2d")
    if x.dim() != 4:
        raise Unsupported(f"batchnorm2d expects NCHW input, got {x.dim()} dimensions")
    batch, channels, height, width = x.shape
    for name, param in (("scale", scale), ("shift", shift)):
        if param.shape != (channels,) or param.dtype != torch.float32 or not param.is_contiguous():
            raise ValueError(f"batchnorm2d {name} must be contiguous float32 [{channels}]")
    out = resolve_out(out, x.shape, x)
    if x.numel() == 0:
        return out
    for tensor in (x, out):
        if height > 1 and width > 1 and tensor.stride(2) != width * tensor.stride(3):
            raise Unsupported("batchnorm2d needs H and W to be walkable as one axis")
        if (height * width - 1) * tensor.stride(3) > 2**31 - 1:
            raise Unsupported("batchnorm2d: one plane spans more than 2**31 elements")
    pixels = height * width
    planes = batch * channels

    def grid(meta: dict) -> tuple[int]:
        return (cdiv(planes, meta["BLOCK_P"]) * cdiv(pixels, meta["BLOCK_HW"]),)

    _batchnorm[grid](
        x,
        out,
        scale,
        shift,
        channels,
        planes,
        pixels,
        x.stride(0),
        x.stride(1),
        _pixel_stride(x),
        out.stride(0),
        out.stride(1),
        _pixel_stride(out),
    )
    return out


def _pixel_stride(tensor: torch.Tensor) -> int:
    """Stride of the flattened H*W axis (the H stride when W has a single column)."""
    return tensor.stride(3) if tensor.shape[3] > 1 else tensor.stride(2)
