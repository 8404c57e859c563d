"""Global 2-D pooling: the window is the whole map (ResNet's 7x7 head, for instance).

    y[n, c] = max or mean over (h, w) of x[n, c, h, w]

Bytes: read x once, write N*C values. One row reduction per plane, PLANES planes per
program, instead of one mostly idle tile each. For small maps of consecutive planes (7x7 = 49
pixels, odd, so plane rows only allow 2-byte loads) a program can instead load PLANES * 49
consecutive elements as 16-byte vectors and regroup them into plane rows in registers
(`FLAT`). Measured figures: docs/perf/memory_bound.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from opbench.kernels.device import next_power_of_2_constexpr
from opbench.kernels.host import INTERPRET, MAX_INT32_OFFSET, cdiv, next_power_of_2
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.tuning import Config


@triton.jit
def combine(acc, values, IS_MAX: tl.constexpr):
    if IS_MAX:
        # NaN wins, as in torch.
        return tl.maximum(acc, values, propagate_nan=tl.PropagateNan.ALL)
    else:
        return acc + values


@triton.jit
def _global_pool2d_kernel(
    # pointers
    x_ptr,  # [N, C, H, W] input; H and W walkable as one axis
    y_ptr,  # [N, C, 1, 1] output
    # shapes
    channels,  # C
    planes,  # N * C
    # strides, in elements
    x_stride_n,
    x_stride_c,
    x_stride_hw,
    y_stride_n,
    y_stride_c,
    # meta-parameters
    PIXELS: tl.constexpr,  # H * W
    IS_MAX: tl.constexpr,
    PLANES: tl.constexpr,  # planes per program
    BLOCK_HW: tl.constexpr,  # pixels per step (FLAT: >= PIXELS, one step)
    FLAT: tl.constexpr,  # planes are consecutive in memory: load them as one flat vector
):
    """A window covering the whole map (global pooling, e.g. ResNet's 7x7 head): one row
    reduction per plane, PLANES planes per program, instead of one mostly idle tile each."""
    BLOCK_P: tl.constexpr = next_power_of_2_constexpr(PLANES)
    rows = tl.arange(0, BLOCK_P)
    plane = tl.program_id(0) * PLANES + rows
    plane_mask = (rows < PLANES) & (plane < planes)
    batch = (plane // channels).to(tl.int64)
    channel = (plane % channels).to(tl.int64)
    fill = -float("inf") if IS_MAX else 0.0
    if FLAT:
        x = _load_consecutive_planes(x_ptr, planes, fill, PIXELS, PLANES, BLOCK_P, BLOCK_HW)
        acc = _reduce_rows(x.to(tl.float32), IS_MAX)
    else:
        x_rows = x_ptr + batch * x_stride_n + channel * x_stride_c
        acc = tl.full([BLOCK_P], fill, tl.float32)
        for start in range(0, PIXELS, BLOCK_HW):
            pixel = start + tl.arange(0, BLOCK_HW)
            mask = plane_mask[:, None] & (pixel < PIXELS)[None, :]
            x = tl.load(x_rows[:, None] + pixel[None, :] * x_stride_hw, mask=mask, other=fill)
            if IS_MAX:
                acc = tl.maximum(acc, _reduce_rows(x.to(tl.float32), IS_MAX),
                                 propagate_nan=tl.PropagateNan.ALL)  # fmt: skip
            else:
                acc += _reduce_rows(x.to(tl.float32), IS_MAX)
    if not IS_MAX:
        acc = acc / PIXELS
    y_ptrs = y_ptr + batch * y_stride_n + channel * y_stride_c
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=plane_mask)


@triton.jit
def _load_consecutive_planes(
    x_ptr, planes, fill, PIXELS: tl.constexpr, PLANES: tl.constexpr, BLOCK_P: tl.constexpr,
    BLOCK_HW: tl.constexpr,
):  # fmt: skip
    """[BLOCK_P, BLOCK_HW] tile of this program's PLANES planes (fill outside them), when
    plane p of the tensor is elements [p * PIXELS, (p + 1) * PIXELS).

    A 49-pixel plane starts at an odd element, so loading the tile row by row would be 2-byte
    loads. Instead the PLANES * PIXELS elements are loaded as one contiguous vector, 16 bytes
    per load (PLANES is a multiple of 8 / gcd(PIXELS, 8), so every program starts 16-byte
    aligned), and regrouped into rows with `tl.gather`, which goes through shared memory."""
    CHUNK: tl.constexpr = next_power_of_2_constexpr(PLANES * PIXELS)
    k = tl.arange(0, CHUNK)
    first = tl.program_id(0) * (PLANES * PIXELS)
    mask = (k < PLANES * PIXELS) & (k < planes * PIXELS - first)
    chunk = tl.load(x_ptr + first + k, mask=mask, other=fill)
    row = tl.arange(0, BLOCK_P)[:, None]
    pixel = tl.arange(0, BLOCK_HW)[None, :]
    index = tl.minimum(row * PIXELS + pixel, CHUNK - 1)  # clamped where the tile is padding
    tile = tl.gather(chunk, tl.reshape(index, [BLOCK_P * BLOCK_HW]), axis=0)
    return tl.where(pixel < PIXELS, tl.reshape(tile, [BLOCK_P, BLOCK_HW]), fill)


@triton.jit
def _reduce_rows(x, IS_MAX: tl.constexpr):
    if IS_MAX:
        return tl.max(x, axis=1)
    else:
        return tl.sum(x, axis=1)


def tile_configs(gpu: bool = not INTERPRET) -> list[Config]:
    """Tiles of planes x pixels (plane rows), and flat loads of about 1K elements."""
    if not gpu:
        return [Config.of(PLANES=4, BLOCK_HW=16, FLAT=False, num_warps=4)]
    rows = [(16, 64, 4), (32, 64, 4), (64, 64, 8), (8, 256, 4), (2, 1024, 4), (1, 4096, 8)]
    flat = [(16, 64, 2), (16, 64, 4)]
    shapes = [(*shape, False) for shape in rows] + [(*shape, True) for shape in flat]
    return [Config.of(PLANES=p, BLOCK_HW=hw, FLAT=is_flat, num_warps=w)
            for p, hw, w, is_flat in shapes]  # fmt: skip


def fit_tiles(configs: Sequence[Config], pixels: int, consecutive: bool) -> list[Config]:
    """Plane rows: keep tiles at most twice as wide as the map (rounded up to a power of two).
    Flat loads (`consecutive` planes of up to 1024 pixels only): PLANES * BLOCK_HW is the
    chunk size; fit as many whole planes as keep every program 16-byte aligned."""
    max_hw = max(next_power_of_2(pixels), 64)
    step = 8 // math.gcd(pixels, 8)  # planes per 16 bytes (fp16; 32 bytes in fp32)
    kept: dict[tuple, Config] = {}
    for config in configs:
        meta = config.kwargs
        if meta["FLAT"]:
            planes = (meta["PLANES"] * meta["BLOCK_HW"] // pixels) // step * step
            if not consecutive or pixels > 1024 or planes == 0:
                continue
            meta.update(PLANES=planes, BLOCK_HW=next_power_of_2(pixels))
        elif meta["BLOCK_HW"] > max_hw:
            continue
        key = (meta["PLANES"], meta["BLOCK_HW"], meta["FLAT"], config.num_warps)
        kept.setdefault(key, config.with_meta(**meta))
    return list(kept.values()) or list(configs[:1])


def planes_consecutive(x: torch.Tensor) -> bool:
    """Whether plane p = n * C + c of x starts at element p * H*W with pixels contiguous (and
    the flat offsets of the whole tensor fit in int32)."""
    batch, channels, height, width = x.shape
    pixels, planes = height * width, batch * channels
    pixel_stride = x.stride(3) if width > 1 else x.stride(2)
    stride_n_ok = planes == channels or x.stride(0) == channels * pixels
    stride_c_ok = channels == 1 or x.stride(1) == pixels
    pixels_ok = pixel_stride == 1 or pixels == 1
    return pixels_ok and stride_n_ok and stride_c_ok and planes * pixels <= MAX_INT32_OFFSET


def bind_global_pool2d(
    x: torch.Tensor, out: torch.Tensor, *, is_max: bool, config: Config | None = None
) -> BoundKernels:
    """Pool each whole H x W plane of x (H and W walkable as one axis) into out [N, C, 1, 1]."""
    batch, channels, height, width = x.shape
    planes, pixels = batch * channels, height * width
    pixel_stride = x.stride(3) if width > 1 else x.stride(2)
    args = (x, out, channels, planes, x.stride(0), x.stride(1), pixel_stride, out.stride(0),
            out.stride(1))  # fmt: skip
    candidates = fit_tiles(tile_configs(), pixels, planes_consecutive(x))
    key = f"{x.dtype}|{tuple(x.shape)}|{x.stride()}|{out.stride()}|max{is_max}"
    call, choice = tuned_call(
        "global_pool2d", _global_pool2d_kernel, key, candidates,
        lambda cfg: (cdiv(planes, cfg["PLANES"]),), args, dict(PIXELS=pixels, IS_MAX=is_max),
        x.device, config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice])
