"""The fp8 GEMM on a producer's e4m3 codes (`Fp8Linear.bind_gemm_on`) with a residual in its
epilogue (LLaMA's down projection + ffn_res, fed by SwiGLU's product), and one norm's codes
read by several GEMMs (ffn_norm → gate and up), under the CPU interpreter on small odd shapes.
Each fused result against the unfused chain (our producer, the fp8 linear with its own
quantize pass, the add rounded to the layer's dtype as the add layer writes it), against the
quantized math in float64 and against the float64 unquantized math at the fp8 default. Every
output, code and scale starts as NaN. Helpers: test_fp8_producers.py."""

from __future__ import annotations

import pytest
import torch

from opbench.kernels.gemm.linear_fp8 import Fp8Linear
from opbench.kernels.launch import BoundKernels
from opbench.kernels.memory.norm import bind_norm
from opbench.kernels.memory.quantize import quantize_rows_call
from tests.kernels.test_fp8_producers import (
    CHAIN_TOLERANCE,
    EPS,
    QUANTIZED_TOLERANCE,
    TOLERANCE,
    linear_weights,
    norm64,
    randn,
    references,
    rel_l2,
)

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def nan(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype)


def glu_producer(gate: torch.Tensor, up: torch.Tensor):
    def produce(q, s):
        call, choice = quantize_rows_call(up, q, s, gate=gate, gate_mode="silu_mul")
        return BoundKernels.of([call], q, [choice])

    return produce


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_swiglu_product_then_fp8_linear_adds_the_residual(dtype: torch.dtype) -> None:
    """silu(gate) * up (29 x 150) → fp8 linear 150→43 + residual (29 x 43, 3x the output's
    size, as a residual stream is), every plan of the GEMM."""
    gate, up = randn(29, 150, seed=20, scale=2.0, dtype=dtype), randn(29, 150, seed=21, dtype=dtype)
    r = randn(29, 43, seed=22, scale=3.0, dtype=dtype)
    w, b = linear_weights(43, 150, seed=23, dtype=dtype)
    fp8 = Fp8Linear(w, b)
    product64 = torch.nn.functional.silu(gate.double()) * up.double()
    exact, quantized = references(product64, w, b, dtype)
    # The unfused chain: the product as the mul writes it, the fp8 linear, the add's rounding.
    alone = fp8(product64.to(dtype))
    unfused = (alone.double() + r.double()).to(dtype)
    plans = fp8.candidates(up, residual=True)
    assert plans, "a plan that adds a residual"
    for plan in [None, *plans]:
        out = nan(29, 43, dtype=dtype)
        bound = fp8.bind_on_codes((29,), dtype, up.device, glu_producer(gate, up), out=out,
                                  config=plan, residual=r)  # fmt: skip
        assert len(bound.calls) == 2, "the quantizer, then the GEMM: no add launch"
        assert bound.launch() is out
        assert rel_l2(out, quantized + r.double()) <= QUANTIZED_TOLERANCE[dtype], plan
        assert rel_l2(out, exact + r.double()) <= TOLERANCE, plan
        assert rel_l2(out, unfused.double()) <= CHAIN_TOLERANCE, plan
        # The residual is really added: without it the output is far off.
        assert rel_l2(out, exact) > 0.5, plan


def test_a_residual_of_another_shape_is_refused() -> None:
    gate, up = randn(5, 32, seed=24), randn(5, 32, seed=25)
    fp8 = Fp8Linear(*linear_weights(16, 32, seed=26, dtype=torch.float16))
    with pytest.raises(ValueError, match="residual"):
        fp8.bind_on_codes((5,), torch.float16, up.device, glu_producer(gate, up),
                          residual=randn(5, 8, seed=27))  # fmt: skip


@pytest.mark.parametrize("rms", [True, False])
def test_one_norms_codes_feed_two_linears(rms: bool) -> None:
    """rmsnorm/layernorm(77), codes written once, read by fp8 linears 77→51 and 77→29 (the
    second with a residual); each against its own unfused chain and float64."""
    dtype = torch.float16
    x, weight = randn(37, 77, seed=30), randn(77, seed=31)
    bias = None if rms else randn(77, seed=32)
    (wa, ba), (wb, bb) = linear_weights(51, 77, 33, dtype), linear_weights(29, 77, 35, dtype)
    a, b = Fp8Linear(wa, ba), Fp8Linear(wb, bb)
    r = randn(37, 29, seed=37, scale=2.0)
    xq, sx = a.code_buffers((37,), x.device)
    xq.view(torch.uint8).fill_(0x7F)  # e4m3's NaN
    sx.fill_(float("nan"))
    codes = bind_norm(x, weight, bias, EPS, xq, rms=rms, scale_out=sx)
    out_a, out_b = nan(37, 51, dtype=dtype), nan(37, 29, dtype=dtype)
    ga = a.bind_gemm_on(xq, sx, (37,), dtype, out_a)
    gb = b.bind_gemm_on(xq, sx, (37,), dtype, out_b, residual=r)
    BoundKernels.of([*codes.calls, *ga.calls, *gb.calls], out_b).launch()
    normed = bind_norm(x, weight, bias, EPS, rms=rms).launch()
    y64 = norm64(x, weight, bias, rms)
    for out, fp8, w_, b_, res in ((out_a, a, wa, ba, None), (out_b, b, wb, bb, r)):
        exact, quantized = references(y64, w_, b_, dtype)
        unfused = fp8(normed).double()
        if res is not None:
            exact, quantized = exact + res.double(), quantized + res.double()
            unfused = (unfused + res.double()).to(dtype).double()
        assert rel_l2(out, quantized) <= QUANTIZED_TOLERANCE[dtype]
        assert rel_l2(out, exact) <= TOLERANCE
        assert rel_l2(out, unfused) <= CHAIN_TOLERANCE


def test_codes_of_another_shape_are_refused() -> None:
    fp8 = Fp8Linear(*linear_weights(16, 32, seed=38, dtype=torch.float16))
    xq, sx = fp8.code_buffers((5,), torch.device("cpu"))
    with pytest.raises(ValueError, match="codes must be"):
        fp8.bind_gemm_on(xq, sx, (6,), torch.float16)
