"""W8A8 int8 linear vs the float64 reference of the unquantized layer, under the CPU interpreter.

The tolerance (3e-2 relative L2) covers per-token x per-channel int8 rounding; the kernels' own
arithmetic (int32 sums, fp32 epilogue) adds nothing measurable.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear_int8 import Int8Linear
from opbench.kernels.memory.quantize import quantize_per_row, quantize_rows

TOLERANCE = 3e-2
ACTIVATIONS = {"none": lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu}


def make_inputs(m: int, n: int, k: int, dtype: torch.dtype, bias: bool, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype) if bias else None
    return x, w, b


def reference(x, w, b, activation: str) -> torch.Tensor:
    y = x.double() @ w.double().T
    if b is not None:
        y = y + b.double()
    return ACTIVATIONS[activation](y)


def check(out: torch.Tensor, ref: torch.Tensor, tolerance: float) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance, f"relative L2 error {err:.3e} > {tolerance:.1e}"


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_decode_row_activations_and_bias(bias: bool, activation: str) -> None:
    x, w, b = make_inputs(1, 45, 83, torch.float16, bias, seed=5)
    fn = Int8Linear(w, b, activation=activation)
    out = torch.full((1, 45), float("nan"), dtype=torch.float16)
    fn(x, out=out)
    check(out, reference(x, w, b, activation), TOLERANCE)


@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_many_rows(activation: str) -> None:
    x, w, b = make_inputs(67, 45, 83, torch.float16, bias=True, seed=6)
    fn = Int8Linear(w, b, activation=activation)
    out = torch.full((67, 45), float("nan"), dtype=torch.float16)
    fn(x, out=out)
    check(out, reference(x, w, b, activation), TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_kernel_kind(dtype: torch.dtype) -> None:
    """K = 80 (a multiple of 16, as int8 TMA needs) so the TMA kernel is among the plans."""
    x, w, b = make_inputs(37, 51, 80, dtype, bias=True, seed=7)
    fn = Int8Linear(w, b, activation="silu")
    plans = fn.candidates(x, every_kind=True)
    assert {p["KIND"] for p in plans} == {"split_k", "tiled", "tma"}
    assert any(p["FUSED_QUANT"] for p in plans) and any(p["SPLIT_K"] > 1 for p in plans)
    ref = reference(x, w, b, "silu")
    for plan in plans:
        out = torch.full((37, 51), float("nan"), dtype=dtype)
        fn.launch(plan, x, out)
        assert out.dtype == dtype
        check(out, ref, TOLERANCE)


def test_quantize_rows() -> None:
    """Per-row codes round to nearest (|x - s*q| <= s/2, up to fp32 rounding at exact ties) and
    agree with the build-time torch quantizer to within one code."""
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(7, 300, generator=gen).to(torch.bfloat16)
    x[3] = 0  # an all-zero row: scale 0, codes 0, no NaN
    q = torch.full((7, 300), 99, dtype=torch.int8)
    scale = torch.full((7,), float("nan"))
    quantize_rows(x, q, scale)
    xf = x.float()
    torch.testing.assert_close(scale, xf.abs().amax(dim=1) / 127, rtol=1e-6, atol=0)
    assert scale[3] == 0 and int(q[3].abs().max()) == 0
    assert int(q.abs().max()) == 127
    assert bool(((xf - scale[:, None] * q.float()).abs() <= 0.501 * scale[:, None]).all())
    q_ref, s_ref = quantize_per_row(x)
    assert torch.equal(q, q_ref) and torch.equal(scale, s_ref), "one rule, kernel and host"


def test_zero_input_row_gives_bias() -> None:
    x, w, b = make_inputs(2, 21, 33, torch.float16, bias=True, seed=8)
    x[1] = 0
    out = Int8Linear(w, b, activation="relu")(x)
    torch.testing.assert_close(out[1], torch.relu(b), rtol=0, atol=0)


def test_float32_is_unsupported() -> None:
    _, w, b = make_inputs(1, 16, 16, torch.float32, bias=True)
    with pytest.raises(Unsupported, match="int8"):
        Int8Linear(w, b)
    fn = Int8Linear(w.half(), b.half())
    with pytest.raises(Unsupported, match="float32"):
        fn(torch.randn(2, 16))


def test_quantized_x_comes_from_shared_scratch() -> None:
    """xq and the row scales are per-launch scratch (the quantize launch writes them, the GEMM
    of the same call reads them): bound in a ScratchArena group they are views of its block,
    and a launch from a poisoned block is still right."""
    from opbench.kernels.gemm.linear_plans import gemm_plan
    from tests.kernels.arena import bind_in_arena

    x, w, b = make_inputs(5, 27, 80, torch.float16, bias=True, seed=3)
    plan = gemm_plan("tiled", 16, 16, 32, 4, 1)  # quantize pre-pass + GEMM, no partials
    out = torch.empty(5, 27, dtype=torch.float16)
    bound, arena = bind_in_arena(Int8Linear(w, b, "none"), x, out, plan)
    assert arena.block is not None and arena.nbytes >= 5 * 80 + 5 * 4
    base = arena.block.data_ptr()
    views = [t for t in bound.keep if base <= t.data_ptr() < base + arena.nbytes]
    assert {t.dtype for t in views} == {torch.int8, torch.float32}
    arena.block.fill_(255)
    out.fill_(float("nan"))
    bound.launch()
    check(out, reference(x, w, b, "none"), TOLERANCE)
