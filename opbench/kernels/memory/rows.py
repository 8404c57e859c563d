"""The row layout shared by softmax and the norms: a tensor seen as outer0 x outer1 x rows x L.

The reduced dimension (length L) is one axis. The other axes are collapsed like in
`transpose.py`; the one fastest in x becomes the *row* axis and the rest (at most two) are
*outer* axes indexed by the program id. One program owns a tile of BLOCK_R rows x BLOCK_L
elements of the reduced axis. For dim=-1 of a contiguous tensor the rows are the tensor's
rows and the tile is contiguous along L; for a middle dimension the rows are neighbours in
memory and the tile is contiguous along the rows, so loads stay coalesced without
transposing anything.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.host import INTERPRET, cdiv, collapse_dims, next_power_of_2
from opbench.kernels.tuning import Config

# Rows up to this many elements are normalised from registers in one pass; longer rows
# are streamed in LOOP_BLOCK chunks (tests lower both to reach the looped path cheaply).
MAX_ONE_PASS_BLOCK = 8192
LOOP_BLOCK = 4096
# Largest tile (elements) one program holds in registers, in fp32.
MAX_TILE = 16384


@dataclass(frozen=True)
class RowLayout:
    """sizes: (outer0, outer1, rows, L); x_strides / y_strides: element strides of the same
    four axes."""

    sizes: tuple[int, int, int, int]
    x_strides: tuple[int, int, int, int]
    y_strides: tuple[int, int, int, int]

    @property
    def kernel_args(self) -> tuple[int, ...]:
        """size_o1, size_r, length, then the x strides and the y strides."""
        return (*self.sizes[1:], *self.x_strides, *self.y_strides)

    def grid(self, config: Config) -> tuple[int]:
        outer0, outer1, rows, _ = self.sizes
        return (outer0 * outer1 * cdiv(rows, config["BLOCK_R"]),)

    def key(self) -> str:
        return f"{self.sizes}|{self.x_strides}|{self.y_strides}"


@triton.jit
def row_tile(
    x_ptr, y_ptr, size_o1, size_r, x_stride_o0, x_stride_o1, x_stride_r, y_stride_o0,
    y_stride_o1, y_stride_r, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr,
):  # fmt: skip
    """This program's BLOCK_R rows: pointers to their starts in x and y, which rows exist, and
    the column offsets of one BLOCK_L step (outer axes from the program id, rows fastest)."""
    pid = tl.program_id(0)
    blocks_r = tl.cdiv(size_r, BLOCK_R)
    outer = pid // blocks_r
    o0 = (outer // size_o1).to(tl.int64)
    o1 = (outer % size_o1).to(tl.int64)
    rows = (pid % blocks_r) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < size_r
    x_rows = x_ptr + o0 * x_stride_o0 + o1 * x_stride_o1 + rows[:, None] * x_stride_r
    y_rows = y_ptr + o0 * y_stride_o0 + o1 * y_stride_o1 + rows[:, None] * y_stride_r
    return x_rows, y_rows, row_mask, tl.arange(0, BLOCK_L)


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


def row_configs(gpu: bool = not INTERPRET) -> list[Config]:
    """Rows per program x warps; `fit_rows_to_shape` keeps the ones sized for the problem.
    (Other shapes that never won: docs/perf/memory_bound.md.)"""
    if not gpu:
        return [Config.of(BLOCK_R=4, num_warps=4)]
    return [
        Config.of(BLOCK_R=rows, num_warps=warps)
        for rows in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        for warps in (2, 4, 8)
    ]


def fit_rows_to_shape(configs: Sequence[Config], size_r: int, block_l: int) -> list[Config]:
    """Keep tiles that fit in registers, give each thread 8 to 32 fp32 values and are not
    mostly padding; for tiny problems keep the largest tile that fits."""
    max_rows = next_power_of_2(size_r)
    target = min(1024, block_l * max_rows)
    fitting = [
        c for c in configs if c["BLOCK_R"] <= max_rows and c["BLOCK_R"] * block_l <= MAX_TILE
    ]
    kept = []
    for config in fitting:
        tile = config["BLOCK_R"] * block_l
        if tile >= target and 8 <= tile // (32 * config.num_warps) <= 32:
            kept.append(config)
    if kept or not fitting:
        return kept or list(configs[:1])
    return [max(fitting, key=lambda c: (c["BLOCK_R"], -c.num_warps))]
