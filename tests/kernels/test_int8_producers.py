"""The layers before an int8 W8A8 linear writing its int8 codes and row scales themselves
(rmsnorm / layernorm with INT8_OUT, the quantizer with SwiGLU's silu(gate) * up), and the int8
GEMM run on those codes (`Int8Linear.bind_on_codes`, linear_codes.py), under the CPU
interpreter on small odd shapes. The int8 twin of test_fp8_producers.py, with its checks:
- codes and scales against a float64 emulation of the layer and of the int8 row rule (s =
  max|y| / 127, round half away from zero): the scale to fp32 rounding, each code the nearest
  integer of the float64 value, or the other of two nearly tied neighbours;
- the fused group against the unfused chain (our norm / mul, then the int8 linear with its own
  quantize pass) and against float64, quantized and unquantized.
Every output starts as NaN (codes: a sentinel the rule never writes, -128).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels.gemm.linear_int8 import Int8Linear
from opbench.kernels.launch import BoundKernels
from opbench.kernels.memory import rows as row_module
from opbench.kernels.memory.norm import bind_norm
from opbench.kernels.memory.quantize import quantize_rows_call
from opbench.kernels.quant import INT8_MAX, dequantize_rows, int8_rows
from opbench.spec.model import QUANT_TOLERANCE
from tests.kernels.test_fp8_producers import norm64, randn, rel_l2

TOLERANCE = QUANT_TOLERANCE["int8"]
# Against the quantized math in float64: the GEMM sums exactly in int32, so what is left is
# the output's rounding to fp16/bf16 and the rare near-tie code (one step of 1/127).
QUANTIZED_TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 6e-3}
# Fused against unfused: the unfused chain rounds the intermediate to fp16/bf16 first, which
# moves some values across an int8 rounding boundary (one step of max/127 each).
CHAIN_TOLERANCE = TOLERANCE / 4
EPS = 1e-5
UNWRITTEN = -128  # the int8 rule clamps to [-127, 127]: no written code is -128

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def poisoned_codes(m: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((m, k), UNWRITTEN, dtype=torch.int8), torch.full((m,), float("nan"))


def check_codes(q: torch.Tensor, scale: torch.Tensor, y64: torch.Tensor) -> None:
    """q, scale against the int8 row rule applied to the float64 values y64."""
    assert not torch.isnan(scale).any() and not (q == UNWRITTEN).any(), "not written"
    absmax = y64.abs().amax(dim=1)
    torch.testing.assert_close(scale.double(), absmax / INT8_MAX, rtol=2e-6, atol=0.0)
    v = y64 * (INT8_MAX / absmax.clamp_min(1e-300))[:, None]
    want = torch.where(v >= 0, torch.floor(v + 0.5), torch.ceil(v - 0.5)).clamp(-127, 127)
    got = q.double()
    differ = got != want
    # A differing code is one step away and as near to the float64 value as the expected one,
    # up to fp32's rounding of the layer's arithmetic (a value within ~1e-5 of a half).
    assert bool(((got - want).abs()[differ] == 1).all()), "a code is more than one step off"
    slack = (got - v).abs() - (want - v).abs()
    assert bool((slack[differ] <= 1e-4 * v.abs()[differ] + 1e-9).all()), "a code is off"
    assert int(differ.sum()) <= max(2, q.numel() // 200), f"{int(differ.sum())} near ties"


@pytest.mark.parametrize("one_pass", [True, False])
@pytest.mark.parametrize("rms", [True, False])
def test_norm_writes_the_int8_codes_of_its_fp32_output(rms: bool, one_pass: bool, monkeypatch):
    """7 rows of 77, affine, with and without a residual; looped over 16-wide chunks too."""
    if not one_pass:
        monkeypatch.setattr(row_module, "MAX_ONE_PASS_BLOCK", 16)
        monkeypatch.setattr(row_module, "LOOP_BLOCK", 16)
    x, r = randn(7, 77, seed=21), randn(7, 77, seed=22, scale=3.0)
    weight = randn(77, seed=23)
    bias = None if rms else randn(77, seed=24)
    for residual in (None, r):
        q, scale = poisoned_codes(7, 77)
        total = torch.full((7, 77), float("nan"), dtype=torch.float16)
        bound = bind_norm(x, weight, bias, EPS, q, rms=rms, scale_out=scale, residual=residual,
                          sum_out=total if residual is not None else None,
                          code_dtype=torch.int8)  # fmt: skip
        assert bound.launch() is q
        assert bound.choices[0].kernel.endswith("_int8")
        check_codes(q, scale, norm64(x, weight, bias, rms, residual))
        if residual is not None:
            assert torch.equal(total, x + r), "the sum is written as the add would"


def test_int8_norm_codes_of_a_zero_row_and_a_wrong_buffer() -> None:
    x = randn(5, 33, seed=25, dtype=torch.bfloat16)
    x[2] = 0.0
    q, scale = poisoned_codes(5, 33)
    bind_norm(x, None, None, EPS, q, rms=True, scale_out=scale, code_dtype=torch.int8).launch()
    assert float(scale[2]) == 0.0 and not q[2].any()
    keep = [0, 1, 3, 4]
    check_codes(q[keep], scale[keep], norm64(x, None, None, True)[keep])
    with pytest.raises(ValueError, match="int8"):  # e4m3 buffer for int8 codes
        bind_norm(x, None, None, EPS, torch.empty(5, 33, dtype=torch.float8_e4m3fn), rms=True,
                  scale_out=torch.empty(5), code_dtype=torch.int8)  # fmt: skip
    with pytest.raises(ValueError, match="float8_e4m3fn or int8"):
        bind_norm(x, None, None, EPS, None, rms=True, scale_out=torch.empty(5),
                  code_dtype=torch.float16)  # fmt: skip


@pytest.mark.parametrize("k", [50, 150])  # one step of 64, and a max pass then a code pass
def test_quantizer_writes_the_int8_codes_of_the_gated_product(k: int) -> None:
    gate, up = randn(6, k, seed=26, scale=2.0), randn(6, k, seed=27)
    q, scale = poisoned_codes(6, k)
    quantize_rows_call(up, q, scale, gate=gate, gate_mode="silu_mul")[0].call()
    check_codes(q, scale, F.silu(gate.double()) * up.double())


def references(a64: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dtype: torch.dtype):
    """(unquantized, quantized) float64 outputs of the linear on the float64 input a64."""
    exact = a64.to(dtype).double() @ w.double().T + b.double()
    quantized = dequantize_rows(*int8_rows(a64)) @ dequantize_rows(*int8_rows(w)).T + b.double()
    return exact, quantized


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norm_then_int8_linear_on_codes_matches_the_unfused_chain(dtype: torch.dtype) -> None:
    """rmsnorm(80) → int8 linear 80→51, 37 rows, every candidate plan of the GEMM."""
    x, weight = randn(37, 80, seed=28, dtype=dtype), randn(80, seed=29, dtype=dtype)
    w = randn(51, 80, seed=30, dtype=dtype, scale=80**-0.5)
    b = randn(51, seed=31, dtype=dtype)
    layer = Int8Linear(w, b)

    def produce(q, s):
        return bind_norm(x, weight, None, EPS, q, rms=True, scale_out=s, code_dtype=torch.int8)

    out = torch.full((37, 51), float("nan"), dtype=dtype)
    bound = layer.bind_on_codes((37,), dtype, x.device, produce, out=out)
    assert [c.kernel.fn.__name__ for c in bound.calls][0] == "_norm_kernel"
    assert len(bound.calls) == 2, "the norm, then the GEMM: no quantize pass"
    assert bound.choices[-1].key.startswith("int8-codes|")
    assert bound.launch() is out
    unfused = layer(bind_norm(x, weight, None, EPS, rms=True).launch())
    exact, quantized = references(norm64(x, weight, None, True), w, b, dtype)
    assert rel_l2(out, quantized) <= QUANTIZED_TOLERANCE[dtype]
    assert rel_l2(out, exact) <= TOLERANCE
    assert rel_l2(out, unfused.double()) <= CHAIN_TOLERANCE
    for plan in layer.candidates(x):
        again = torch.full((37, 51), float("nan"), dtype=dtype)
        layer.bind_on_codes((37,), dtype, x.device, produce, out=again, config=plan).launch()
        assert rel_l2(again, quantized) <= QUANTIZED_TOLERANCE[dtype], plan


def test_swiglu_product_then_int8_linear_on_codes() -> None:
    """silu(gate) * up (29 x 150: two passes over the row) → int8 linear 150→43."""
    gate, up = randn(29, 150, seed=32, scale=2.0), randn(29, 150, seed=33)
    w = randn(43, 150, seed=34, scale=150**-0.5)
    b = randn(43, seed=35)
    layer = Int8Linear(w, b)
    out = torch.full((29, 43), float("nan"), dtype=torch.float16)

    def produce(q, s):
        call, choice = quantize_rows_call(up, q, s, gate=gate, gate_mode="silu_mul")
        return BoundKernels.of([call], q, [choice])

    bound = layer.bind_on_codes((29,), torch.float16, up.device, produce, out=out)
    assert len(bound.calls) == 2 and bound.launch() is out
    exact, quantized = references(F.silu(gate.double()) * up.double(), w, b, torch.float16)
    assert rel_l2(out, quantized) <= QUANTIZED_TOLERANCE[torch.float16]
    assert rel_l2(out, exact) <= TOLERANCE
    with pytest.raises(ValueError, match="codes must be torch.int8"):
        layer.bind_gemm_on(torch.zeros(29, 150, dtype=torch.float8_e4m3fn), torch.ones(29),
                           (29,), torch.float16)  # fmt: skip
