"""The sigmoid Triton kernel vs a float64 reference written out, under the CPU interpreter.

Every launch writes into an output prefilled with NaN (poisoned); all of it must be overwritten.
"""

from __future__ import annotations

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.memory.sigmoid import bind_sigmoid, sigmoid

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def reference(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return 1.0 / (1.0 + torch.exp(-x))


def check(out: torch.Tensor, x: torch.Tensor) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = reference(x)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[x.dtype], f"relative L2 error {err:.3e} > {TOLERANCE[x.dtype]:.1e}"
    # every element too: sigmoid lies in [0, 1] and is off by at most a few ulps of 1
    assert (out.double() - ref).abs().max().item() <= 4 * torch.finfo(x.dtype).eps


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("shape", [(3, 7, 13), (1,), (257,), (2, 5, 9, 11)])
def test_odd_shapes_into_poisoned_output(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    x = randn(*shape, dtype=dtype, seed=len(shape) + shape[0], scale=4.0)
    out = torch.full(shape, float("nan"), dtype=dtype)
    assert sigmoid(x, out) is out
    check(out, x)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
def test_large_magnitudes_saturate_without_nan() -> None:
    """exp(-x) overflows for x << 0: the result must be 0 (and 1 for x >> 0), never NaN."""
    x = torch.tensor([-1000.0, -100.0, -88.5, 0.0, 88.5, 100.0, 1000.0])
    out = sigmoid(x)
    assert not torch.isnan(out).any()
    assert out[0].item() == 0.0 and out[-1].item() == 1.0 and out[3].item() == 0.5
    check(out, x)


def test_bound_launch_rewrites_the_same_output() -> None:
    x = randn(6, 11, seed=3)
    bound = bind_sigmoid(x)
    first = bound.launch()
    first.fill_(float("nan"))  # poison between launches: the second launch must rewrite all
    second = bound.launch()
    assert second.data_ptr() == first.data_ptr()
    check(second, x)


def test_empty_input() -> None:
    assert sigmoid(torch.empty(0, 4)).shape == (0, 4)


def test_rejects_what_it_does_not_handle() -> None:
    with pytest.raises(Unsupported):
        sigmoid(torch.arange(6))  # integers
    with pytest.raises(Unsupported):
        sigmoid(randn(4, 6).t())  # strided input
    with pytest.raises(ValueError):
        sigmoid(randn(4, 6), out=torch.empty(6, 4))  # wrong output shape
