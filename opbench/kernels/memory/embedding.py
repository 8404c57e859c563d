"""Embedding: out[r, :] = weight[ids[r], :] for every id r (a gather of table rows), or
weight[offset + r mod S, :] for a position embedding (no ids read).

Bytes: ids 8 per row + 2 x rows x E x element size (each named row read once per id that
names it, each output row written once); no FLOPs: memory-bound. One program copies
BLOCK_R rows x BLOCK_E columns: wide contiguous loads and stores along E.

Ids outside [0, num_embeddings) read zeros instead of memory outside the table (the torch
baseline raises; the suites draw ids in range, so the two never meet).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.host import INTERPRET, cdiv, check_float, next_power_of_2
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.tuning import Config


@triton.jit
def _embedding_kernel(
    # pointers
    ids_ptr,  # [R] int32/int64 ids, contiguous (unused with POSITIONS)
    w_ptr,  # [V, E] table, rows `stride_w` apart, unit column stride
    out_ptr,  # [R, E] output, contiguous
    # shapes
    n_rows,  # R = every id of every sequence
    seq,  # S: positions restart every S rows (POSITIONS)
    vocab,  # V
    dim,  # E
    offset,  # the first position (POSITIONS)
    # strides (elements)
    stride_w,
    # meta-parameters
    POSITIONS: tl.constexpr,  # rows offset + r mod S instead of ids
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_E: tl.constexpr,  # columns per program
):
    """Grid (cdiv(R, BLOCK_R), cdiv(E, BLOCK_E))."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    row_ok = rows < n_rows
    if POSITIONS:
        idx = (rows % seq + offset).to(tl.int64)
    else:
        idx = tl.load(ids_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    inside = row_ok & (idx >= 0) & (idx < vocab)
    col_ok = cols < dim
    vals = tl.load(
        w_ptr + idx[:, None] * stride_w + cols[None, :],
        mask=inside[:, None] & col_ok[None, :],
        other=0.0,
    )
    dst = out_ptr + rows[:, None].to(tl.int64) * dim + cols[None, :]
    tl.store(dst, vals.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _configs(dim: int) -> list[Config]:
    """Row tiles of up to 8K elements; E split only when wider than 2K."""
    block_e = min(next_power_of_2(dim), 2048)
    if INTERPRET:
        return [Config.of(BLOCK_R=4, BLOCK_E=block_e, num_warps=4)]
    return [
        Config.of(BLOCK_R=r, BLOCK_E=block_e, num_warps=w)
        for r, w in ((1, 4), (2, 4), (4, 4), (4, 8), (8, 8))
        if r * block_e <= 8192
    ] or [Config.of(BLOCK_R=1, BLOCK_E=block_e, num_warps=4)]


def bind_embedding(
    ids: torch.Tensor,
    weight: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    positions: bool = False,
    offset: int = 0,
    config: Config | None = None,
) -> BoundKernels:
    """weight[ids] ([*ids.shape, E] in weight's dtype), or with `positions` the rows offset ..
    offset + S - 1 (S = ids.shape[-1]) for every sequence; bound to ids and `out`."""
    check_float(weight, "embedding")
    if weight.dim() != 2 or weight.stride(1) != 1:
        raise Unsupported("embedding needs a [V, E] table with contiguous rows")
    if not positions and (ids.dtype not in (torch.int32, torch.int64) or not ids.is_contiguous()):
        raise Unsupported(f"embedding needs contiguous int32/int64 ids, got {ids.dtype}")
    vocab, dim = weight.shape
    shape = (*ids.shape, dim)
    if out is None:
        out = torch.empty(shape, dtype=weight.dtype, device=weight.device)
    elif tuple(out.shape) != shape or out.dtype != weight.dtype or not out.is_contiguous():
        raise ValueError(f"out must be contiguous {shape} {weight.dtype}")
    n_rows = ids.numel()
    if n_rows == 0:
        return BoundKernels.of([], out)
    seq = ids.shape[-1] if ids.dim() else 1
    if positions and offset + seq > vocab:
        raise Unsupported(f"positions {offset}..{offset + seq - 1} run past {vocab} rows")
    call, choice = tuned_call(
        "embedding", _embedding_kernel, f"{weight.dtype}|{n_rows}|{dim}|pos{positions}",
        _configs(dim), lambda cfg: (cdiv(n_rows, cfg["BLOCK_R"]), cdiv(dim, cfg["BLOCK_E"])),
        (ids, weight, out, n_rows, seq, vocab, dim, offset, weight.stride(0)),
        {"POSITIONS": positions}, weight.device, config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice], keep=[ids])


def embedding(ids: torch.Tensor, weight: torch.Tensor, **kwargs) -> torch.Tensor:
    """weight[ids], launched once."""
    return bind_embedding(ids, weight, **kwargs).launch()
