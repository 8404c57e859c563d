"""add and mul of two tensors, the second broadcast onto the first (NumPy's rules).

    out = a + b   or   out = a * b        # out has a's shape; b may be smaller

Computed in float32, stored in a's dtype (as torch does for fp16/bf16).

Bytes: (numel(a) + numel(b) + numel(out)) * element_size: a read once, b read once from DRAM
(a broadcast b is small and stays in L1/L2), out written once. One FLOP per element:
memory-bound, so the kernel is a wide contiguous stream over a and out.

How the kernel sees the tensors. a and out are contiguous and share a's shape; b is seen at
a's shape with stride 0 along the axes it broadcasts over (what `b.expand(a.shape)` would
give). The launcher drops size-1 axes and merges neighbours that a and b both walk as one
(host.collapse_dims):

    residual add, [B, C, H, W] + [B, C, H, W]     -> one flat axis
    per-channel,  [B, C, H, W] + [1, C, 1, 1]     -> [B, C, H*W], b strides [0, 1, 0]
    SE gate,      [B, C, H, W] * [B, C, 1, 1]     -> [B*C, H*W],  b strides [1, 0]
    per-row,      [B, S, E]    * [B, S, 1]        -> [B*S, E],    b strides [1, 0]
    RoPE table,   [B, S, H, D] * [1, S, 1, D]     -> [B, S, H, D], b strides [0, D, 0, 1]

At most four axes remain: outer0 and outer1 (from the program id), then rows and inner, a
2-D tile per program with inner fastest (contiguous in a and out: coalesced, vectorised).
b is read once per tile along what it varies with, never once per output element: B_ROWS and
B_INNER (constexpr) say whether b varies along rows / inner, and the tile loads a
[BLOCK_R] column of b (a per-channel or per-row operand), a [BLOCK_I] row, a full tile, or
one scalar, and broadcasts it in registers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.device import multiple_of
from opbench.kernels.host import alignment, cdiv, check_float, collapse_dims, resolve_out
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.memory.transpose import fit_tiles, tile_configs
from opbench.kernels.tuning import Config

OPS = {"add": 0, "mul": 1}


@triton.jit
def _binary_kernel(
    # pointers
    a_ptr,  # first input, contiguous
    b_ptr,  # second input, any strides (0 along the axes it broadcasts over)
    out_ptr,  # output, contiguous, a's shape and dtype
    # shapes (after collapsing; unused outer axes have size 1)
    size_o1,  # second outer axis (the first one's size is implied by the grid)
    size_r,  # rows
    size_i,  # inner axis (fastest in a and out)
    # strides, in elements: a and out share theirs (inner stride 1); b's are 0 on broadcast axes
    stride_o0,
    stride_o1,
    stride_r,
    b_stride_o0,
    b_stride_o1,
    b_stride_r,
    b_stride_i,
    # meta-parameters
    OP: tl.constexpr,  # 0: add, 1: mul
    B_ROWS: tl.constexpr,  # b varies along the rows
    B_INNER: tl.constexpr,  # b varies along the inner axis
    ALIGN: tl.constexpr,  # a/out strides and the inner size are multiples of this
    B_ALIGN: tl.constexpr,  # b's outer and row strides are multiples of this
    BLOCK_R: tl.constexpr,  # tile rows
    BLOCK_I: tl.constexpr,  # tile columns (inner axis)
):
    # Alignment hints (the launcher checked them): vector loads and stores for a and out.
    stride_o0 = multiple_of(stride_o0, ALIGN)
    stride_o1 = multiple_of(stride_o1, ALIGN)
    stride_r = multiple_of(stride_r, ALIGN)
    size_i = multiple_of(size_i, ALIGN)
    b_stride_o0 = multiple_of(b_stride_o0, B_ALIGN)
    b_stride_o1 = multiple_of(b_stride_o1, B_ALIGN)
    b_stride_r = multiple_of(b_stride_r, B_ALIGN)

    # One program per (outer0, outer1, row block, inner block); inner blocks vary fastest so
    # neighbouring programs stream neighbouring memory.
    pid = tl.program_id(0)
    blocks_i = tl.cdiv(size_i, BLOCK_I)
    blocks_r = tl.cdiv(size_r, BLOCK_R)
    block_i = pid % blocks_i
    block_r = (pid // blocks_i) % blocks_r
    outer = pid // (blocks_i * blocks_r)
    # int64 offsets: a tensor may hold more than 2**31 elements (one flat axis included).
    o1 = (outer % size_o1).to(tl.int64)
    o0 = (outer // size_o1).to(tl.int64)
    rows = block_r.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = block_i.to(tl.int64) * BLOCK_I + tl.arange(0, BLOCK_I)
    row_mask = rows < size_r
    col_mask = cols < size_i
    mask = row_mask[:, None] & col_mask[None, :]

    offsets = o0 * stride_o0 + o1 * stride_o1 + rows[:, None] * stride_r + cols[None, :]
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)

    # b: only what it varies along, once per tile.
    b_base = b_ptr + o0 * b_stride_o0 + o1 * b_stride_o1
    if B_ROWS and B_INNER:
        b_offsets = rows[:, None] * b_stride_r + cols[None, :] * b_stride_i
        b = tl.load(b_base + b_offsets, mask=mask).to(tl.float32)
    elif B_ROWS:  # a per-row / per-channel operand: one value per row
        b = tl.load(b_base + rows * b_stride_r, mask=row_mask).to(tl.float32)
        b = b[:, None]
    elif B_INNER:  # one row of b shared by every row of the tile
        b = tl.load(b_base + cols * b_stride_i, mask=col_mask).to(tl.float32)
        b = b[None, :]
    else:  # one value for the whole tile
        b = tl.load(b_base).to(tl.float32)

    if OP == 0:
        y = a + b
    else:
        y = a * b
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class BroadcastPlan:
    """The kernel's four axes (outer0, outer1, rows, inner) and the strides of a and of b on
    them, in elements; align, b_align: the alignment hints ALIGN and B_ALIGN."""

    sizes: tuple[int, int, int, int]
    strides: tuple[int, int, int]
    b_strides: tuple[int, int, int, int]
    align: int
    b_align: int

    def key(self) -> str:
        return f"{self.sizes}|{self.strides}|{self.b_strides}|{self.align},{self.b_align}"


@functools.lru_cache(maxsize=1024)
def broadcast_plan(
    shape: tuple[int, ...], strides: tuple[int, ...], b_strides: tuple[int, ...]
) -> BroadcastPlan:
    """Collapse a's shape with a's strides and b's (broadcast) strides to at most four axes."""
    sizes, (a_s, b_s) = collapse_dims(shape, strides, b_strides)
    if len(sizes) > 4:
        raise Unsupported(
            f"broadcast over {len(sizes)} axes that do not merge (at most 4): {list(shape)}"
        )
    pad = 4 - len(sizes)
    sizes = [1] * pad + sizes
    a_s, b_s = [0] * pad + a_s, [0] * pad + b_s
    if a_s[3] != 1 and sizes[3] > 1:  # a contiguous: its collapsed inner axis has stride 1
        raise Unsupported("the first input must be contiguous")
    align = alignment(a_s[0], a_s[1], a_s[2], sizes[3])
    b_align = alignment(b_s[0], b_s[1], b_s[2])
    return BroadcastPlan(tuple(sizes), (a_s[0], a_s[1], a_s[2]), tuple(b_s), align, b_align)


