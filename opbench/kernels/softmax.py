"""Softmax over one dimension of a tensor of any rank and strides.

    m = max_j x[j];  y[j] = exp(x[j] - m) / sum_k exp(x[k] - m)         (fp32 inside)

Bytes: a row that fits in registers is read once and written once, 2 * numel * element_size
bytes; a row too long for one block is read twice (once for the running max and sum, once
to normalise), 3 * numel * element_size bytes. About 5 FLOPs per element: memory-bound.

Row layout. The softmax dimension is the *reduced* axis (length L). The other axes are
collapsed like in `transpose.py`; the one fastest in x becomes the *row* axis and the rest
(at most two) are *outer* axes indexed by the program id. One program owns a tile of
BLOCK_R rows x BLOCK_L elements of the reduced axis. For dim=-1 of a contiguous tensor the
rows are the tensor's rows and the tile is contiguous along L; for a middle dimension the
rows are neighbours in memory and the tile is contiguous along the rows, so loads stay
coalesced without transposing anything. `layernorm`/`rmsnorm` (norm.py) reuse this layout.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.transpose import cdiv, check_float, collapse_dims, next_power_of_2, resolve_out

# Rows up to this many elements are normalised from registers in one pass; longer rows
# are streamed in LOOP_BLOCK chunks (tests lower both to reach the looped path cheaply).
MAX_ONE_PASS_BLOCK = 8192
LOOP_BLOCK = 4096
# Largest tile (elements) one program holds in registers, in fp32.
MAX_TILE = 16384
LOG2E = 1.4426950408889634


# --------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------


@triton.jit
def _softmax_kernel(
    # pointers
    x_ptr,  # input
    y_ptr,  # output, same dtype
    # shapes
    size_o1,  # second outer axis (the first one's size is implied by the grid)
    size_r,  # row axis
    length,  # reduced axis, L
    # strides, in elements
    x_stride_o0,
    x_stride_o1,
    x_stride_r,
    x_stride_l,
    y_stride_o0,
    y_stride_o1,
    y_stride_r,
    y_stride_l,
    # meta-parameters
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_L: tl.constexpr,  # elements of the reduced axis per step
    ONE_PASS: tl.constexpr,  # BLOCK_L >= length: the whole row stays in registers
):
    pid = tl.program_id(0)
    blocks_r = tl.cdiv(size_r, BLOCK_R)
    outer = pid // blocks_r
    o0 = (outer // size_o1).to(tl.int64)
    o1 = (outer % size_o1).to(tl.int64)
    rows = (pid % blocks_r) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < size_r
    x_rows = x_ptr + o0 * x_stride_o0 + o1 * x_stride_o1 + rows[:, None] * x_stride_r
    y_rows = y_ptr + o0 * y_stride_o0 + o1 * y_stride_o1 + rows[:, None] * y_stride_r
    cols = tl.arange(0, BLOCK_L)

    if ONE_PASS:
        mask = row_mask[:, None] & (cols < length)[None, :]
        x = tl.load(
            x_rows + cols[None, :] * x_stride_l,
            mask=mask,
            other=-float("inf"),
        )
        x = x.to(tl.float32)
        # exp(v) = 2**(v * log2(e)); exp2 is the native instruction.
        shifted = (x - tl.max(x, axis=1)[:, None]) * 1.4426950408889634
        numerator = tl.exp2(shifted)
        y = numerator / tl.sum(numerator, axis=1)[:, None]
        y = y.to(y_ptr.dtype.element_ty)
        tl.store(y_rows + cols[None, :] * y_stride_l, y, mask=mask)
    else:
        # Online softmax: keep a running max m and the sum s of exp(x - m), rescaling s
        # whenever m grows, so the statistics need only one read of the row.
        row_max = tl.full([BLOCK_R], -float("inf"), tl.float32)
        row_sum = tl.zeros([BLOCK_R], tl.float32)
        for start in range(0, length, BLOCK_L):
            mask = row_mask[:, None] & (start + cols < length)[None, :]
            x = tl.load(
                x_rows + (start + cols)[None, :] * x_stride_l, mask=mask, other=-float("inf")
            ).to(tl.float32)
            new_max = tl.maximum(row_max, tl.max(x, axis=1))
            rescale = tl.exp2((row_max - new_max) * 1.4426950408889634)
            chunk = tl.exp2((x - new_max[:, None]) * 1.4426950408889634)
            row_sum = row_sum * rescale + tl.sum(chunk, axis=1)
            row_max = new_max
        inverse_sum = 1.0 / row_sum
        for start in range(0, length, BLOCK_L):
            mask = row_mask[:, None] & (start + cols < length)[None, :]
            x = tl.load(x_rows + (start + cols)[None, :] * x_stride_l, mask=mask).to(tl.float32)
            y = tl.exp2((x - row_max[:, None]) * 1.4426950408889634) * inverse_sum[:, None]
            tl.store(
                y_rows + (start + cols)[None, :] * y_stride_l,
                y.to(y_ptr.dtype.element_ty),
                mask=mask,
            )


# --------------------------------------------------------------------------------------
# Row layout and autotuning (shared with norm.py)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowLayout:
    """A tensor seen as outer0 x outer1 x rows x L, with the strides of x and y for each axis.

    sizes: (outer0, outer1, rows, L).
    x_strides / y_strides: element strides of the same four axes.
    """

    sizes: tuple[int, int, int, int]
    x_strides: tuple[int, int, int, int]
    y_strides: tuple[int, int, int, int]

    @property
    def kernel_args(self) -> tuple[int, ...]:
        """size_o1, size_r, length, then the x strides and the y strides."""
        return (*self.sizes[1:], *self.x_strides, *self.y_strides)

    def grid(self, meta: dict) -> tuple[int]:
        outer0, outer1, rows, _ = self.sizes
        return (outer0 * outer1 * cdiv(rows, meta["BLOCK_R"]),)


def row_layout(x: torch.Tensor, y: torch.Tensor, dim: int, op: str) -> RowLayout:
    """Split x and y (same shape) into outer axes, a row axis and the reduced axis `dim`."""
    return _row_layout(tuple(x.shape), x.stride(), y.stride(), dim, op)


@functools.lru_cache(maxsize=1024)
def _row_layout(
    shape: tuple[int, ...],
    x_strides: tuple[int, ...],
    y_strides: tuple[int, ...],
    dim: int,
    op: str,
) -> RowLayout:
    """Cached: layers call it with the same layout every time."""
    others = [a for a in range(len(shape)) if a != dim]
    sizes, (x_batch, y_batch) = collapse_dims(
        [shape[a] for a in others], [x_strides[a] for a in others], [y_strides[a] for a in others]
    )
    if len(sizes) > 3:
        raise Unsupported(f"{op}: {len(sizes)} non-mergeable batch axes (at most 3)")
    row = min(range(len(sizes)), key=lambda a: (x_batch[a], -a))
    outer = [a for a in range(len(sizes)) if a != row]
    axes = [None] * (2 - len(outer)) + outer + [row]
    layout = RowLayout(
        sizes=(*[1 if a is None else sizes[a] for a in axes], shape[dim]),
        x_strides=(*[0 if a is None else x_batch[a] for a in axes], x_strides[dim]),
        y_strides=(*[0 if a is None else y_batch[a] for a in axes], y_strides[dim]),
    )
    for strides in (layout.x_strides, layout.y_strides):
        span = (layout.sizes[2] - 1) * strides[2] + (layout.sizes[3] - 1) * strides[3]
        if span > 2**31 - 1:
            raise Unsupported(f"{op}: one tile spans more than 2**31 elements")
    return layout


def row_block(length: int) -> tuple[int, bool]:
    """BLOCK_L for a reduced axis of `length` elements, and whether one pass covers it."""
    if length <= MAX_ONE_PASS_BLOCK:
        return next_power_of_2(length), True
    return LOOP_BLOCK, False


def row_configs() -> list[triton.Config]:
    """Rows per program x warps; `fit_rows_to_shape` keeps the ones sized for the problem.
    (16 warps and evict-first loads/stores were measured too, on the H200: never faster.)"""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return [triton.Config({"BLOCK_R": 4}, num_warps=4)]
    return [
        triton.Config({"BLOCK_R": rows}, num_warps=warps)
        for rows in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        for warps in (2, 4, 8)
    ]


def fit_rows_to_shape(configs: list[triton.Config], named_args: dict, **kwargs) -> list:
    """Keep tiles that fit in registers, give each thread 8 to 32 fp32 values and are not
    mostly padding; for tiny problems keep the largest tile that fits."""
    block_l = kwargs["BLOCK_L"]
    max_rows = next_power_of_2(named_args["size_r"])
    target = min(1024, block_l * max_rows)
    fitting = [
        c
        for c in configs
        if c.kwargs["BLOCK_R"] <= max_rows and c.kwargs["BLOCK_R"] * block_l <= MAX_TILE
    ]
    kept = []
    for config in fitting:
        tile = config.kwargs["BLOCK_R"] * block_l
        if tile >= target and 8 <= tile // (32 * config.num_warps) <= 32:
            kept.append(config)
    if kept or not fitting:
        return kept or configs[:1]
    return [max(fitting, key=lambda c: (c.kwargs["BLOCK_R"], -c.num_warps))]


_softmax = triton.autotune(
    configs=row_configs(),
    key=["size_r", "length", "x_stride_r", "x_stride_l"],
    prune_configs_by={"early_config_prune": fit_rows_to_shape},
)(_softmax_kernel)


# --------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------


def softmax(x: torch.Tensor, dim: int = -1, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax of x along `dim` (negative dims count from the end), any input strides."""
    check_float(x, "softmax")
    if x.dim() == 0:
        raise Unsupported("softmax needs at least one dimension")
    dim = dim % x.dim()
    out = resolve_out(out, x.shape, x)
    if x.numel() == 0:
        return out
    layout = row_layout(x, out, dim, "softmax")
    block_l, one_pass = row_block(layout.sizes[3])
    _softmax[layout.grid](x, out, *layout.kernel_args, BLOCK_L=block_l, ONE_PASS=one_pass)
    return out
