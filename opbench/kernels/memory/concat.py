"""concat: two or more tensors joined along one axis, in one launch.

    out = torch.cat([x0, x1, ...], dim=axis)

Bytes: 2 * numel(out) * element_size (every input read once, the output written once); no
FLOPs. A copy, so the kernel should run at copy bandwidth.

How the kernel sees it. Around the axis, every contiguous input k is [outer, L_k] with
L_k = size_k * inner (inner: the product of the axes after `axis`), and the output is
[outer, T] with T = sum L_k: row o of input k is one contiguous run that lands at column
C_k = sum_{j<k} L_j of the output's row o. (NCHW along channels: outer = N, L_k = C_k*H*W;
[B, S, E] along the last axis: outer = B*S, L_k = E_k.)

One launch writes every piece. The grid is the pieces' programs one after another: program
p belongs to the piece whose programs' range holds p (a constexpr-unrolled scan over the
NUM_INPUTS pieces: a few scalar divisions and compares per program), and copies one [BLOCK_R, BLOCK_C] tile of that
piece: BLOCK_R rows of BLOCK_C contiguous elements, loaded from x_k and stored into out at
column C_k. Each program touches one input only, so every load and store is a plain
contiguous vector access, aligned where L_k, C_k and T allow (ALIGN). One launch instead of
one per input: an Inception block's four-way concat costs one launch (a few microseconds
each on the GPU) and the pieces' tiles run concurrently.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.device import multiple_of
from opbench.kernels.host import INTERPRET, alignment, cdiv, next_power_of_2, resolve_out
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.tuning import Config

# The kernel is unrolled over its inputs; beyond this many, a launch's code grows too long.
MAX_INPUTS = 64


@triton.jit
def _concat_kernel(
    # pointers
    x_ptrs,  # tuple of NUM_INPUTS contiguous inputs, out's dtype
    out_ptr,  # contiguous output [outer, total]
    # shapes
    outer,  # rows (the product of the axes before the concat axis)
    total,  # the output's row length T
    lengths,  # tuple: each input's row length L_k
    columns,  # tuple: the output column C_k where each input's row lands
    # meta-parameters
    NUM_INPUTS: tl.constexpr,
    ALIGN: tl.constexpr,  # every L_k, C_k and T is a multiple of this
    BLOCK_R: tl.constexpr,  # rows per tile
    BLOCK_C: tl.constexpr,  # contiguous elements per tile row
):
    pid = tl.program_id(0)
    total = multiple_of(total, ALIGN)
    blocks_r = tl.cdiv(outer, BLOCK_R)
    first = 0  # the first program of piece k
    for k in tl.static_range(NUM_INPUTS):
        length = multiple_of(lengths[k], ALIGN)
        blocks_c = tl.cdiv(length, BLOCK_C)
        if (pid >= first) & (pid < first + blocks_r * blocks_c):
            column = multiple_of(columns[k], ALIGN)  # added to int64 cols below
            local = pid - first
            # int64: a row offset, and even one row, can pass 2**31 elements.
            rows = (local // blocks_c).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
            cols = (local % blocks_c).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
            mask = (rows < outer)[:, None] & (cols < length)[None, :]
            tile = tl.load(x_ptrs[k] + rows[:, None] * length + cols[None, :], mask=mask)
            tl.store(out_ptr + rows[:, None] * total + (column + cols)[None, :], tile, mask=mask)
        first += blocks_r * blocks_c


def block_configs(gpu: bool = not INTERPRET) -> list[Config]:
    """Tiles of 1K-8K elements per program (8 to 32 per thread), as the elementwise kernels;
    how they split into rows and columns follows the pieces (`_tile_shape`)."""
    if not gpu:
        return [Config.of(BLOCK=128, num_warps=4)]
    return [Config.of(BLOCK=b, num_warps=w) for b, w in [(1024, 4), (2048, 4), (4096, 8),
                                                           (8192, 8)]]  # fmt: skip


def _tile_shape(block: int, lengths: Sequence[int]) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_C): rows as long as the longest piece row (up to the block), and as
    many rows as fill the block: short rows (a concat along the last axis) still make wide
    tiles."""
    block_c = min(block, next_power_of_2(max(lengths)))
    return block // block_c, block_c


def bind_concat(
    xs: Sequence[torch.Tensor], axis: int, out: torch.Tensor | None = None,
    config: Config | None = None,
) -> BoundKernels:  # fmt: skip
    """torch.cat(xs, axis) for two or more contiguous tensors of one dtype, in one launch."""
    xs = tuple(xs)
    if len(xs) < 1:
        raise ValueError("concat takes at least one input")
    if len(xs) > MAX_INPUTS:
        raise Unsupported(f"concat of {len(xs)} inputs (at most {MAX_INPUTS} in one launch)")
    first = xs[0]
    ndim = first.dim()
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim}-d inputs")
    axis %= ndim
    for x in xs:
        if x.dtype != first.dtype or x.device != first.device:
            raise Unsupported(f"concat takes inputs of one dtype and device, got {x.dtype} "
                              f"on {x.device} and {first.dtype} on {first.device}")  # fmt: skip
        if x.dim() != ndim or any(x.shape[d] != first.shape[d] for d in range(ndim) if d != axis):
            raise ValueError(
                f"concat along {axis}: {list(x.shape)} and {list(first.shape)} differ elsewhere"
            )
        if not x.is_contiguous():
            raise Unsupported("concat takes contiguous inputs")
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = resolve_out(out, shape, first)
    if not out.is_contiguous():
        raise Unsupported("concat writes a contiguous output")
    outer = 1
    for d in shape[:axis]:
        outer *= d
    inner = 1
    for d in shape[axis + 1 :]:
        inner *= d
    pieces = [x for x in xs if x.numel() > 0]  # an empty piece has nothing to copy
    if out.numel() == 0 or not pieces:
        return BoundKernels.of([], out)
    lengths = [x.shape[axis] * inner for x in pieces]
    columns, column = [], 0
    for x in xs:
        if x.numel() > 0:
            columns.append(column)
        column += x.shape[axis] * inner
    total = shape[axis] * inner
    align = alignment(total, *lengths, *columns)

    def with_tile(cfg: Config) -> Config:
        block_r, block_c = _tile_shape(cfg["BLOCK"], lengths)
        return cfg.with_meta(BLOCK_R=block_r, BLOCK_C=block_c)

    candidates = [with_tile(cfg) for cfg in block_configs()]
    if config is not None and "BLOCK_R" not in config.kwargs:
        config = with_tile(config)

    def grid(cfg: Config) -> tuple[int]:
        block_r, block_c = cfg["BLOCK_R"], cfg["BLOCK_C"]
        return (sum(cdiv(outer, block_r) * cdiv(length, block_c) for length in lengths),)

    key = f"{first.dtype}|{outer}|{tuple(lengths)}|{align}"
    args = (tuple(pieces), out, outer, total, tuple(lengths), tuple(columns))
    call, choice = tuned_call(
        "concat", _concat_kernel, key, candidates, grid, args,
        {"NUM_INPUTS": len(pieces), "ALIGN": align}, first.device, config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice])


def concat(xs: Sequence[torch.Tensor], axis: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.cat(xs, axis), in one launch."""
    return bind_concat(xs, axis, out).launch()
