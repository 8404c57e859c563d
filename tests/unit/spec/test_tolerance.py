"""Default tolerances and their overrides: the int8 default follows from the arithmetic of
symmetric int8 rounding; a tolerance above the default is marked loose; above 0.1 it needs
`allow_loose_tolerance: true` on the layer (the bad-input cases are in test_bad_input.py)."""

from __future__ import annotations

import math

import pytest
import torch

from opbench.kernels.quant import quantized_weight
from opbench.spec.load import load_suite_text
from opbench.spec.model import (
    DEFAULT_TOLERANCE,
    FP8_TOLERANCE,
    INT8_TOLERANCE,
    LOOSE_TOLERANCE_LIMIT,
    QUANT_TOLERANCE,
)


def quantized(v: torch.Tensor, dim: int) -> torch.Tensor:
    """Symmetric int8 rounding with one scale per slice along `dim` (max|v| / 127), as the
    kernels do it (kernels/memory/quantize.py, kernels/conv/conv_int8.py), back in float64."""
    scale = v.abs().amax(dim=dim, keepdim=True) / 127
    return torch.round(v / scale).clamp(-127, 127) * scale


def int8_linear_error(k: int) -> float:
    """Relative L2 error of y = x W^T with x per token and W per output channel in int8, on
    the seeded data's distribution (normal x, normal W / sqrt(K))."""
    gen = torch.Generator().manual_seed(k)
    x = torch.randn(64, k, dtype=torch.float64, generator=gen)
    w = torch.randn(96, k, dtype=torch.float64, generator=gen) / math.sqrt(k)
    exact = x @ w.T
    approx = quantized(x, 1) @ quantized(w, 1).T
    return float((approx - exact).norm() / exact.norm())


@pytest.mark.parametrize("k", [256, 4096, 11008])
def test_int8_default_leaves_about_twice_the_rounding_error(k: int) -> None:
    """Each operand's rounding costs ~0.7-0.95e-2 relative L2 (uniform error, step max/127),
    their product ~1.0-1.3e-2 at the suites' K; 3e-2 leaves 2-3x that, the old 5e-2 four."""
    error = int8_linear_error(k)
    assert 0.8e-2 < error < 1.5e-2
    assert 2 * error <= INT8_TOLERANCE <= 3.5 * error


def quantized_linear_error(quant: str, k: int, group_size: int = 128) -> float:
    """Relative L2 error of y = x W^T with the `quant` format's rounding (kernels/quant.py, the
    kernels' rules) on the seeded data's distribution: fp8 rounds x per token and W per
    channel; the weight-only formats round W alone."""
    gen = torch.Generator().manual_seed(k)
    x = torch.randn(64, k, dtype=torch.float64, generator=gen)
    w = torch.randn(96, k, dtype=torch.float64, generator=gen) / math.sqrt(k)
    exact = x @ w.T
    wq = quantized_weight(quant, w.float(), group_size)
    xq = quantized_weight(quant, x.float(), group_size) if quant == "fp8" else x
    return float((xq @ wq.T - exact).norm() / exact.norm())


@pytest.mark.parametrize("k", [256, 4096, 11008])
def test_fp8_default_leaves_about_twice_the_rounding_error(k: int) -> None:
    """e4m3 keeps 3 mantissa bits: round to nearest costs 2^-4 / sqrt(3) ~ 3.6e-2 relative RMS
    at the bottom of a binade, ~2.6e-2 averaged over it, per operand; both operands ~3.7e-2.
    8e-2 (fp8 attention's default too) is 2.2x that, below the 0.1 that needs an allowance."""
    error = quantized_linear_error("fp8", k)
    assert 3.3e-2 < error < 4.0e-2
    assert 1.85 * error <= QUANT_TOLERANCE["fp8"] <= 2.3 * error
    assert QUANT_TOLERANCE["fp8"] < LOOSE_TOLERANCE_LIMIT


@pytest.mark.parametrize("k", [256, 4096, 11008])
def test_weight_only_defaults_leave_about_twice_the_rounding_error(k: int) -> None:
    """int8-weight rounds W alone (x stays fp16): 0.7-0.95e-2, so 2e-2. int4-weight rounds W to
    7 steps of each 128-group's max (2.5-3 sigma): step 0.4 sigma, error step / sqrt(12) ~ 0.12
    of W, so 0.25 (above 0.1: the quant's own default needs no allowance)."""
    int8 = quantized_linear_error("int8-weight", k)
    assert 0.6e-2 < int8 < 1.0e-2
    assert 2 * int8 <= QUANT_TOLERANCE["int8-weight"] <= 3.4 * int8
    int4 = quantized_linear_error("int4-weight", k)
    assert 0.10 < int4 < 0.13
    assert 1.9 * int4 <= QUANT_TOLERANCE["int4-weight"] <= 2.5 * int4


def test_int8_default_is_below_the_loose_limit_and_fp16_above_rounding() -> None:
    assert INT8_TOLERANCE == 3e-2
    assert DEFAULT_TOLERANCE["float16"] < INT8_TOLERANCE < LOOSE_TOLERANCE_LIMIT


