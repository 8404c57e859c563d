"""Permute and transpose: move a tensor's axes and write the result contiguously.

    y = x.permute(dims).contiguous()        # transpose(x, a, b) swaps two axes

Bytes: every element is read once and written once, so the floor is
2 * numel * element_size bytes and the kernel should run at copy bandwidth. There are no FLOPs.

How the kernel sees a tensor. The launcher first describes the *output* axes with two stride
lists (where each output axis walks in x, and in y), drops size-1 axes and merges neighbours
that both tensors walk as one axis (NCHW -> NHWC becomes [N, H*W, C] with x strides
[C*H*W, 1, H*W]). At most four axes remain, and one program copies a 2-D tile spanned by
two of them:

* the inner axis (fastest in y), so that stores are coalesced;
* the tile axis: the axis fastest in x when that is not the inner axis (a transposing tile:
  loads are coalesced along the tile axis, stores along the inner axis, and the compiler
  swaps the tile through shared memory in between), or otherwise the next axis of y (a
  copy-like tile: both sides coalesced along the inner axis).

The two other axes are batch axes indexed by the program id. Both cases run the same
`@triton.jit` function, tuned over different tile shapes.

Alignment hints. Vector loads and stores need rows the compiler knows to be aligned, and
Triton only specialises integer arguments that are multiples of 16. ResNet's 14x14 stage moved
to NHWC is a [32, 196, 1024] map whose 196-element rows start 8-byte aligned, but without a
hint the loads fall back to 2 bytes. The launcher computes how many elements each side's
strides and extents are multiples of (X_ALIGN, Y_ALIGN) and the kernel rewrites them as
`v // A * A` (`multiple_of`), which the compiler does understand: 8-byte loads for 196.
Measured alternatives: docs/perf/memory_bound.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.device import multiple_of
from opbench.kernels.epilogue import apply_activation
from opbench.kernels.host import (
    INTERPRET,
    MAX_INT32_OFFSET,
    alignment,
    cdiv,
    check_float,
    collapse_dims,
    next_power_of_2,
    resolve_out,
)
from opbench.kernels.launch import BoundKernels, KernelCall, tuned_call
from opbench.kernels.tuning import Choice, Config


@triton.jit
def _permute_kernel(
    # pointers
    x_ptr,  # input, any strides
    y_ptr,  # output, same dtype
    # shapes (output axes, after collapsing; unused batch axes have size 1)
    size_b1,  # second batch axis (the first one's size is implied by the grid)
    size_t,  # tile axis
    size_i,  # inner axis
    # strides, in elements, of each output axis in x and in y
    x_stride_b0,
    x_stride_b1,
    x_stride_t,
    x_stride_i,
    y_stride_b0,
    y_stride_b1,
    y_stride_t,
    y_stride_i,
    # meta-parameters
    ACTIVATION: tl.constexpr,  # epilogue activation code (0: plain permute)
    TRANSPOSING: tl.constexpr,  # x is fastest along the tile axis (else along the inner axis)
    X_ALIGN: tl.constexpr,  # x's batch strides, the other tile stride, the x-fast extent: multiples
    Y_ALIGN: tl.constexpr,  # y's batch strides and tile stride, the inner extent: multiples
    BLOCK_T: tl.constexpr,  # tile rows (along the tile axis)
    BLOCK_I: tl.constexpr,  # tile columns (along the inner axis)
):
    # Alignment hints: the launcher checked that these values are multiples of X_ALIGN or
    # Y_ALIGN elements; `multiple_of` tells the compiler, so it can use vector loads/stores.
    x_stride_b0 = multiple_of(x_stride_b0, X_ALIGN)
    x_stride_b1 = multiple_of(x_stride_b1, X_ALIGN)
    y_stride_b0 = multiple_of(y_stride_b0, Y_ALIGN)
    y_stride_b1 = multiple_of(y_stride_b1, Y_ALIGN)
    y_stride_t = multiple_of(y_stride_t, Y_ALIGN)
    size_i = multiple_of(size_i, Y_ALIGN)
    if TRANSPOSING:  # loads run along the tile axis, stores along the inner axis
        x_stride_i = multiple_of(x_stride_i, X_ALIGN)
        size_t = multiple_of(size_t, X_ALIGN)
    else:  # loads and stores both run along the inner axis
        x_stride_t = multiple_of(x_stride_t, X_ALIGN)

    # One program per (batch0, batch1, tile row block, inner block); inner blocks vary fastest
    # so that neighbouring programs write neighbouring output.
    pid = tl.program_id(0)
    blocks_i = tl.cdiv(size_i, BLOCK_I)
    blocks_t = tl.cdiv(size_t, BLOCK_T)
    block_i = pid % blocks_i
    block_t = (pid // blocks_i) % blocks_t
    batch = pid // (blocks_i * blocks_t)
    # Batch offsets can exceed 2**31 elements on large tensors: compute them in int64.
    b1 = (batch % size_b1).to(tl.int64)
    b0 = (batch // size_b1).to(tl.int64)
    x_base = x_ptr + b0 * x_stride_b0 + b1 * x_stride_b1
    y_base = y_ptr + b0 * y_stride_b0 + b1 * y_stride_b1

    offs_t = block_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_i = block_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask = (offs_t < size_t)[:, None] & (offs_i < size_i)[None, :]
    # When x_stride_t == 1 the load is contiguous along rows and the store along columns;
    # the compiler sees this from the specialised strides and converts the tile's layout
    # (through shared memory) between the two, so both sides stay coalesced.
    tile = tl.load(x_base + offs_t[:, None] * x_stride_t + offs_i[None, :] * x_stride_i, mask=mask)
    if ACTIVATION != 0:
        tile = apply_activation(tile.to(tl.float32), ACTIVATION).to(y_ptr.dtype.element_ty)
    tl.store(y_base + offs_t[:, None] * y_stride_t + offs_i[None, :] * y_stride_i, tile, mask=mask)


# --------------------------------------------------------------------------------------
# Candidates
# --------------------------------------------------------------------------------------

TRANSPOSING_TILES = [(32, 32, 4), (64, 64, 4), (64, 64, 8), (128, 64, 8), (64, 128, 8),
                     (128, 128, 8)]  # fmt: skip
COPYING_TILES = [(1, 2048, 4), (2, 1024, 4), (4, 1024, 8), (8, 512, 4), (8, 1024, 8), (16, 256, 4)]


def tile_configs(copying: bool, gpu: bool = not INTERPRET) -> list[Config]:
    """Transposing tiles are square-ish (both the load rows and the store rows must be >= 64
    bytes); copying tiles are wide (only the inner axis matters for coalescing)."""
    if not gpu:
        t, i = (4, 32) if copying else (16, 16)
        return [Config.of(BLOCK_T=t, BLOCK_I=i, num_warps=4)]
    tiles = COPYING_TILES if copying else TRANSPOSING_TILES
    return [Config.of(BLOCK_T=t, BLOCK_I=i, num_warps=w) for t, i, w in tiles]


def fit_tiles(configs: Sequence[Config], size_t: int, size_i: int) -> list[Config]:
    """Shrink tiles to the axes they cover, moving the spare elements to the other axis."""
    fitted: dict[tuple[int, int, int], Config] = {}
    max_t, max_i = next_power_of_2(size_t), next_power_of_2(size_i)
    for config in configs:
        block_t, block_i = config["BLOCK_T"], config["BLOCK_I"]
        if block_i > max_i:
            block_t, block_i = block_t * (block_i // max_i), max_i
        if block_t > max_t:
            block_i, block_t = min(max_i, block_i * (block_t // max_t)), max_t
        fitted.setdefault((block_t, block_i, config.num_warps),
                          config.with_meta(BLOCK_T=block_t, BLOCK_I=block_i))  # fmt: skip
    return list(fitted.values())


# --------------------------------------------------------------------------------------
# Bind and launch
# --------------------------------------------------------------------------------------


def bind_strided_map(
    x: torch.Tensor, y: torch.Tensor, activation: int, config: Config | None = None
) -> tuple[KernelCall, Choice]:
    """y[...] = activation(x[...]) elementwise, x and y of one shape and any strides.

    Used by `permute` (with x a permuted view), by `activation` for strided inputs and by the
    conv's NHWC path.
    """
    plan = _strided_plan(tuple(y.shape), x.stride(), y.stride())
    size = plan.sizes

    def grid(cfg: Config) -> tuple[int]:
        tiles = cdiv(size[2], cfg["BLOCK_T"]) * cdiv(size[3], cfg["BLOCK_I"])
        return (size[0] * size[1] * tiles,)

    key = f"{x.dtype}|{'copy' if plan.copying else 'transpose'}|{size}|{plan.x_strides}|" \
          f"{plan.y_strides}|{plan.x_align},{plan.y_align}|act{activation}"  # fmt: skip
    candidates = fit_tiles(tile_configs(plan.copying), size[2], size[3])
    args = (x, y, *size[1:], *plan.x_strides, *plan.y_strides)
    named = dict(ACTIVATION=activation, TRANSPOSING=not plan.copying, X_ALIGN=plan.x_align,
                 Y_ALIGN=plan.y_align)  # fmt: skip
    return tuned_call("permute", _permute_kernel, key, candidates, grid, args, named, x.device,
                      config)  # fmt: skip


def bind_permute(
    x: torch.Tensor, dims: Sequence[int], out: torch.Tensor | None = None,
    config: Config | None = None,
) -> BoundKernels:  # fmt: skip
    """Contiguous `x.permute(dims)`, for any input strides, bound to x."""
    check_float(x, "permute")
    dims = _normalize_permutation(dims, x.dim())
    out = resolve_out(out, [x.shape[d] for d in dims], x)
    if x.numel() == 0:
        return BoundKernels.of([], out)
    view = x.permute(dims)
    call, choice = bind_strided_map(view, out, activation=0, config=config)
    return BoundKernels.of([call], out, [choice], keep=[view])


def permute(x: torch.Tensor, dims: Sequence[int], out: torch.Tensor | None = None) -> torch.Tensor:
    """Contiguous `x.permute(dims)`, for any input strides."""
    return bind_permute(x, dims, out).launch()


def transpose(
    x: torch.Tensor, dim0: int, dim1: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Contiguous `x.transpose(dim0, dim1)`."""
    dims = list(range(x.dim()))
    if x.dim() == 0:
        raise Unsupported("transpose needs at least one dimension")
    dim0, dim1 = dim0 % x.dim(), dim1 % x.dim()
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return permute(x, dims, out)


