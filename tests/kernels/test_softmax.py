"""softmax Triton kernel vs a float64 reference, under the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten.
Covers every dim of a 4-d tensor, strided inputs, 1-element dims, rows longer than one block
(the online two-pass variant), and large logits.
"""

from __future__ import annotations

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.memory import rows as softmax_module
from opbench.kernels.memory.softmax import softmax

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
# The interpreter emulates the GPU on fully masked rows (-inf - -inf) and indexes `range` with
# a 1-element array; neither is about the kernel.
pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered"),
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0"),
]


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def run(x: torch.Tensor, dim: int) -> torch.Tensor:
    out = torch.full(x.shape, float("nan"), dtype=x.dtype)
    assert softmax(x, dim, out) is out
    return out


def check(out: torch.Tensor, x: torch.Tensor, dim: int) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = torch.softmax(x.double(), dim)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[x.dtype], f"relative L2 error {err:.3e} > {TOLERANCE[x.dtype]:.1e}"


@pytest.mark.parametrize("dim", [-4, -3, -2, -1, 0, 1, 2, 3])
def test_every_dim_fp32(dim: int) -> None:
    x = randn(3, 5, 7, 11, seed=dim + 10)
    check(run(x, dim), x, dim)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, -1])
def test_low_precision(dtype: torch.dtype, dim: int) -> None:
    x = randn(6, 37, dtype=dtype, seed=1, scale=3.0)
    check(run(x, dim), x, dim)


@pytest.mark.parametrize("shape,dim", [((1, 9), 0), ((4, 1, 5), 1), ((1,), 0), ((7, 1), -1)])
def test_one_element_dims(shape: tuple[int, ...], dim: int) -> None:
    x = randn(*shape, seed=2)
    check(run(x, dim), x, dim)


def test_strided_input() -> None:
    base = randn(8, 6, 13, dtype=torch.float16, seed=3)
    x = base.transpose(0, 2)[:, ::2]  # no axis with unit stride along the softmax dim
    for dim in (0, 1, 2):
        check(run(x, dim), x, dim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_longer_than_one_block(dtype: torch.dtype) -> None:
    """9000 > MAX_ONE_PASS_BLOCK: the online (running max and sum) variant, 3 chunks."""
    x = randn(2, 9000, dtype=dtype, seed=4, scale=4.0)
    check(run(x, -1), x, -1)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_looped_variant_on_every_dim(dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny blocks force the looped variant on strided rows too."""
    monkeypatch.setattr(softmax_module, "MAX_ONE_PASS_BLOCK", 8)
    monkeypatch.setattr(softmax_module, "LOOP_BLOCK", 4)
    x = randn(3, 21, 5, seed=5 + dim, scale=5.0)
    check(run(x, dim), x, dim)


def test_large_logits_do_not_overflow() -> None:
    x = randn(5, 50, seed=6, scale=300.0)
    check(run(x, -1), x, -1)


def test_rejects_bad_arguments() -> None:
    with pytest.raises(Unsupported):
        softmax(torch.ones(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError):
        softmax(randn(3, 4), -1, out=torch.empty(4, 3))
