"""Sigmoid: y = 1 / (1 + exp(-x)), elementwise, computed in float32 and stored in x's dtype.

Bytes: 2 * numel * element_size (read once, written once), ~4 FLOPs per element: memory-bound.
A contiguous tensor is one flat array: each program handles BLOCK contiguous elements (wide
vector loads and stores), with the elementwise block sizes of activation.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.host import cdiv, check_float, resolve_out
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.memory.activation import block_configs
from opbench.kernels.tuning import Config


@triton.jit
def _sigmoid_kernel(
    x_ptr,  # contiguous input
    y_ptr,  # contiguous output, same dtype
    numel,  # number of elements
    BLOCK: tl.constexpr,  # elements per program
):
    # int64 start: tensors may hold more than 2**31 elements.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    # exp(-x) is inf for x < -88 in float32, and 1 / inf = 0: the right limit, no NaN.
    y = 1.0 / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def bind_sigmoid(
    x: torch.Tensor, out: torch.Tensor | None = None, config: Config | None = None
) -> BoundKernels:
    """sigmoid(x) for a contiguous float tensor, bound to x (and `out`, when given)."""
    check_float(x, "sigmoid")
    if not x.is_contiguous():
        raise Unsupported("sigmoid takes a contiguous input")
    out = resolve_out(out, x.shape, x)
    if not out.is_contiguous():
        raise Unsupported("sigmoid writes a contiguous output")
    numel = x.numel()
    if numel == 0:
        return BoundKernels.of([], out)
    call, choice = tuned_call(
        "sigmoid", _sigmoid_kernel, f"{x.dtype}|{numel}", block_configs(),
        lambda cfg: (cdiv(numel, cfg["BLOCK"]),), (x, out, numel), {}, x.device, config,
    )  # fmt: skip
    return BoundKernels.of([call], out, [choice])


def sigmoid(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """sigmoid(x), launched once."""
    return bind_sigmoid(x, out).launch()
