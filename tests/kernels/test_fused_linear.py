"""GEMM epilogue fusions against the unfused chain of layers they replace, in float64, under
the CPU interpreter: linear → add(residual), and SwiGLU (gate and up linears, silu, mul) as
one GEMM over interleaved weights.

Fresh random-normal data, odd shapes (M = 1 and 3 take the split-K decode path, M = 37/67 the
tiles), every kernel kind, outputs prefilled with NaN, float32/float16/bfloat16 and int8.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_plans import gemm_plan
from opbench.kernels.gemm.swiglu import build_swiglu, interleave_rows

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}
INT8_TOLERANCE = 3e-2
ACTIVATIONS = {"none": lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu}


def randn(*shape: int, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * scale


def check(out: torch.Tensor, ref: torch.Tensor, tolerance: float) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance, f"relative L2 error {err:.3e} > {tolerance:.1e}"


def linear64(x, w, b=None):
    y = x.double() @ w.double().T
    return y if b is None else y + b.double()


# --- linear → add(residual) ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 67])
def test_linear_then_residual_add(dtype, m):
    gen = torch.Generator().manual_seed(m)
    x, w = randn(m, 83, gen=gen).to(dtype), randn(45, 83, gen=gen, scale=83**-0.5).to(dtype)
    b, skip = randn(45, gen=gen).to(dtype), randn(m, 45, gen=gen).to(dtype)
    out = torch.full((m, 45), float("nan"), dtype=dtype)
    assert Linear(w, b, activation="gelu")(x, out, residual=skip) is out
    check(out, F.gelu(linear64(x, w, b)) + skip.double(), TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_residual_on_every_kernel_kind(dtype):
    """Split-K (one and three splits: the residual is read by the last split only), tiled and
    TMA; K = 72 keeps rows 16-byte aligned for TMA."""
    gen = torch.Generator().manual_seed(1)
    x, w = randn(37, 72, gen=gen).to(dtype), randn(51, 72, gen=gen, scale=72**-0.5).to(dtype)
    skip = randn(37, 51, gen=gen).to(dtype)
    fn = Linear(w, None)
    plans = fn.candidates(x, every_kind=True, residual=True)
    assert {p["KIND"] for p in plans} == {"split_k", "tiled", "tma"}
    assert any(p["SPLIT_K"] > 1 for p in plans)
    for plan in plans:
        out = torch.full((37, 51), float("nan"), dtype=dtype)
        fn.launch(plan, x, out, skip)
        check(out, linear64(x, w) + skip.double(), TOLERANCE[dtype])


def test_residual_with_leading_dims_and_int8():
    from opbench.kernels.gemm.linear_int8 import Int8Linear

    gen = torch.Generator().manual_seed(2)
    x, w = randn(3, 5, 40, gen=gen).half(), randn(24, 40, gen=gen, scale=40**-0.5).half()
    skip = randn(3, 5, 24, gen=gen).half()
    ref = linear64(x, w) + skip.double()
    check(Linear(w, None)(x, residual=skip), ref, TOLERANCE[torch.float16])
    check(Int8Linear(w, None)(x, residual=skip), ref, INT8_TOLERANCE)


def test_residual_of_another_shape_or_layout_is_refused():
    gen = torch.Generator().manual_seed(3)
    x, w = randn(6, 16, gen=gen).half(), randn(8, 16, gen=gen).half()
    fn = Linear(w, None)
    with pytest.raises(ValueError, match="residual must be"):
        fn(x, residual=torch.zeros(6, 7, dtype=torch.float16))
    with pytest.raises(ValueError, match="laid out like the output"):
        fn(x, residual=torch.zeros(8, 6, dtype=torch.float16).T)


# --- SwiGLU ----------------------------------------------------------------------------------


def swiglu_inputs(m, n, k, dtype, seed, bias=False):
    gen = torch.Generator().manual_seed(seed)
    x = randn(m, k, gen=gen).to(dtype)
    wg, wu = (randn(n, k, gen=gen, scale=k**-0.5).to(dtype) for _ in range(2))
    bg, bu = (randn(n, gen=gen).to(dtype) if bias else None for _ in range(2))
    return x, wg, wu, bg, bu


def unfused_swiglu(x, wg, wu, bg=None, bu=None):
    """gate = linear(x); up = linear(x); silu(gate) * up: four layers, in float64."""
    return F.silu(linear64(x, wg, bg)) * linear64(x, wu, bu)


def test_interleaving_puts_gate_rows_first_in_each_pair():
    gate, up = torch.arange(6.0).view(3, 2), -torch.arange(6.0).view(3, 2)
    both = interleave_rows(gate, up)
    assert torch.equal(both[0::2], gate) and torch.equal(both[1::2], up)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 3, 67])
def test_swiglu_matches_the_unfused_chain(dtype, m):
    x, wg, wu, bg, bu = swiglu_inputs(m, 45, 83, dtype, seed=m, bias=m == 3)
    fn = build_swiglu(wg, wu, bg, bu)
    out = torch.full((m, 45), float("nan"), dtype=dtype)
    assert fn(x, out) is out
    check(out, unfused_swiglu(x, wg, wu, bg, bu), TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_on_every_kernel_kind(dtype):
    x, wg, wu, _, _ = swiglu_inputs(37, 51, 72, dtype, seed=4)
    fn = build_swiglu(wg, wu)
    plans = fn.candidates(x, every_kind=True)
    plans.append(gemm_plan("split_k", 16, 64, 32, 4, 1, split_k=2))  # pairs across 64 columns
    assert {p["KIND"] for p in plans} == {"split_k", "tiled", "tma"}
    ref = unfused_swiglu(x, wg, wu)
    for plan in plans:
        out = torch.full((37, 51), float("nan"), dtype=dtype)
        fn.launch(plan, x, out)
        check(out, ref, TOLERANCE[dtype])


def test_swiglu_int8_and_leading_dims():
    x, wg, wu, _, _ = swiglu_inputs(15, 24, 40, torch.float16, seed=5)
    fn = build_swiglu(wg, wu, quant="int8")
    y = fn(x.view(3, 5, 40))
    assert y.shape == (3, 5, 24) and y.dtype == torch.float16
    check(y.view(15, 24), unfused_swiglu(x, wg, wu), INT8_TOLERANCE)


def test_swiglu_then_residual():
    """The residual lands on the output's columns, not the GEMM's interleaved ones."""
    x, wg, wu, _, _ = swiglu_inputs(5, 12, 32, torch.float32, seed=6)
    skip = torch.randn(5, 12)
    out = build_swiglu(wg, wu)(x, residual=skip)
    check(out, unfused_swiglu(x, wg, wu) + skip.double(), TOLERANCE[torch.float32])


def test_swiglu_rejects_mismatched_projections():
    x, wg, wu, _, _ = swiglu_inputs(2, 8, 16, torch.float16, seed=7)
    with pytest.raises(ValueError, match="must match"):
        build_swiglu(wg, wu[:4])


def test_a_residual_never_takes_the_streaming_gemv() -> None:
    """fp16 rows M <= 16 go to the streaming GEMV, whose epilogue adds no residual: with a
    residual the plans offered are split-K / tile plans only, and a forced stream plan is
    refused (it used to drop the residual silently after the fused and quant branches met)."""
    import torch

    from opbench.kernels import Unsupported
    from opbench.kernels.gemm.linear import Linear

    gen = torch.Generator().manual_seed(11)
    w = (torch.randn(24, 40, generator=gen) / 6).half()
    x = torch.randn(3, 40, generator=gen).half()
    res = torch.randn(3, 24, generator=gen).half()
    layer = Linear(w, None, "none")
    assert any(p["KIND"] == "stream" for p in layer.candidates(x))
    assert not any(p["KIND"] == "stream" for p in layer.candidates(x, residual=True))
    stream = next(p for p in layer.candidates(x, every_kind=True) if p["KIND"] == "stream")
    out = torch.empty(3, 24, dtype=torch.float16)
    with pytest.raises(Unsupported):
        layer.launch(stream, x, out, res)
    got = layer.bind(x, residual=res).launch()
    want = x.double() @ w.double().T + res.double()
    assert ((got.double() - want).norm() / want.norm()).item() < 5e-3
