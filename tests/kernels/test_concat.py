"""The concat Triton kernel (kernels/memory/concat.py) vs torch.cat, under the CPU interpreter: a copy,
so the result must be bit-exact. Odd shapes, every axis kind (channels of NCHW, the last
axis, a middle axis), two to many inputs of different lengths, each dtype; outputs start as
NaN and must be fully written, in one launch."""

from __future__ import annotations

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.memory.concat import MAX_INPUTS, _tile_shape, bind_concat, concat

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# (shapes of the inputs, axis)
CASES = {
    "channels": ([(2, 3, 5, 7), (2, 2, 5, 7), (2, 4, 5, 7)], 1),
    "last-axis": ([(3, 5, 7), (3, 5, 2)], -1),
    "middle-axis": ([(2, 5, 3), (2, 1, 3), (2, 6, 3)], 1),
    "inception-4": ([(1, 3, 4, 4), (1, 5, 4, 4), (1, 2, 4, 4), (1, 1, 4, 4)], 1),
    "many-short-rows": ([(9, 1)] * 11, 1),
    "long-rows": ([(2, 700), (2, 333)], 1),
}


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def inputs(shapes, dtype: torch.dtype) -> list[torch.Tensor]:
    return [randn(*shape, dtype=dtype, seed=i + 1) for i, shape in enumerate(shapes)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_concat_into_poisoned_output_is_exact(case: str, dtype: torch.dtype) -> None:
    shapes, axis = CASES[case]
    xs = inputs(shapes, dtype)
    expected = torch.cat(xs, dim=axis)
    out = torch.full(expected.shape, float("nan"), dtype=dtype)
    bound = bind_concat(xs, axis, out)
    assert len(bound.calls) == 1, "one launch writes every piece"
    assert bound.launch() is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    assert torch.equal(out, expected)


def test_empty_pieces_are_skipped() -> None:
    xs = [randn(2, 3), torch.empty(2, 0), randn(2, 4, seed=2)]
    assert torch.equal(concat(xs, 1), torch.cat(xs, 1))
    assert concat([torch.empty(0, 3), torch.empty(0, 2)], 1).shape == (0, 5)


def test_tiles_follow_the_pieces() -> None:
    """Short rows (a concat along the last axis) stack several rows per tile; long rows take
    the whole block along the row."""
    assert _tile_shape(2048, [64, 64]) == (32, 64)
    assert _tile_shape(2048, [5, 3]) == (256, 8)
    assert _tile_shape(1024, [3136 * 64, 3136 * 32]) == (1, 1024)


def test_bound_launch_rewrites_the_same_output() -> None:
    xs = inputs([(3, 2, 5), (3, 4, 5)], torch.float16)
    bound = bind_concat(xs, 1)
    first = bound.launch()
    first.fill_(float("nan"))  # poison between launches: the second must rewrite all of it
    second = bound.launch()
    assert second.data_ptr() == first.data_ptr()
    assert torch.equal(second, torch.cat(xs, 1))


def test_rejects_what_it_does_not_handle() -> None:
    a = randn(2, 3)
    with pytest.raises(Unsupported):
        concat([a, a.half()], 1)  # mixed dtypes
    with pytest.raises(Unsupported):
        concat([a, randn(3, 2).t()], 1)  # a strided input
    with pytest.raises(ValueError):
        concat([a, randn(3, 3)], 1)  # other axes differ
    with pytest.raises(ValueError):
        concat([a, a], 2)  # no such axis
    with pytest.raises(ValueError):
        concat([a, a], 1, out=torch.empty(2, 5))  # wrong output shape
    with pytest.raises(Unsupported):
        concat([randn(1, 1)] * (MAX_INPUTS + 1), 1)
