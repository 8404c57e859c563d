"""relu / gelu (erf and tanh forms) / silu / relu6 / hardswish / hardsigmoid / tanh Triton kernels vs a float64 reference, under
the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten.
Contiguous tensors take the flat kernel; strided ones the strided-copy kernel with the
activation fused.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.memory.activation import activation, gelu, gelu_tanh, relu, relu6, silu

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
REFERENCE = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu6": F.relu6,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "tanh": torch.tanh,
}


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def check(out: torch.Tensor, x: torch.Tensor, name: str) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = REFERENCE[name](x.double())
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[x.dtype], f"relative L2 error {err:.3e} > {TOLERANCE[x.dtype]:.1e}"


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("name", list(REFERENCE))
@pytest.mark.parametrize("shape", [(3, 7, 13), (1,), (257,)])
def test_contiguous(shape: tuple[int, ...], name: str, dtype: torch.dtype) -> None:
    x = randn(*shape, dtype=dtype, seed=len(shape) + shape[0], scale=3.0)
    out = torch.full(shape, float("nan"), dtype=dtype)
    assert activation(x, name, out) is out
    check(out, x, name)


@pytest.mark.parametrize("name", list(REFERENCE))
def test_strided_input(name: str) -> None:
    x = randn(9, 6, 11, dtype=torch.float16, seed=4).transpose(0, 2)[:, ::2]
    out = torch.full(x.shape, float("nan"), dtype=x.dtype)
    activation(x, name, out)
    check(out, x, name)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
def test_large_magnitudes() -> None:
    """exp(-x) overflows for x << 0: silu must still give -0, not NaN."""
    x = randn(100, seed=5, scale=60.0)
    for name in REFERENCE:
        check(activation(x, name), x, name)


def test_conveniences() -> None:
    x = randn(5, 9, dtype=torch.bfloat16, seed=6)
    check(relu(x), x, "relu")
    check(gelu(x), x, "gelu")
    check(silu(x), x, "silu")
    check(gelu_tanh(x), x, "gelu_tanh")
    check(relu6(x * 4), x * 4, "relu6")


def test_relu6_clips_both_ends_exactly() -> None:
    x = torch.tensor([-3.0, -0.0, 0.5, 5.999, 6.0, 6.001, 1e4])
    assert relu6(x).tolist() == [0.0, 0.0, 0.5, pytest.approx(5.999), 6.0, 6.0, 6.0]


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
def test_gelu_tanh_is_relative_accurate_in_the_negative_tail() -> None:
    """x / (1 + exp(-2u)) (epilogue.py) equals x/2 (1 + tanh(u)) without its cancellation for
    x << 0: in float32 every normal value in [-12, 12] is within 1e-5 relative of the float64
    value."""
    x = torch.linspace(-12.0, 12.0, 4001)
    out = gelu_tanh(x)
    x64 = x.double()
    inner = (2.0 / torch.pi) ** 0.5 * (x64 + 0.044715 * x64**3)
    exact = x64 / (1.0 + torch.exp(-2.0 * inner))  # exp(-2u) of float64: no cancellation
    assert not torch.isnan(out).any()
    # Below x = -10 exp(-2u) overflows float32 and the result is -0, where the exact value is
    # under 3e-38: there only the absolute error is asked for.
    large = exact.abs() >= 1e-30
    rel = (out.double() - exact).abs()[large] / exact.abs()[large]
    assert rel.max().item() <= 1e-5
    assert (out.double() - exact).abs()[~large].max().item() <= 1e-30


def test_hard_activations_are_exact_at_their_kinks_and_tanh_saturates() -> None:
    x = torch.tensor([-1e4, -3.0, -1.5, 0.0, 1.5, 3.0, 1e4])
    assert activation(x, "hardswish").tolist() == [0.0, 0.0, -0.375, 0.0, 1.125, 3.0, 1e4]
    assert activation(x, "hardsigmoid").tolist() == [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    t = activation(torch.tensor([-100.0, -1e-3, 0.0, 1e-3, 100.0]), "tanh")
    assert t[[0, 2, 4]].tolist() == [-1.0, 0.0, 1.0]
    assert t[[1, 3]].tolist() == pytest.approx([-1e-3, 1e-3], rel=1e-3)


def test_rejects_unknown_name() -> None:
    with pytest.raises(Unsupported):
        activation(randn(3), "mish")
    with pytest.raises(Unsupported):
        activation(randn(3), "none")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gelu_into_16_bits_is_within_one_ulp_everywhere(dtype: torch.dtype) -> None:
    """GELU into fp16/bf16 takes the erfc form (epilogue.py): on every representable normal
    input in [-10, 10] it must be within one ulp of the float64 value (ulps of the output)."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    x = bits.view(dtype)
    # Subnormal inputs are left out: the CPU interpreter stores subnormal float32 values into
    # bf16 wrongly (seen: relu(2.76e-39) gave 8.8e-39), and GPUs may flush them.
    tiny = torch.finfo(dtype).smallest_normal
    x = x[torch.isfinite(x) & (x.abs() <= 10) & (x.abs() >= 4 * tiny)].contiguous()
    out = torch.full_like(x, float("nan"))
    activation(x, "gelu", out)
    # erfc, not 1 + erf: float64's 1 + erf(x) cancels to 0 below x = -8
    exact = 0.5 * x.double() * torch.special.erfc(-x.double() / 2**0.5)
    rounded = exact.to(dtype)
    # one ulp at the exact value's magnitude (the subnormal spacing at the bottom)
    finfo = torch.finfo(dtype)
    ulp = torch.maximum(
        rounded.double().abs() * finfo.eps, torch.tensor(finfo.smallest_normal * finfo.eps)
    )
    err = (out.double() - exact).abs()
    worst = (err / ulp).max().item()
    assert not torch.isnan(out).any()
    assert worst <= 1.0, f"{worst:.2f} ulp off at x = {x[(err / ulp).argmax()].item()}"
