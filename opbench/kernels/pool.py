"""2-D max and average pooling of NCHW tensors, with torch's semantics.

    y[n, c, oh, ow] = reduce_{kh < KH, kw < KW} x[n, c, oh*SH - PH + kh, ow*SW - PW + kw]

Max pooling treats padding as -inf; average pooling counts padding as zeros and always
divides by KH*KW (count_include_pad=True; with ceil_mode=False no window reaches past the
padding, so that is also torch's divisor). Dilation 1, ceil_mode=False.

Bytes: the floor is reading x once and writing y once,
(N*C*H*W + N*C*OH*OW) * element_size. Overlapping windows (3x3, stride 2) read each input
row for up to two output rows; the second read comes from L1/L2, not DRAM. KH*KW FLOPs per
output: memory-bound.

One program computes a BLOCK_H x BLOCK_W tile of one (n, c) plane of y; the window is a
compile-time constant, unrolled. Three paths:
* plain: one masked load per window tap (strided when the stride is not 1);
* paired (column stride 2, the common 2x2/s2 and 3x3/s2 pools): aligned 16-byte loads of
  column pairs, see `_pool_paired_columns`. On the H200 it cut the 3x3/s2 maxpool of
  32x256x112x112 fp16 from 0.174 ms to 0.095 ms and the 2x2/s2 avgpool from 0.105 to 0.067 ms
  (docs/perf/memory_bound.md), so stride-2 pools are tuned over paired tiles only. The 16-byte
  vectors need rows the compiler knows to be aligned: the launcher passes X_ALIGN / Y_ALIGN
  (how many elements the strides and widths are multiples of), because Triton only
  specialises integers that are multiples of 16 and a 56-wide map is not. With them,
  DenseNet's 2x2/s2 pool of 32x256x56x56 fp16 takes 16.8 us (3.8 TB/s; torch.compile 19.2 us)
  as CUDA-graph replays on the H200; with 2-byte loads it had run at 0.92x torch.compile;
* global (the window is the whole map): a per-plane row reduction, `_global_pool2d_kernel`,
  with PLANES planes per program; for small maps of consecutive planes (7x7 = 49 pixels, odd,
  so plane rows only allow 2-byte loads) it can instead load PLANES * 49 consecutive elements
  as 16-byte vectors and regroup them into plane rows in registers (`FLAT`).
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.transpose import (
    MAX_INT32_OFFSET,
    alignment,
    cdiv,
    check_float,
    multiple_of,
    next_power_of_2,
    resolve_out,
)

# --------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------


@triton.jit
def _pool2d_kernel(
    # pointers
    x_ptr,  # [N, C, H, W] input, any strides
    y_ptr,  # [N, C, OH, OW] output, same dtype
    # shapes
    channels,  # C
    height,  # H
    width,  # W
    out_height,  # OH
    out_width,  # OW
    # strides, in elements
    x_stride_n,
    x_stride_c,
    x_stride_h,
    x_stride_w,
    y_stride_n,
    y_stride_c,
    y_stride_h,
    y_stride_w,
    # meta-parameters
    IS_MAX: tl.constexpr,  # True: max pooling; False: average pooling
    KERNEL_H: tl.constexpr,
    KERNEL_W: tl.constexpr,
    STRIDE_H: tl.constexpr,
    STRIDE_W: tl.constexpr,
    PAD_H: tl.constexpr,
    PAD_W: tl.constexpr,
    X_ALIGN: tl.constexpr,  # x's plane and row strides and W are multiples of X_ALIGN elements
    Y_ALIGN: tl.constexpr,  # y's plane and row strides and OW are multiples of Y_ALIGN elements
    BLOCK_H: tl.constexpr,  # output rows per program
    BLOCK_W: tl.constexpr,  # output columns per program
    PAIRED: tl.constexpr,  # read stride-2 columns as aligned pairs where _pairable allows
):
    # Alignment hints (computed by the launcher): a 56-wide map has 112-byte rows, 16-byte
    # aligned, but 56 is not a multiple of 16, so without the hint the compiler assumes
    # nothing and the paired loads shrink from 16-byte vectors to 2-byte loads.
    x_stride_n = multiple_of(x_stride_n, X_ALIGN)
    x_stride_c = multiple_of(x_stride_c, X_ALIGN)
    x_stride_h = multiple_of(x_stride_h, X_ALIGN)
    width = multiple_of(width, X_ALIGN)
    y_stride_n = multiple_of(y_stride_n, Y_ALIGN)
    y_stride_c = multiple_of(y_stride_c, Y_ALIGN)
    y_stride_h = multiple_of(y_stride_h, Y_ALIGN)
    out_width = multiple_of(out_width, Y_ALIGN)

    # Program id -> (plane, row block, column block); column blocks vary fastest.
    pid = tl.program_id(0)
    blocks_w = tl.cdiv(out_width, BLOCK_W)
    blocks_h = tl.cdiv(out_height, BLOCK_H)
    block_w = pid % blocks_w
    block_h = (pid // blocks_w) % blocks_h
    plane = pid // (blocks_w * blocks_h)
    n = (plane // channels).to(tl.int64)
    c = (plane % channels).to(tl.int64)
    x_plane = x_ptr + n * x_stride_n + c * x_stride_c
    y_plane = y_ptr + n * y_stride_n + c * y_stride_c

    out_rows = block_h * BLOCK_H + tl.arange(0, BLOCK_H)
    out_cols = block_w * BLOCK_W + tl.arange(0, BLOCK_W)
    out_row_mask = out_rows < out_height
    out_col_mask = out_cols < out_width
    in_row0 = out_rows * STRIDE_H - PAD_H

    # Max is exact in any precision, so it runs in the input dtype (bf16 through fp32: the
    # Triton 3.9 interpreter compares bf16 by raw bits); sums run in fp32.
    if IS_MAX:
        fill = -float("inf")
        acc_dtype = tl.float32 if x_ptr.dtype.element_ty.is_bf16() else x_ptr.dtype.element_ty
    else:
        fill = 0.0
        acc_dtype = tl.float32
    if PAIRED and STRIDE_W == 2 and PAD_W <= 1 and KERNEL_W - PAD_W <= 3:
        acc = _pool_paired_columns(
            x_plane, in_row0, out_row_mask, block_w * BLOCK_W, height, width, x_stride_h,
            x_stride_w, fill, acc_dtype, IS_MAX, KERNEL_H, KERNEL_W, PAD_W, BLOCK_H, BLOCK_W,
        )  # fmt: skip
    else:
        in_col0 = out_cols * STRIDE_W - PAD_W
        acc = tl.full([BLOCK_H, BLOCK_W], fill, acc_dtype)
        for kh in tl.static_range(KERNEL_H):
            in_rows = in_row0 + kh
            row_ok = out_row_mask & (in_rows >= 0) & (in_rows < height)
            row_ptrs = x_plane + in_rows * x_stride_h
            for kw in tl.static_range(KERNEL_W):
                in_cols = in_col0 + kw
                col_ok = out_col_mask & (in_cols >= 0) & (in_cols < width)
                values = tl.load(
                    row_ptrs[:, None] + (in_cols * x_stride_w)[None, :],
                    mask=row_ok[:, None] & col_ok[None, :],
                    other=fill,
                )
                acc = _combine(acc, values.to(acc_dtype), IS_MAX)
    if not IS_MAX:
        acc = acc * (1.0 / (KERNEL_H * KERNEL_W))

    y_ptrs = y_plane + out_rows[:, None] * y_stride_h + out_cols[None, :] * y_stride_w
    mask = out_row_mask[:, None] & out_col_mask[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _combine(acc, values, IS_MAX: tl.constexpr):
    if IS_MAX:
        # NaN wins, as in torch.
        return tl.maximum(acc, values, propagate_nan=tl.PropagateNan.ALL)
    else:
        return acc + values


@triton.jit
def _pool_paired_columns(
    x_plane, in_row0, out_row_mask, first_out_col, height, width, x_stride_h, x_stride_w,
    fill, acc_dtype: tl.constexpr, IS_MAX: tl.constexpr, KERNEL_H: tl.constexpr,
    KERNEL_W: tl.constexpr, PAD_W: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    """Stride-2 columns without strided loads: the window of output column ow covers input
    columns 2*ow + c for c in [-PAD_W, KERNEL_W - PAD_W). First reduce over the window's rows
    on an aligned, contiguous tile of 2*BLOCK_W columns (wide vector loads), then split it
    into even (c = 0) and odd (c = 1) columns. c = -1 is the odd column of the previous
    output and c = 2 the even column of the next: a one-step shift within the tile, with one
    column loaded from each neighbouring tile."""
    cols = 2 * first_out_col + tl.arange(0, 2 * BLOCK_W)
    col_ok = cols < width
    left_col = 2 * first_out_col - 1
    right_col = 2 * first_out_col + 2 * BLOCK_W
    column_rows = tl.full([BLOCK_H, 2 * BLOCK_W], fill, acc_dtype)
    left = tl.full([BLOCK_H], fill, acc_dtype)
    right = tl.full([BLOCK_H], fill, acc_dtype)
    for kh in tl.static_range(KERNEL_H):
        in_rows = in_row0 + kh
        row_ok = out_row_mask & (in_rows >= 0) & (in_rows < height)
        row_ptrs = x_plane + in_rows * x_stride_h
        tile = tl.load(
            row_ptrs[:, None] + cols[None, :] * x_stride_w,
            mask=row_ok[:, None] & col_ok[None, :],
            other=fill,
        )
        column_rows = _combine(column_rows, tile.to(acc_dtype), IS_MAX)
        if PAD_W > 0:
            edge = tl.load(
                row_ptrs + left_col * x_stride_w,
                mask=tl.where(left_col >= 0, row_ok, False),
                other=fill,
            )
            left = _combine(left, edge.to(acc_dtype), IS_MAX)
        if KERNEL_W - PAD_W > 2:
            edge = tl.load(
                row_ptrs + right_col * x_stride_w,
                mask=tl.where(right_col < width, row_ok, False),
                other=fill,
            )
            right = _combine(right, edge.to(acc_dtype), IS_MAX)
    even, odd = tl.split(tl.reshape(column_rows, [BLOCK_H, BLOCK_W, 2]))

    j = tl.arange(0, BLOCK_W)[None, :] + tl.zeros([BLOCK_H, BLOCK_W], tl.int32)
    acc = tl.full([BLOCK_H, BLOCK_W], fill, acc_dtype)
    for kw in tl.static_range(KERNEL_W):
        if kw - PAD_W == -1:
            shifted = tl.gather(odd, tl.maximum(j - 1, 0), axis=1)
            acc = _combine(acc, tl.where(j == 0, left[:, None], shifted), IS_MAX)
        elif kw - PAD_W == 0:
            acc = _combine(acc, even, IS_MAX)
        elif kw - PAD_W == 1:
            acc = _combine(acc, odd, IS_MAX)
        else:
            shifted = tl.gather(even, tl.minimum(j + 1, BLOCK_W - 1), axis=1)
            acc = _combine(acc, tl.where(j == BLOCK_W - 1, right[:, None], shifted), IS_MAX)
    return acc


def _configs() -> list[triton.Config]:
    """Output tiles of 256-4096 elements, 64 wide (most feature maps are <= 64 wide after
    pooling), in a plain and a paired version."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return [triton.Config({"BLOCK_H": 4, "BLOCK_W": 8, "PAIRED": True}, num_warps=4)]
    shapes = [(4, 64, 4), (8, 64, 4), (16, 64, 4), (8, 64, 2), (32, 64, 8), (16, 128, 8)]
    return [
        triton.Config({"BLOCK_H": h, "BLOCK_W": w, "PAIRED": paired}, num_warps=warps)
        for h, w, warps in shapes
        for paired in (False, True)
    ]


