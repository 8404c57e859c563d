"""BatchNorm2d for inference: a per-channel affine map of an NCHW tensor.

    scale = weight / sqrt(running_var + eps);  shift = bias - running_mean * scale   (build time)
    y[n, c, h, w] = x[n, c, h, w] * scale[c] + shift[c]                              (per call)

Bytes: 2 * numel * element_size (+ 8 bytes per channel), 2 FLOPs per element: memory-bound.

Folding the running statistics into (scale, shift) happens once, before timing
(`host.fold_batchnorm`, the same fold the conv applies to its weights; the kernel takes
the result as contiguous float32). Two ways to walk the
tensor, both in one kernel and picked by tuning:

* planes: a matrix of N*C planes by H*W pixels; one program owns BLOCK_P planes x BLOCK_HW
  pixels, so the channel (and its two parameters) is looked up once per row of the tile
  instead of once per element. Best for large maps.
* flat (contiguous tensors only): one program owns BLOCK_HW consecutive elements of the whole
  tensor and computes each element's channel, (k // H*W) % C, like torch.compile does. For
  small maps a plane is a poor row: 14x14 = 196 elements fill 77% of a 256-wide tile, and
  planes start only 8-byte aligned, so the plane tiles get 8-byte loads at best, where flat
  blocks load 16 bytes per thread everywhere. C and H*W are compile-time constants (the
  kernel is compiled per map size), so the division is a multiply and a shift; the two
  parameter loads per element hit L1 (C * 8 bytes).
Measured figures: docs/perf/memory_bound.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.device import multiple_of
from opbench.kernels.host import (
    INTERPRET,
    MAX_INT32_OFFSET,
    alignment,
    cdiv,
    check_float,
    next_power_of_2,
    resolve_out,
)
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.tuning import Config


@triton.jit
def _batchnorm_kernel(
    # pointers
    x_ptr,  # [N, C, H, W] input; H and W walkable as one axis
    y_ptr,  # [N, C, H, W] output, same dtype
    scale_ptr,  # [C] float32
    shift_ptr,  # [C] float32
    # shapes
    planes,  # N * C
    # strides, in elements
    x_stride_n,
    x_stride_c,
    x_stride_hw,  # stride of the flattened H*W axis (x.stride(3))
    y_stride_n,
    y_stride_c,
    y_stride_hw,
    # meta-parameters
    CHANNELS: tl.constexpr,  # C
    PIXELS: tl.constexpr,  # H * W
    ALIGN: tl.constexpr,  # plane strides are multiples of ALIGN elements (see multiple_of)
    FLAT: tl.constexpr,  # walk the contiguous tensor as one flat array of elements
    BLOCK_P: tl.constexpr,  # planes per program (1 when FLAT)
    BLOCK_HW: tl.constexpr,  # pixels per program (elements per program when FLAT)
):
    pid = tl.program_id(0)
    if FLAT:
        # Element k of a contiguous NCHW tensor belongs to channel (k // (H*W)) % C. Every
        # thread loads 16-byte vectors whatever the map size; only the last block is partial.
        offs = pid * BLOCK_HW + tl.arange(0, BLOCK_HW)
        mask = offs < planes * PIXELS
        channel = (offs // PIXELS) % CHANNELS  # always a valid channel: no mask needed
        scale = tl.load(scale_ptr + channel)
        shift = tl.load(shift_ptr + channel)
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        tl.store(y_ptr + offs, (x * scale + shift).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # Plane strides are multiples of ALIGN (196-pixel planes: 4), which lets the compiler
        # use ALIGN-element vectors along the pixels.
        x_stride_n = multiple_of(x_stride_n, ALIGN)
        x_stride_c = multiple_of(x_stride_c, ALIGN)
        y_stride_n = multiple_of(y_stride_n, ALIGN)
        y_stride_c = multiple_of(y_stride_c, ALIGN)
        # Pixel blocks vary fastest, so neighbouring programs stream one plane.
        blocks_hw = tl.cdiv(PIXELS, BLOCK_HW)
        plane = (pid // blocks_hw) * BLOCK_P + tl.arange(0, BLOCK_P)
        pixel = (pid % blocks_hw) * BLOCK_HW + tl.arange(0, BLOCK_HW)
        plane_mask = plane < planes
        channel = plane % CHANNELS
        batch = (plane // CHANNELS).to(tl.int64)
        scale = tl.load(scale_ptr + channel, mask=plane_mask, other=0.0)
        shift = tl.load(shift_ptr + channel, mask=plane_mask, other=0.0)

        x_rows = x_ptr + batch * x_stride_n + channel.to(tl.int64) * x_stride_c
        y_rows = y_ptr + batch * y_stride_n + channel.to(tl.int64) * y_stride_c
        mask = plane_mask[:, None] & (pixel < PIXELS)[None, :]
        x = tl.load(x_rows[:, None] + pixel[None, :] * x_stride_hw, mask=mask).to(tl.float32)
        y = x * scale[:, None] + shift[:, None]
        tl.store(
            y_rows[:, None] + pixel[None, :] * y_stride_hw,
            y.to(y_ptr.dtype.element_ty),
            mask=mask,
        )


def tile_configs(gpu: bool = not INTERPRET) -> list[Config]:
    """Plane tiles of 1K-8K elements (`fit_tiles` reshapes them for small images) and flat
    blocks of 1K-8K elements."""
    if not gpu:
        return [Config.of(BLOCK_P=2, BLOCK_HW=32, FLAT=False, num_warps=4)]
    shapes = [(1, 1024, 4), (1, 2048, 4), (1, 4096, 8), (2, 2048, 8), (1, 8192, 8), (4, 1024, 4)]
    flat = [(1024, 4), (2048, 4), (4096, 8), (8192, 8)]
    return [Config.of(BLOCK_P=p, BLOCK_HW=hw, FLAT=False, num_warps=w) for p, hw, w in shapes] + [
        Config.of(BLOCK_P=1, BLOCK_HW=n, FLAT=True, num_warps=w) for n, w in flat
    ]


def fit_tiles(configs: Sequence[Config], planes: int, pixels: int, flat_ok: bool) -> list[Config]:
    """Narrow plane tiles to the plane size, giving the spare elements to more planes; keep
    flat blocks only when `flat_ok` (contiguous tensors of fewer than 2**31 elements)."""
    fitted: dict[tuple[int, int, bool, int], Config] = {}
    max_hw, max_p = next_power_of_2(pixels), next_power_of_2(planes)
    for config in configs:
        block_p, block_hw, flat = config["BLOCK_P"], config["BLOCK_HW"], config["FLAT"]
        if flat and not flat_ok:
            continue
        if flat:
            block_hw = min(block_hw, next_power_of_2(planes * pixels))
        else:
            if block_hw > max_hw:
                block_p, block_hw = block_p * (block_hw // max_hw), max_hw
            block_p = min(block_p, max_p)
        fitted.setdefault((block_p, block_hw, flat, config.num_warps),
                          config.with_meta(BLOCK_P=block_p, BLOCK_HW=block_hw))  # fmt: skip
    return list(fitted.values())


def flat_allowed(x: torch.Tensor, out: torch.Tensor) -> bool:
    """The flat path needs contiguous tensors with int32 offsets."""
    return x.is_contiguous() and out.is_contiguous() and x.numel() <= MAX_INT32_OFFSET


def bind_batchnorm2d(
    x: torch.Tensor,
    scale: torch.Tensor,
    shift: torch.Tensor,
    out: torch.Tensor | None = None,
    config: Config | None = None,
) -> BoundKernels:
    """Inference batchnorm of NCHW x with folded per-channel (scale, shift), bound to x."""
    check_float(x, "batchnorm2d")
    if x.dim() != 4:
        raise Unsupported(f"batchnorm2d expects NCHW input, got {x.dim()} dimensions")
    batch, channels, height, width = x.shape
    for name, param in (("scale", scale), ("shift", shift)):
        if param.shape != (channels,) or param.dtype != torch.float32 or not param.is_contiguous():
            raise ValueError(f"batchnorm2d {name} must be contiguous float32 [{channels}]")
    out = resolve_out(out, x.shape, x)
    if x.numel() == 0:
        return BoundKernels.of([], out)
    for tensor in (x, out):
        if height > 1 and width > 1 and tensor.stride(2) != width * tensor.stride(3):
            raise Unsupported("batchnorm2d needs H and W to be walkable as one axis")
        if (height * width - 1) * tensor.stride(3) > MAX_INT32_OFFSET:
            raise Unsupported("batchnorm2d: one plane spans more than 2**31 elements")
    pixels, planes = height * width, batch * channels
    strides = (x.stride(0), x.stride(1), _pixel_stride(x), out.stride(0), out.stride(1),
               _pixel_stride(out))  # fmt: skip

    def grid(cfg: Config) -> tuple[int]:
        if cfg["FLAT"]:
            return (cdiv(planes * pixels, cfg["BLOCK_HW"]),)
        return (cdiv(planes, cfg["BLOCK_P"]) * cdiv(pixels, cfg["BLOCK_HW"]),)

    align = plane_alignment(strides, pixels)
    candidates = fit_tiles(tile_configs(), planes, pixels, flat_allowed(x, out))
    key = f"{x.dtype}|{tuple(x.shape)}|{strides}|align{align}"
    named = dict(CHANNELS=channels, PIXELS=pixels, ALIGN=align)
    call, choice = tuned_call("batchnorm2d", _batchnorm_kernel, key, candidates, grid,
                              (x, out, scale, shift, planes, *strides), named, x.device,
                              config)  # fmt: skip
    return BoundKernels.of([call], out, [choice])


def batchnorm2d(
    x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Inference batchnorm of NCHW x with folded per-channel (scale, shift)."""
    return bind_batchnorm2d(x, scale, shift, out).launch()


def plane_alignment(strides: tuple[int, ...], pixels: int) -> int:
    """ALIGN for the plane path: the plane strides and the plane size are multiples of it, and
    pixels are contiguous on both sides (else vectors along pixels are impossible anyway)."""
    x_n, x_c, x_hw, y_n, y_c, y_hw = strides
    if x_hw != 1 or y_hw != 1:
        return 1
    return alignment(x_n, x_c, y_n, y_c, pixels)


def _pixel_stride(tensor: torch.Tensor) -> int:
    """Stride of the flattened H*W axis (the H stride when W has a single column)."""
    return tensor.stride(3) if tensor.shape[3] > 1 else tensor.stride(2)
