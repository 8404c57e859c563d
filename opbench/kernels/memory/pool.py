"""2-D max and average pooling of NCHW tensors, with torch's semantics.

    y[n, c, oh, ow] = reduce_{kh < KH, kw < KW} x[n, c, oh*SH - PH + kh, ow*SW - PW + kw]

Max pooling treats padding as -inf; average pooling counts padding as zeros and always
divides by KH*KW (count_include_pad=True; with ceil_mode=False no window reaches past the
padding, so that is also torch's divisor). Dilation 1. A max pool may round its output size
up (ceil_mode): the last window then reaches past the input, where every tap is masked to
-inf already, and torch's rule keeps at least one tap of each window inside.

Bytes: the floor is reading x once and writing y once,
(N*C*H*W + N*C*OH*OW) * element_size. Overlapping windows (3x3, stride 2) read each input
row for up to two output rows; the second read comes from L1/L2, not DRAM. KH*KW FLOPs per
output: memory-bound.

One program computes a BLOCK_H x BLOCK_W tile of one (n, c) plane of y; the window is a
compile-time constant, unrolled. Two paths:
* plain: one masked load per window tap (strided when the stride is not 1);
* paired (column stride 2, the common 2x2/s2 and 3x3/s2 pools): aligned 16-byte loads of
  column pairs, see `_pool_paired_columns`; stride-2 pools are tuned over paired tiles only.
  The 16-byte vectors need rows the compiler knows to be aligned: the launcher passes
  X_ALIGN / Y_ALIGN (how many elements the strides and widths are multiples of), because
  Triton only specialises integers that are multiples of 16 and a 56-wide map is not.
A window covering the whole map (global pooling) runs `pool_global.py` instead.
Measured figures: docs/perf/memory_bound.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    pair,
    resolve_out,
)
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.memory.pool_global import bind_global_pool2d, combine
from opbench.kernels.tuning import Config


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
                acc = combine(acc, values.to(acc_dtype), IS_MAX)
    if not IS_MAX:
        acc = acc * (1.0 / (KERNEL_H * KERNEL_W))

    y_ptrs = y_plane + out_rows[:, None] * y_stride_h + out_cols[None, :] * y_stride_w
    mask = out_row_mask[:, None] & out_col_mask[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


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
        column_rows = combine(column_rows, tile.to(acc_dtype), IS_MAX)
        if PAD_W > 0:
            edge = tl.load(
                row_ptrs + left_col * x_stride_w,
                mask=tl.where(left_col >= 0, row_ok, False),
                other=fill,
            )
            left = combine(left, edge.to(acc_dtype), IS_MAX)
        if KERNEL_W - PAD_W > 2:
            edge = tl.load(
                row_ptrs + right_col * x_stride_w,
                mask=tl.where(right_col < width, row_ok, False),
                other=fill,
            )
            right = combine(right, edge.to(acc_dtype), IS_MAX)
    even, odd = tl.split(tl.reshape(column_rows, [BLOCK_H, BLOCK_W, 2]))

    j = tl.arange(0, BLOCK_W)[None, :] + tl.zeros([BLOCK_H, BLOCK_W], tl.int32)
    acc = tl.full([BLOCK_H, BLOCK_W], fill, acc_dtype)
    for kw in tl.static_range(KERNEL_W):
        if kw - PAD_W == -1:
            shifted = tl.gather(odd, tl.maximum(j - 1, 0), axis=1)
            acc = combine(acc, tl.where(j == 0, left[:, None], shifted), IS_MAX)
        elif kw - PAD_W == 0:
            acc = combine(acc, even, IS_MAX)
        elif kw - PAD_W == 1:
            acc = combine(acc, odd, IS_MAX)
        else:
            shifted = tl.gather(even, tl.minimum(j + 1, BLOCK_W - 1), axis=1)
            acc = combine(acc, tl.where(j == BLOCK_W - 1, right[:, None], shifted), IS_MAX)
    return acc


def _out_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """torch's pooled length: floored, or rounded up with the last window starting inside
    the input or its left padding (ceil_mode)."""
    span = size + 2 * pad - kernel
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pad else out


def pairable(kernel_w: int, stride_w: int, pad_w: int) -> bool:
    """The paired path covers column stride 2 with window offsets in [-1, 2]."""
    return stride_w == 2 and pad_w <= 1 and kernel_w - pad_w <= 3


def tile_configs(gpu: bool = not INTERPRET) -> list[Config]:
    """Output tiles of 256-4096 elements, 64 wide (most feature maps are <= 64 wide after
    pooling), in a plain and a paired version."""
    if not gpu:
        return [Config.of(BLOCK_H=4, BLOCK_W=8, PAIRED=True, num_warps=4)]
    shapes = [(4, 64, 4), (8, 64, 4), (16, 64, 4), (8, 64, 2), (32, 64, 8), (16, 128, 8)]
    return [Config.of(BLOCK_H=h, BLOCK_W=w, PAIRED=paired, num_warps=warps)
            for h, w, warps in shapes for paired in (False, True)]  # fmt: skip


def fit_tiles(
    configs: Sequence[Config], out_height: int, out_width: int, paired: bool
) -> list[Config]:
    """Narrow tiles to the output width, giving the spare elements to more rows; paired
    loads where `pairable` allows them (`paired`), plain loads elsewhere. Under the
    interpreter the one config is kept whatever its PAIRED, so tests can force either."""
    fitted: dict[tuple, Config] = {}
    max_w = max(next_power_of_2(out_width), 16)
    max_h = next_power_of_2(out_height)
    for config in configs:
        block_h, block_w = config["BLOCK_H"], config["BLOCK_W"]
        if config["PAIRED"] != paired and len(configs) > 1:
            continue
        if block_w > max_w:
            block_h, block_w = block_h * (block_w // max_w), max_w
        block_h = min(block_h, max_h)
        fitted.setdefault((block_h, block_w, config["PAIRED"], config.num_warps),
                          config.with_meta(BLOCK_H=block_h, BLOCK_W=block_w))  # fmt: skip
    return list(fitted.values())


def bind_pool2d(
    x: torch.Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int],
    padding: int | Sequence[int],
    out: torch.Tensor | None = None,
    *,
    is_max: bool,
    ceil_mode: bool = False,
    config: Config | None = None,
) -> BoundKernels:
    """max_pool2d (is_max) or avg_pool2d of NCHW x, bound to x; ceil_mode for max only."""

    op = "maxpool2d" if is_max else "avgpool2d"
    check_float(x, op)
    if x.dim() != 4:
        raise Unsupported(f"{op} expects NCHW input, got {x.dim()} dimensions")
    kernel_h, kernel_w = pair(kernel_size, "kernel_size")
    stride_h, stride_w = pair(stride, "stride")
    pad_h, pad_w = pair(padding, "padding")
    if min(kernel_h, kernel_w, stride_h, stride_w) < 1 or min(pad_h, pad_w) < 0:
        raise Unsupported(f"{op}: kernel and stride must be >= 1 and padding >= 0")
    if 2 * pad_h > kernel_h or 2 * pad_w > kernel_w:
        raise Unsupported(f"{op}: padding must be at most half the kernel size (as in torch)")
    if ceil_mode and not is_max:
        raise Unsupported("avgpool2d with ceil_mode: its last windows' divisor differs")
    batch, channels, height, width = x.shape
    out_height = _out_size(height, kernel_h, stride_h, pad_h, ceil_mode)
    out_width = _out_size(width, kernel_w, stride_w, pad_w, ceil_mode)
    if out_height < 1 or out_width < 1:
        raise Unsupported(f"{op}: a {kernel_h}x{kernel_w} window does not fit {height}x{width}")
    out = resolve_out(out, (batch, channels, out_height, out_width), x)
    if out.numel() == 0:
        return BoundKernels.of([], out)
    for tensor in (x, out):
        plane_span = sum((size - 1) * step
                         for size, step in zip(tensor.shape[2:], tensor.stride()[2:], strict=True))  # fmt: skip
        if plane_span > MAX_INT32_OFFSET:
            raise Unsupported(f"{op}: one plane spans more than 2**31 elements")
    if (kernel_h, kernel_w, pad_h, pad_w) == (height, width, 0, 0) and _flat_plane(x):
        return bind_global_pool2d(x, out, is_max=is_max, config=config)

    def grid(cfg: Config) -> tuple[int]:
        tiles = cdiv(out_height, cfg["BLOCK_H"]) * cdiv(out_width, cfg["BLOCK_W"])
        return (batch * channels * tiles,)

    named = dict(
        IS_MAX=is_max, KERNEL_H=kernel_h, KERNEL_W=kernel_w, STRIDE_H=stride_h,
        STRIDE_W=stride_w, PAD_H=pad_h, PAD_W=pad_w,
        X_ALIGN=alignment(*x.stride()[:3], width) if x.stride(3) == 1 else 1,
        Y_ALIGN=alignment(*out.stride()[:3], out_width) if out.stride(3) == 1 else 1,
    )  # fmt: skip
    args = (x, out, channels, height, width, out_height, out_width, *x.stride(), *out.stride())
    candidates = fit_tiles(tile_configs(), out_height, out_width,
                           pairable(kernel_w, stride_w, pad_w))  # fmt: skip
    key = f"{x.dtype}|{tuple(x.shape)}|{x.stride()}|{out.stride()}|" + ",".join(
        f"{k}={v}" for k, v in sorted(named.items()))  # fmt: skip
    call, choice = tuned_call(op, _pool2d_kernel, key, candidates, grid, args, named, x.device,
                              config)  # fmt: skip
    return BoundKernels.of([call], out, [choice])


def _one_shot(is_max: bool) -> Callable[..., torch.Tensor]:
    def pool2d(
        x: torch.Tensor,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int],
        padding: int | Sequence[int],
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return bind_pool2d(x, kernel_size, stride, padding, out, is_max=is_max).launch()

    name = "max" if is_max else "avg"
    pool2d.__doc__ = f"torch.nn.functional.{name}_pool2d(x, kernel_size, stride, padding), NCHW x."
    return pool2d


maxpool2d = _one_shot(is_max=True)
avgpool2d = _one_shot(is_max=False)


def _flat_plane(x: torch.Tensor) -> bool:
    """Whether H and W of x can be walked as one axis of stride x.stride(3)."""
    return x.shape[2] == 1 or x.shape[3] == 1 or x.stride(2) == x.shape[3] * x.stride(3)