def e4m3(v: torch.Tensor, dim: tuple[int, ...]) -> torch.Tensor:
    """e4m3 rounding with the largest |v| of each slice over `dim` at 448, back in float64."""
    scale = v.abs().amax(dim=dim, keepdim=True) / 448
    return (v / scale).float().to(torch.float8_e4m3fn).double() * scale


def fp8_attention_error(head_dim: int, seq: int = 512) -> float:
    """Relative L2 error of attention with Q (per 64 rows), K (per 128 keys), P (448 p) and
    V (per channel) in e4m3, as kernels/attention/attention_fp8.py quantizes them, on normal data."""
    gen = torch.Generator().manual_seed(head_dim)
    q, k, v = torch.randn(3, 4, seq, head_dim, dtype=torch.float64, generator=gen)
    exact = (q @ k.transpose(-1, -2) / math.sqrt(head_dim)).softmax(-1) @ v
    q8 = e4m3(q.unflatten(1, (-1, 64)), (2, 3)).flatten(1, 2)
    k8 = e4m3(k.unflatten(1, (-1, 128)), (2, 3)).flatten(1, 2)
    p = torch.exp(q8 @ k8.transpose(-1, -2) / math.sqrt(head_dim))
    p = p / p.amax(-1, keepdim=True)
    approx = (e4m3(p, (-1,)) * p.amax(-1, keepdim=True)) @ e4m3(v, (1,)) / p.sum(-1, keepdim=True)
    return float((approx - exact).norm() / exact.norm())


@pytest.mark.parametrize("head_dim", [64, 128])
def test_fp8_default_is_one_and_a_half_times_the_attention_rounding_error(head_dim: int) -> None:
    """e4m3 rounds with a relative rms error eps = 2.66e-2; Q and K put sqrt(2) eps on the
    logits, P and V eps each: about 2 eps = 5.3e-2 at the output, and 8e-2 is 1.5x that."""
    x = torch.randn(100_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eps = float((x.float().to(torch.float8_e4m3fn).double() - x).norm() / x.norm())
    assert 2.5e-2 < eps < 2.8e-2
    error = fp8_attention_error(head_dim)
    assert 1.7 * eps < error < 2.2 * eps
    assert 1.4 * error <= FP8_TOLERANCE <= 1.7 * error < LOOSE_TOLERANCE_LIMIT


def layers(text: str):
    suite = load_suite_text(
        "name: t\nmodels:\n  - name: m\n    input: [8]\n    layers:\n" + text, "t.yaml"
    )
    return {layer.name: layer for layer in suite.models[0].layers}


def test_a_tolerance_above_the_dtype_default_is_marked_loose() -> None:
    got = layers(
        "      - {name: default, op: relu}\n"
        "      - {name: stricter, op: relu, tolerance: 1.0e-5}\n"
        "      - {name: looser, op: relu, tolerance: 1.0e-3}\n"
        "      - {name: int8, op: linear, out_features: 8, quant: int8, dtype: float16}\n"
        "      - {name: int8_loose, op: linear, out_features: 8, quant: int8, tolerance: 0.05}\n"
        "      - {name: allowed, op: relu, tolerance: 0.5, allow_loose_tolerance: true}\n"
        "      - {name: fp8, op: attention, heads: 2, quant: fp8, input: [4, 64], dtype: float16}\n"
    )
    assert got["fp8"].effective_tolerance == FP8_TOLERANCE and not got["fp8"].loose_tolerance
    assert not got["default"].loose_tolerance and not got["stricter"].loose_tolerance
    assert got["looser"].loose_tolerance
    assert got["int8"].effective_tolerance == INT8_TOLERANCE and not got["int8"].loose_tolerance
    assert got["int8_loose"].loose_tolerance
    allowed = got["allowed"]
    assert allowed.allow_loose_tolerance and allowed.loose_tolerance
    assert allowed.effective_tolerance == 0.5


def test_exactly_the_limit_needs_no_allowance() -> None:
    layer = layers(f"      - {{name: a, op: relu, tolerance: {LOOSE_TOLERANCE_LIMIT}}}\n")["a"]
    assert layer.loose_tolerance and not layer.allow_loose_tolerance


def test_quant_defaults_and_the_loose_limit() -> None:
    got = layers(
        "      - {name: f8, op: linear, out_features: 8, quant: fp8, dtype: float16}\n"
        "      - {name: w4, op: linear, out_features: 8, quant: int4-weight, group_size: 16, "
        "input: [32], dtype: float16}\n"
    )
    assert got["f8"].effective_tolerance == QUANT_TOLERANCE["fp8"]
    w4 = got["w4"]
    assert w4.effective_tolerance == 0.25 and not w4.loose_tolerance
    from opbench.spec.model import loose_tolerance_problem

    assert loose_tolerance_problem(w4) is None  # its own default, above 0.1, needs no allowance
    from opbench.errors import InputError

    with pytest.raises(InputError, match="above 0.25 .*allow_loose_tolerance"):
        layers(
            "      - {name: w4, op: linear, out_features: 8, quant: int4-weight, group_size: 16, "
            "tolerance: 0.3, input: [32], dtype: float16}\n"
        )
