"""add / mul Triton kernels (kernels/memory/binary.py) vs float64, under the CPU interpreter: same
shapes, every broadcasting layout a network uses (per-channel, per-sample gate, per-row,
per-column, a RoPE-like table, scalar-like), each dtype. Every output starts as NaN and must be
fully written."""

from __future__ import annotations

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.memory.binary import add, bind_add, bind_binary, bind_mul, broadcast_plan, mul

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
REFERENCE = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b}
LAUNCH = {"add": add, "mul": mul}

# (first input, second input): the second broadcasts onto the first.
CASES = {
    "same-shape": ((2, 3, 5, 7), (2, 3, 5, 7)),
    "per-channel": ((2, 5, 3, 7), (1, 5, 1, 1)),
    "se-gate": ((2, 5, 3, 7), (2, 5, 1, 1)),
    "per-row": ((3, 5, 9), (3, 5, 1)),
    "per-column": ((3, 5, 9), (9,)),
    "rope-table": ((2, 5, 3, 6), (1, 5, 1, 6)),
    "scalar-like": ((3, 11), (1, 1)),
    "one-element": ((1,), (1,)),
    "odd-flat": ((257,), (257,)),
}


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, op: str) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    exact = REFERENCE[op](a.double(), b.double())
    # One operation in float32 then one conversion to the dtype: within one ulp of the exact
    # result everywhere (the float32 step is far below; the conversion is half an ulp on a
    # GPU, and up to one here: Triton 3.6's interpreter truncates float32 to bfloat16).
    ulp = exact.abs() * torch.finfo(a.dtype).eps
    tiny = torch.finfo(a.dtype).tiny
    assert ((out.double() - exact).abs() <= torch.clamp(ulp, min=tiny)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(REFERENCE))
@pytest.mark.parametrize("case", list(CASES))
def test_broadcasts_into_poisoned_output(case: str, op: str, dtype: torch.dtype) -> None:
    shape_a, shape_b = CASES[case]
    a = randn(*shape_a, dtype=dtype, seed=1)
    b = randn(*shape_b, dtype=dtype, seed=2)
    out = torch.full(shape_a, float("nan"), dtype=dtype)
    assert LAUNCH[op](a, b, out) is out
    check(out, a, b, op)


@pytest.mark.parametrize("case", ["per-channel", "se-gate", "per-row", "per-column",
                                  "scalar-like", "same-shape"])  # fmt: skip
def test_the_broadcast_operand_is_read_per_row_or_column_not_per_element(case: str) -> None:
    """The plan the kernel gets: b's strides show which of rows / inner it varies along, and
    the layouts collapse to at most four axes (per-channel: [B, C, H*W])."""
    shape_a, shape_b = CASES[case]
    a, b = randn(*shape_a), randn(*shape_b)
    plan = broadcast_plan(tuple(a.shape), a.stride(), b.expand(a.shape).stride())
    varies = (plan.b_strides[2] != 0, plan.b_strides[3] != 0)
    expected = {"per-channel": (True, False), "se-gate": (True, False), "per-row": (True, False),
                "per-column": (False, True), "scalar-like": (False, False),
                "same-shape": (False, True)}  # fmt: skip
    assert varies == expected[case]
    if case == "per-channel":
        assert plan.sizes == (1, 2, 5, 21) and plan.b_strides[:2] == (0, 0)
    if case == "same-shape":
        assert plan.sizes == (1, 1, 1, 210)  # one flat stream


def test_strided_second_input() -> None:
    a = randn(4, 6, 5, seed=3)
    b = randn(5, 6, 4, seed=4).permute(2, 1, 0)  # same shape as a, transposed memory
    out = torch.full_like(a, float("nan"))
    bind_mul(a, b, out).launch()
    check(out, a, b, "mul")


def test_bound_launch_rewrites_the_same_output() -> None:
    a, b = randn(3, 5, 7, seed=5), randn(3, 1, 7, seed=6)
    bound = bind_add(a, b)
    first = bound.launch()
    first.fill_(float("nan"))  # poison between launches: the second must rewrite all of it
    second = bound.launch()
    assert second.data_ptr() == first.data_ptr()
    check(second, a, b, "add")


def test_large_magnitudes_stay_finite_in_16_bits() -> None:
    """Computed in float32 and rounded once: fp16 sums near the top of its range round, as
    torch's do, rather than going through a 16-bit intermediate."""
    a = torch.tensor([60000.0, -60000.0, 1e-3, 3.0], dtype=torch.float16)
    b = torch.tensor([5000.0, -5000.0, 1e-3, -3.0], dtype=torch.float16)
    assert torch.equal(add(a, b), torch.add(a, b))
    assert torch.equal(mul(a[2:], b[2:]), torch.mul(a[2:], b[2:]))


def test_empty_input() -> None:
    assert add(torch.empty(0, 4), torch.empty(1, 4)).shape == (0, 4)


def test_rejects_what_it_does_not_handle() -> None:
    a = randn(4, 6)
    with pytest.raises(Unsupported):
        add(torch.arange(6), torch.arange(6))  # integers
    with pytest.raises(Unsupported):
        add(a, randn(4, 6, dtype=torch.float16))  # mixed dtypes
    with pytest.raises(Unsupported):
        add(randn(6, 4).t(), a)  # strided first input
    with pytest.raises(ValueError):
        add(a, randn(5, 6))  # does not broadcast
    with pytest.raises(ValueError):
        add(randn(1, 6), a)  # the first input would itself broadcast
    with pytest.raises(ValueError):
        add(a, a, out=torch.empty(6, 4))  # wrong output shape
    with pytest.raises(Unsupported):
        bind_binary(a, a, "sub")
    with pytest.raises(Unsupported):  # five axes that do not merge
        add(randn(2, 3, 2, 3, 2), randn(2, 1, 2, 1, 2))