def bind_binary(
    a: torch.Tensor, b: torch.Tensor, op: str, out: torch.Tensor | None = None,
    config: Config | None = None,
) -> BoundKernels:  # fmt: skip
    """`a op b` (op: add | mul) with b broadcast onto a, bound to a, b (and out)."""
    if op not in OPS:
        raise Unsupported(f"unknown binary op {op!r} ({', '.join(OPS)})")
    check_float(a, op)
    if b.dtype != a.dtype:
        raise Unsupported(f"{op} takes inputs of one dtype, got {a.dtype} and {b.dtype}")
    if b.device != a.device:
        raise ValueError(f"{op}: inputs on {a.device} and {b.device}")
    try:
        b_view = b.expand(a.shape)  # stride 0 along broadcast axes; raises if b does not fit
    except RuntimeError:
        raise ValueError(
            f"{op}: {list(b.shape)} does not broadcast onto {list(a.shape)} with its shape kept"
        ) from None
    if not a.is_contiguous():
        raise Unsupported(f"{op} takes a contiguous first input")
    out = resolve_out(out, a.shape, a)
    if not out.is_contiguous():
        raise Unsupported(f"{op} writes a contiguous output")
    if a.numel() == 0:
        return BoundKernels.of([], out)
    plan = broadcast_plan(tuple(a.shape), a.stride(), b_view.stride())
    size = plan.sizes
    b_rows, b_inner = plan.b_strides[2] != 0, plan.b_strides[3] != 0

    def grid(cfg: Config) -> tuple[int]:
        tiles = cdiv(size[2], cfg["BLOCK_R"]) * cdiv(size[3], cfg["BLOCK_I"])
        return (size[0] * size[1] * tiles,)

    # The copy-like tiles of transpose.py (wide along the inner axis), fitted to the two axes;
    # its BLOCK_T is this kernel's BLOCK_R.
    candidates = [
        Config.of(BLOCK_R=c["BLOCK_T"], BLOCK_I=c["BLOCK_I"], num_warps=c.num_warps,
                  num_stages=c.num_stages)
        for c in fit_tiles(tile_configs(copying=True), size[2], size[3])
    ]  # fmt: skip
    args = (a, b, out, size[1], size[2], size[3], *plan.strides, *plan.b_strides)
    named = dict(OP=OPS[op], B_ROWS=b_rows, B_INNER=b_inner, ALIGN=plan.align,
                 B_ALIGN=plan.b_align)  # fmt: skip
    call, choice = tuned_call(
        op, _binary_kernel, f"{a.dtype}|{plan.key()}", candidates, grid, args, named,
        a.device, config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice], keep=[b_view])


def bind_add(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, config: Config | None = None
) -> BoundKernels:
    """a + b, b broadcast onto a."""
    return bind_binary(a, b, "add", out, config)


def bind_mul(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, config: Config | None = None
) -> BoundKernels:
    """a * b, b broadcast onto a."""
    return bind_binary(a, b, "mul", out, config)


def add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return bind_add(a, b, out).launch()


def mul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return bind_mul(a, b, out).launch()
