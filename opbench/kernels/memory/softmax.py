"""Softmax over one dimension of a tensor of any rank and strides.

    m = max_j x[j];  y[j] = exp(x[j] - m) / sum_k exp(x[k] - m)         (fp32 inside)

Bytes: a row that fits in registers is read once and written once, 2 * numel * element_size
bytes; a row too long for one block is read twice (once for the running max and sum, once
to normalise), 3 * numel * element_size bytes. About 5 FLOPs per element: memory-bound.

Rows are laid out by `rows.py` (shared with the norms): the softmax dimension is the reduced
axis, the other axes are collapsed into rows and outer axes, so any dim of any strides
keeps its loads coalesced without a transpose.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.host import check_float, resolve_out
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.memory import rows
from opbench.kernels.memory.rows import row_tile
from opbench.kernels.tuning import Config


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
    x_rows, y_rows, row_mask, cols = row_tile(
        x_ptr, y_ptr, size_o1, size_r, x_stride_o0, x_stride_o1, x_stride_r, y_stride_o0,
        y_stride_o1, y_stride_r, BLOCK_R, BLOCK_L,
    )  # fmt: skip

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


def bind_softmax(
    x: torch.Tensor, dim: int = -1, out: torch.Tensor | None = None, config: Config | None = None
) -> BoundKernels:
    """Softmax of x along `dim` (negative dims count from the end), any strides; bound to x."""
    check_float(x, "softmax")
    if x.dim() == 0:
        raise Unsupported("softmax needs at least one dimension")
    dim = dim % x.dim()
    out = resolve_out(out, x.shape, x)
    if x.numel() == 0:
        return BoundKernels.of([], out)
    layout = rows.row_layout(x, out, dim, "softmax")
    block_l, one_pass = rows.row_block(layout.sizes[3])
    candidates = rows.fit_rows_to_shape(rows.row_configs(), layout.sizes[2], block_l)
    call, choice = tuned_call(
        "softmax", _softmax_kernel, f"{x.dtype}|{layout.key()}", candidates, layout.grid,
        (x, out, *layout.kernel_args), {"BLOCK_L": block_l, "ONE_PASS": one_pass}, x.device,
        config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice])


def softmax(x: torch.Tensor, dim: int = -1, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax of x along `dim` (negative dims count from the end), any input strides."""
    return bind_softmax(x, dim, out).launch()
