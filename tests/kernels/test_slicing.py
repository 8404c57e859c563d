"""slice / split copy kernels (kernels/memory/slicing.py, through transpose.py's strided copy) vs
torch's indexing, under the CPU interpreter: a copy, so bit-exact. Odd shapes, steps, negative
indices, every axis, each dtype; outputs start as NaN and must be fully written."""

from __future__ import annotations

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.memory.slicing import (
    bind_slice,
    bind_split,
    slice_copy,
    slice_view,
    split_copy,
)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# (input shape, axis, start, end, step)
SLICES = {
    "last-axis-step-2": ((2, 5, 9), 2, 1, -2, 2),
    "channels-head": ((2, 5, 3, 7), 1, 0, 3, 1),
    "middle-tail": ((2, 5, 9), 1, 2, None, 1),
    "negative-start": ((3, 9), -1, -4, None, 1),
    "step-3-middle": ((2, 7, 3, 5), 1, 1, 7, 3),
    "one-element": ((3, 5, 4), 2, 2, 3, 1),
    "clipped-end": ((2, 6), 1, 4, 100, 1),
}


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def expected_slice(x: torch.Tensor, axis: int, start, end, step) -> torch.Tensor:
    return x[(slice(None),) * (axis % x.dim()) + (slice(start, end, step),)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SLICES))
def test_slice_into_poisoned_output_is_exact(case: str, dtype: torch.dtype) -> None:
    shape, axis, start, end, step = SLICES[case]
    x = randn(*shape, dtype=dtype, seed=len(case))
    expected = expected_slice(x, axis, start, end, step)
    out = torch.full(expected.shape, float("nan"), dtype=dtype)
    assert slice_copy(x, axis, start, end, step, out) is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", [0, 1, 2])
def test_split_pieces_into_poisoned_outputs(index: int, dtype: torch.dtype) -> None:
    """The q, k, v of a packed projection: three pieces of the last axis, each its own layer."""
    x = randn(2, 5, 13, dtype=dtype, seed=index)
    sizes = [4, 6, 3]
    expected = torch.split(x, sizes, dim=-1)[index]
    out = torch.full(expected.shape, float("nan"), dtype=dtype)
    assert split_copy(x, -1, sizes, index, out) is out
    assert not torch.isnan(out).any() and torch.equal(out, expected)


def test_a_strided_input_is_sliced_too() -> None:
    x = randn(7, 4, 6, seed=9).transpose(0, 2)  # [6, 4, 7], not contiguous
    out = slice_copy(x, 2, 1, 6, 2)
    assert out.is_contiguous() and torch.equal(out, x[:, :, 1:6:2])


def test_bound_launch_rewrites_the_same_output() -> None:
    x = randn(3, 8, 5, dtype=torch.bfloat16, seed=4)
    bound = bind_split(x, 1, [3, 5], 1)
    first = bound.launch()
    first.fill_(float("nan"))  # poison between launches: the second must rewrite all of it
    second = bound.launch()
    assert second.data_ptr() == first.data_ptr()
    assert torch.equal(second, x[:, 3:])


def test_slice_view_moves_nothing() -> None:
    x = randn(1, 6, 5)
    view = slice_view(x, 1, 2, 5)
    assert view.data_ptr() == x[0, 2].data_ptr() and view.is_contiguous()


def test_empty_slice() -> None:
    x = randn(2, 6)
    assert slice_copy(x, 1, 4, 2).shape == (2, 0)


def test_rejects_what_it_does_not_handle() -> None:
    x = randn(2, 6)
    with pytest.raises(Unsupported):
        slice_copy(torch.arange(6).view(2, 3), 1, 0, 2)  # integers
    with pytest.raises(Unsupported):
        slice_copy(x, 1, 0, 4, 0)  # step 0
    with pytest.raises(ValueError):
        slice_copy(x, 2, 0, 1)  # no such axis
    with pytest.raises(ValueError):
        split_copy(x, 1, [2, 3], 0)  # sizes do not add up
    with pytest.raises(ValueError):
        split_copy(x, 1, [2, 4], 2)  # no such piece
    with pytest.raises(ValueError):
        bind_slice(x, 1, 0, 3, out=torch.empty(2, 4))  # wrong output shape