@dataclass(frozen=True)
class StridedPlan:
    """The kernel's view of a strided map: four output axes (batch0, batch1, tile, inner).

    copying: x is fastest along the inner axis too (else along the tile axis: transposing).
    sizes, x_strides, y_strides: per axis, in elements.
    x_align, y_align: powers of two (<= 16) that divide the values the kernel hints with
        X_ALIGN / Y_ALIGN (see `_permute_kernel`).
    """

    copying: bool
    sizes: tuple[int, int, int, int]
    x_strides: tuple[int, int, int, int]
    y_strides: tuple[int, int, int, int]
    x_align: int
    y_align: int


@functools.lru_cache(maxsize=1024)
def _strided_plan(
    shape: tuple[int, ...], x_strides: tuple[int, ...], y_strides: tuple[int, ...]
) -> StridedPlan:
    """The kernel's four axes and alignments."""
    sizes, (x_strides, y_strides) = collapse_dims(shape, x_strides, y_strides)
    if len(sizes) > 4:
        raise Unsupported(f"strided copy of {len(sizes)} non-mergeable axes (at most 4)")
    inner = min(range(len(sizes)), key=lambda a: (y_strides[a], -a))
    x_fastest = min(range(len(sizes)), key=lambda a: (x_strides[a], a != inner, -a))
    copying = len(sizes) == 1 or x_fastest == inner
    if copying:  # the tile axis is the next-fastest axis of y
        others = [a for a in range(len(sizes)) if a != inner]
        tile = min(others, key=lambda a: (y_strides[a], -a)) if others else None
    else:
        tile = x_fastest
    batch = sorted(
        (a for a in range(len(sizes)) if a not in (inner, tile)), key=lambda a: -y_strides[a]
    )
    axes = [None] * (2 - len(batch)) + batch + [tile, inner]

    def pick(values: list[int], axis: int | None, empty: int) -> int:
        return empty if axis is None else values[axis]

    size = tuple(pick(sizes, a, 1) for a in axes)
    xs = tuple(pick(x_strides, a, 0) for a in axes)
    ys = tuple(pick(y_strides, a, 0) for a in axes)
    for strides in (xs, ys):
        if (size[2] - 1) * strides[2] + (size[3] - 1) * strides[3] > MAX_INT32_OFFSET:
            raise Unsupported("one permute tile spans more than 2**31 elements")
    # What the kernel hints (mirrors the top of `_permute_kernel`): x's batch strides, plus
    # the tile-axis extent and inner stride (transposing) or the tile stride (copying); y's
    # batch strides, tile stride and inner extent.
    if copying:
        x_align = alignment(xs[0], xs[1], xs[2])
    else:
        x_align = alignment(xs[0], xs[1], xs[3], size[2])
    y_align = alignment(ys[0], ys[1], ys[2], size[3])
    return StridedPlan(copying, size, xs, ys, x_align, y_align)


def _normalize_permutation(dims: Sequence[int], ndim: int) -> list[int]:
    normalized = [d % ndim if ndim else d for d in dims]
    if sorted(normalized) != list(range(ndim)):
        raise ValueError(f"dims {list(dims)} is not a permutation of {ndim} axes")
    return normalized