def _fit_tile_to_output(configs: list[triton.Config], named_args: dict, **kwargs) -> list:
    """Narrow tiles to the output width, giving the spare elements to more rows; paired
    loads wherever `_pairable` allows them, plain loads elsewhere."""
    fitted: dict[tuple, triton.Config] = {}
    max_w = max(next_power_of_2(named_args["out_width"]), 16)
    max_h = next_power_of_2(named_args["out_height"])
    for config in configs:
        block_h, block_w = config.kwargs["BLOCK_H"], config.kwargs["BLOCK_W"]
        paired = _pairable(kwargs)
        if config.kwargs["PAIRED"] != paired:
            continue
        if block_w > max_w:
            block_h, block_w = block_h * (block_w // max_w), max_w
        block_h = min(block_h, max_h)
        meta = {"BLOCK_H": block_h, "BLOCK_W": block_w, "PAIRED": paired}
        key = (block_h, block_w, paired, config.num_warps)
        fitted.setdefault(key, triton.Config(meta, num_warps=config.num_warps))
    return list(fitted.values())


def _pairable(meta: dict) -> bool:
    """The paired path covers column stride 2 with window offsets in [-1, 2]."""
    return meta["STRIDE_W"] == 2 and meta["PAD_W"] <= 1 and meta["KERNEL_W"] - meta["PAD_W"] <= 3


_POOL_KEY = ["out_height", "out_width", "x_stride_w", "IS_MAX", "KERNEL_W", "STRIDE_W", "X_ALIGN"]
_pool2d = triton.autotune(
    configs=_configs(),
    key=[*_POOL_KEY, "Y_ALIGN"],
    prune_configs_by={"early_config_prune": _fit_tile_to_output},
)(_pool2d_kernel)


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


@triton.constexpr_function
def next_power_of_2_constexpr(n):
    """`next_power_of_2` for constexpr arithmetic inside kernels (self-contained: the
    compiler does not follow calls to plain Python functions)."""
    return 1 << max(n - 1, 0).bit_length()


def _global_configs() -> list[triton.Config]:
    """Tiles of planes x pixels (plane rows), and flat loads of about 1K elements.

    On the H200, ResNet-50's head (32x2048x7x7 fp16, CUDA-graph replays): flat loads of 16
    planes 7.3 us, the best plane rows 8.5 us; with L2 flushed before each single replay 11.7
    vs 12.7 us. Flat chunks of 40 and 80 planes, and more plane-row shapes, never won there."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return [triton.Config({"PLANES": 4, "BLOCK_HW": 16, "FLAT": False}, num_warps=4)]
    rows = [(16, 64, 4), (32, 64, 4), (64, 64, 8), (8, 256, 4), (2, 1024, 4), (1, 4096, 8)]
    flat = [(16, 64, 2), (16, 64, 4)]
    shapes = [(*shape, False) for shape in rows] + [(*shape, True) for shape in flat]
    return [
        triton.Config({"PLANES": p, "BLOCK_HW": hw, "FLAT": is_flat}, num_warps=w)
        for p, hw, w, is_flat in shapes
    ]


def _fit_global_tile(configs: list[triton.Config], named_args: dict, **kwargs) -> list:
    """Plane rows: keep tiles at most twice as wide as the map (rounded up to a power of two).
    Flat loads (consecutive planes of up to 1024 pixels only): PLANES * BLOCK_HW is the chunk
    size; fit as many whole planes as keep every program 16-byte aligned."""
    pixels = kwargs["PIXELS"]
    max_hw = max(next_power_of_2(pixels), 64)
    consecutive = (named_args["x_stride_hw"] == 1 or pixels == 1) and _planes_consecutive(
        named_args, pixels
    )
    step = 8 // math.gcd(pixels, 8)  # planes per 16 bytes (fp16; 32 bytes in fp32)
    kept: dict[tuple, triton.Config] = {}
    for config in configs:
        meta = dict(config.kwargs)
        if meta["FLAT"]:
            planes = (meta["PLANES"] * meta["BLOCK_HW"] // pixels) // step * step
            if not consecutive or pixels > 1024 or planes == 0:
                continue
            meta.update(PLANES=planes, BLOCK_HW=next_power_of_2(pixels))
        elif meta["BLOCK_HW"] > max_hw:
            continue
        key = (meta["PLANES"], meta["BLOCK_HW"], meta["FLAT"], config.num_warps)
        kept.setdefault(key, triton.Config(meta, num_warps=config.num_warps))
    return list(kept.values()) or configs[:1]


def _planes_consecutive(named_args: dict, pixels: int) -> bool:
    """Whether plane p = n * C + c starts at element p * pixels (and the flat offsets of the
    whole tensor fit in int32)."""
    channels, planes = named_args["channels"], named_args["planes"]
    stride_n_ok = planes == channels or named_args["x_stride_n"] == channels * pixels
    stride_c_ok = channels == 1 or named_args["x_stride_c"] == pixels
    return stride_n_ok and stride_c_ok and planes * pixels <= MAX_INT32_OFFSET


_global_pool2d = triton.autotune(
    configs=_global_configs(),
    key=["planes", "channels", "x_stride_n", "x_stride_c", "x_stride_hw", "PIXELS", "IS_MAX"],
    prune_configs_by={"early_config_prune": _fit_global_tile},
)(_global_pool2d_kernel)


# --------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------


def maxpool2d(
    x: torch.Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int],
    padding: int | tuple[int, int],
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """torch.nn.functional.max_pool2d(x, kernel_size, stride, padding) for NCHW x."""
    return _launch_pool2d(x, kernel_size, stride, padding, out, is_max=True)


def avgpool2d(
    x: torch.Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int],
    padding: int | tuple[int, int],
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """torch.nn.functional.avg_pool2d(x, kernel_size, stride, padding) for NCHW x."""
    return _launch_pool2d(x, kernel_size, stride, padding, out, is_max=False)


def _pair(value: int | tuple[int, int] | list[int], name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if len(value) != 2:
        raise ValueError(f"{name} must be an int or a pair, not {value!r}")
    return int(value[0]), int(value[1])


def _launch_pool2d(
    x: torch.Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int],
    padding: int | tuple[int, int],
    out: torch.Tensor | None,
    is_max: bool,
) -> torch.Tensor:
    op = "maxpool2d" if is_max else "avgpool2d"
    check_float(x, op)
    if x.dim() != 4:
        raise Unsupported(f"{op} expects NCHW input, got {x.dim()} dimensions")
    (kernel_h, kernel_w), (stride_h, stride_w) = (
        _pair(kernel_size, "kernel_size"),
        _pair(stride, "stride"),
    )
    pad_h, pad_w = _pair(padding, "padding")
    if min(kernel_h, kernel_w, stride_h, stride_w) < 1 or min(pad_h, pad_w) < 0:
        raise Unsupported(f"{op}: kernel and stride must be >= 1 and padding >= 0")
    if 2 * pad_h > kernel_h or 2 * pad_w > kernel_w:
        raise Unsupported(f"{op}: padding must be at most half the kernel size (as in torch)")
    batch, channels, height, width = x.shape
    out_height = (height + 2 * pad_h - kernel_h) // stride_h + 1
    out_width = (width + 2 * pad_w - kernel_w) // stride_w + 1
    if out_height < 1 or out_width < 1:
        raise Unsupported(f"{op}: a {kernel_h}x{kernel_w} window does not fit {height}x{width}")
    out = resolve_out(out, (batch, channels, out_height, out_width), x)
    if out.numel() == 0:
        return out
    for tensor in (x, out):
        plane_span = sum(
            (size - 1) * stride
            for size, stride in zip(tensor.shape[2:], tensor.stride()[2:], strict=True)
        )
        if plane_span > 2**31 - 1:
            raise Unsupported(f"{op}: one plane spans more than 2**31 elements")

    if (kernel_h, kernel_w, pad_h, pad_w) == (height, width, 0, 0) and _flat_plane(x):
        _launch_global_pool2d(x, out, is_max)
        return out

    def grid(meta: dict) -> tuple[int]:
        tiles = cdiv(out_height, meta["BLOCK_H"]) * cdiv(out_width, meta["BLOCK_W"])
        return (batch * channels * tiles,)

    _pool2d[grid](
        x,
        out,
        channels,
        height,
        width,
        out_height,
        out_width,
        *x.stride(),
        *out.stride(),
        IS_MAX=is_max,
        KERNEL_H=kernel_h,
        KERNEL_W=kernel_w,
        STRIDE_H=stride_h,
        STRIDE_W=stride_w,
        PAD_H=pad_h,
        PAD_W=pad_w,
        X_ALIGN=alignment(*x.stride()[:3], width) if x.stride(3) == 1 else 1,
        Y_ALIGN=alignment(*out.stride()[:3], out_width) if out.stride(3) == 1 else 1,
    )
    return out


def _flat_plane(x: torch.Tensor) -> bool:
    """Whether H and W of x can be walked as one axis of stride x.stride(3)."""
    return x.shape[2] == 1 or x.shape[3] == 1 or x.stride(2) == x.shape[3] * x.stride(3)


def _launch_global_pool2d(x: torch.Tensor, out: torch.Tensor, is_max: bool) -> None:
    batch, channels, height, width = x.shape
    planes = batch * channels
    pixel_stride = x.stride(3) if width > 1 else x.stride(2)
    _global_pool2d[lambda meta: (cdiv(planes, meta["PLANES"]),)](
        x,
        out,
        channels,
        planes,
        x.stride(0),
        x.stride(1),
        pixel_stride,
        out.stride(0),
        out.stride(1),
        PIXELS=height * width,
        IS_MAX=is_max,
    )
