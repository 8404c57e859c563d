"""slice and split: one piece of a tensor along one axis, copied into a contiguous output.

    out = x[..., start:end:step, ...].contiguous()          # slice along `axis`
    out = torch.split(x, sizes, axis)[index].contiguous()    # split: a slice with step 1

Bytes: 2 * numel(out) * element_size (the piece read once, written once); no FLOPs.

When the piece is already contiguous in x (every axis before `axis` has size 1 and the step
is 1, or the piece is the whole axis) no bytes need to move: the backend then uses the view
and runs nothing (`ops/slicing.py` decides, from the layer's shapes). Otherwise the piece is a
strided view of x, and copying it is the strided copy of transpose.py (`bind_strided_map`):
the view's axes collapse to [outer, length * inner] for step 1 (rows of length * inner
contiguous elements, `outer` rows apart: a copy-like tile, coalesced on both sides) or to
[outer, length, inner] with a stride of step * inner, and the kernel streams them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from opbench.kernels import Unsupported
from opbench.kernels.host import check_float, resolve_out
from opbench.kernels.launch import BoundKernels
from opbench.kernels.memory.transpose import bind_strided_map
from opbench.kernels.tuning import Config


def slice_view(x: torch.Tensor, axis: int, start: int, end: int | None, step: int = 1):
    """x's elements start:end:step (Python's rules) of `axis`, as a view (nothing copied)."""
    if step < 1:
        raise Unsupported(f"slice step {step}: only positive steps")
    if not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis {axis} is out of range for a {x.dim()}-d tensor")
    axis %= x.dim()
    return x[(slice(None),) * axis + (slice(start, end, step),)]


def split_bounds(size: int, sizes: Sequence[int], index: int) -> tuple[int, int]:
    """(start, end) of piece `index` when an axis of `size` splits into `sizes`."""
    if sum(sizes) != size or any(s < 1 for s in sizes):
        raise ValueError(f"sizes {list(sizes)} do not split an axis of {size}")
    if not 0 <= index < len(sizes):
        raise ValueError(f"index {index} is not one of the {len(sizes)} pieces")
    start = sum(sizes[:index])
    return start, start + sizes[index]


def bind_slice(
    x: torch.Tensor, axis: int, start: int, end: int | None, step: int = 1,
    out: torch.Tensor | None = None, config: Config | None = None,
) -> BoundKernels:  # fmt: skip
    """x[..., start:end:step, ...] along `axis`, copied into a contiguous output (any x
    strides), bound to x."""
    check_float(x, "slice")
    view = slice_view(x, axis, start, end, step)
    out = resolve_out(out, view.shape, x)
    if not out.is_contiguous():
        raise Unsupported("slice writes a contiguous output")
    if out.numel() == 0:
        return BoundKernels.of([], out)
    call, choice = bind_strided_map(view, out, activation=0, config=config)
    return BoundKernels.of([call], out, [choice], keep=[view])


def bind_split(
    x: torch.Tensor, axis: int, sizes: Sequence[int], index: int,
    out: torch.Tensor | None = None, config: Config | None = None,
) -> BoundKernels:  # fmt: skip
    """torch.split(x, sizes, axis)[index], copied into a contiguous output, bound to x."""
    if not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis {axis} is out of range for a {x.dim()}-d tensor")
    start, end = split_bounds(x.shape[axis], sizes, index)
    return bind_slice(x, axis, start, end, 1, out, config)


def slice_copy(
    x: torch.Tensor, axis: int, start: int, end: int | None, step: int = 1,
    out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """x[..., start:end:step, ...] along `axis`, contiguous, launched once."""
    return bind_slice(x, axis, start, end, step, out).launch()


def split_copy(
    x: torch.Tensor, axis: int, sizes: Sequence[int], index: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """torch.split(x, sizes, axis)[index], contiguous, launched once."""
    return bind_split(x, axis, sizes, index, out).launch()
