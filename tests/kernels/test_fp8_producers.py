"""The layers before an fp8 linear writing its e4m3 codes and row scales themselves (rmsnorm /
layernorm with FP8_OUT, the quantizer with SwiGLU's silu(gate) * up), and the fp8 GEMM run on
those codes (`Fp8Linear.bind_on_codes`), under the CPU interpreter on small odd shapes.

Three checks, as for every quantized kernel (docs/suite-format.md):
- codes and scales against a float64 emulation of the layer and of the row quantizer: the
  scale to fp32 rounding, each code the nearest e4m3 value of the float64 one (or, within
  fp32's rounding of the layer's arithmetic, the other of two nearly tied neighbours);
- the fused group against the unfused chain it replaces (our norm / mul, then the fp8 linear
  with its own quantize pass), within the quantized tolerance;
- the fused group against the float64 unquantized math, within the fp8 default (8e-2,
  QUANT_TOLERANCE), and against the quantized math in float64.
Every output starts as NaN.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels.gemm.linear_fp8 import Fp8Linear
from opbench.kernels.memory import rows as row_module
from opbench.kernels.memory.norm import bind_norm
from opbench.kernels.memory.quantize import quantize_rows_call
from opbench.kernels.quant import FP8_MAX, dequantize_rows, fp8_rows
from opbench.spec.model import QUANT_TOLERANCE

TOLERANCE = QUANT_TOLERANCE["fp8"]
QUANTIZED_TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 6e-3}  # as test_linear_fp8.py
EPS = 1e-5
# Fused against unfused: the two quantize the same values but for the unfused chain's rounding
# of the intermediate to fp16/bf16, which moves a few values across an e4m3 rounding boundary
# (one step, 2^-4 relative, each). Measured 4e-3 (fp16) to 8.5e-3 (bf16) here; a quarter of
# the fp8 tolerance bounds it.
CHAIN_TOLERANCE = TOLERANCE / 4

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float16, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def poisoned_codes(m: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.full((m, k), float("nan")).to(torch.float8_e4m3fn),
            torch.full((m,), float("nan")))  # fmt: skip


def norm64(x, weight, bias, rms: bool, residual=None) -> torch.Tensor:
    """The norm in float64 (of x + residual rounded to x's dtype, as the add writes it)."""
    if residual is not None:
        x = (x.double() + residual.double()).to(x.dtype)
    v = x.double()
    if rms:
        y = v / torch.sqrt((v * v).mean(dim=1, keepdim=True) + EPS)
    else:
        centred = v - v.mean(dim=1, keepdim=True)
        y = centred / torch.sqrt((centred * centred).mean(dim=1, keepdim=True) + EPS)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def check_codes(q: torch.Tensor, scale: torch.Tensor, y64: torch.Tensor) -> None:
    """q, scale against the fp8 row rule applied to the float64 values y64."""
    assert not torch.isnan(scale).any() and not torch.isnan(q.float()).any(), "not written"
    absmax = y64.abs().amax(dim=1)
    torch.testing.assert_close(scale.double(), absmax / FP8_MAX, rtol=2e-6, atol=0.0)
    v = y64 * (FP8_MAX / absmax.clamp_min(1e-300))[:, None]
    want = v.clamp(-FP8_MAX, FP8_MAX).to(torch.float32).to(torch.float8_e4m3fn).double()
    got = q.double()
    differ = got != want
    # A differing code is as near to the float64 value as the expected one, up to fp32's
    # rounding of the layer's own arithmetic: a near tie, never a wrong code.
    slack = (got - v).abs() - (want - v).abs()
    assert bool((slack[differ] <= 1e-4 * v.abs()[differ] + 1e-9).all()), "a code is off"
    assert int(differ.sum()) <= max(2, q.numel() // 200), f"{int(differ.sum())} near ties"


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float((out.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("one_pass", [True, False])
@pytest.mark.parametrize("rms", [True, False])
def test_norm_writes_the_codes_of_its_fp32_output(rms: bool, one_pass: bool, monkeypatch) -> None:
    """7 rows of 77, affine, with a residual; looped (three passes over 16-wide chunks) too."""
    if not one_pass:
        monkeypatch.setattr(row_module, "MAX_ONE_PASS_BLOCK", 16)
        monkeypatch.setattr(row_module, "LOOP_BLOCK", 16)
    x, r = randn(7, 77, seed=1), randn(7, 77, seed=2, scale=3.0)
    weight = randn(77, seed=3)
    bias = None if rms else randn(77, seed=4)
    for residual in (None, r):
        q, scale = poisoned_codes(7, 77)
        total = torch.full((7, 77), float("nan"), dtype=torch.float16)
        bound = bind_norm(x, weight, bias, EPS, q, rms=rms, scale_out=scale, residual=residual,
                          sum_out=total if residual is not None else None)  # fmt: skip
        assert bound.launch() is q
        check_codes(q, scale, norm64(x, weight, bias, rms, residual))
        if residual is not None:
            assert torch.equal(total, x + r), "the sum is written as the add would"


def test_norm_codes_of_a_zero_row_and_without_weight() -> None:
    x = randn(5, 33, seed=5, dtype=torch.bfloat16)
    x[2] = 0.0
    q, scale = poisoned_codes(5, 33)
    bind_norm(x, None, None, EPS, q, rms=True, scale_out=scale).launch()
    assert float(scale[2]) == 0.0 and not q[2].float().any()
    check_codes(q[[0, 1, 3, 4]], scale[[0, 1, 3, 4]], norm64(x, None, None, True)[[0, 1, 3, 4]])


def test_norm_codes_refuse_a_wrong_buffer() -> None:
    x = randn(4, 16, seed=6)
    with pytest.raises(ValueError, match="scale_out"):
        bind_norm(x, None, None, EPS, None, rms=True, scale_out=torch.empty(3))
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        bind_norm(x, None, None, EPS, torch.empty(4, 16), rms=True, scale_out=torch.empty(4))


@pytest.mark.parametrize("k", [50, 150])  # one step of 64, and a max pass then a code pass
@pytest.mark.parametrize("mode", ["mul", "silu_mul"])
def test_quantizer_writes_the_codes_of_the_gated_product(mode: str, k: int) -> None:
    gate, up = randn(6, k, seed=7, scale=2.0), randn(6, k, seed=8)
    q, scale = poisoned_codes(6, k)
    quantize_rows_call(up, q, scale, gate=gate, gate_mode=mode)[0].call()
    g = gate.double()
    check_codes(q, scale, (F.silu(g) if mode == "silu_mul" else g) * up.double())


def test_quantizer_refuses_a_gate_without_its_mode() -> None:
    x = randn(2, 8, seed=9)
    q, scale = poisoned_codes(2, 8)
    with pytest.raises(ValueError, match="gate_mode"):
        quantize_rows_call(x, q, scale, gate=x)
    with pytest.raises(ValueError, match="shape"):
        quantize_rows_call(x, q, scale, gate=x[:, :4], gate_mode="mul")


def linear_weights(n: int, k: int, seed: int, dtype: torch.dtype):
    return randn(n, k, seed=seed, dtype=dtype, scale=k**-0.5), randn(n, seed=seed + 1, dtype=dtype)


def references(a64: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dtype: torch.dtype):
    """(unquantized, quantized) float64 outputs of the linear on the float64 input a64: the
    unquantized chain rounds a64 to the layer's dtype as the unfused layer writes it."""
    exact = a64.to(dtype).double() @ w.double().T + b.double()
    quantized = dequantize_rows(*fp8_rows(a64)) @ dequantize_rows(*fp8_rows(w)).T + b.double()
    return exact, quantized


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norm_then_fp8_linear_on_codes_matches_the_unfused_chain(dtype: torch.dtype) -> None:
    """rmsnorm(77) → fp8 linear 77→51 (fp16/bf16; K = 77: tiled and split-K plans), 37 rows."""
    x, weight = randn(37, 77, seed=10, dtype=dtype), randn(77, seed=11, dtype=dtype)
    w, b = linear_weights(51, 77, seed=12, dtype=dtype)
    fp8 = Fp8Linear(w, b)
    out = torch.full((37, 51), float("nan"), dtype=dtype)
    bound = fp8.bind_on_codes(
        (37,), dtype, x.device,
        lambda q, s: bind_norm(x, weight, None, EPS, q, rms=True, scale_out=s), out=out,
    )  # fmt: skip
    assert [c.kernel.fn.__name__ for c in bound.calls][0] == "_norm_kernel"
    assert len(bound.calls) == 2, "the norm, then the GEMM: no quantize pass"
    assert bound.launch() is out
    unfused = fp8(bind_norm(x, weight, None, EPS, rms=True).launch())
    exact, quantized = references(norm64(x, weight, None, True), w, b, dtype)
    assert rel_l2(out, quantized) <= QUANTIZED_TOLERANCE[dtype]
    assert rel_l2(out, exact) <= TOLERANCE
    assert rel_l2(out, unfused.double()) <= CHAIN_TOLERANCE
    for plan in fp8.candidates(x):  # every plan of the GEMM on the same codes
        again = torch.full((37, 51), float("nan"), dtype=dtype)
        fp8.bind_on_codes(
            (37,),
            dtype,
            x.device,
            lambda q, s: bind_norm(x, weight, None, EPS, q, rms=True, scale_out=s),
            out=again,
            config=plan,
        ).launch()
        assert rel_l2(again, quantized) <= QUANTIZED_TOLERANCE[dtype], plan


def test_swiglu_product_then_fp8_linear_on_codes() -> None:
    """silu(gate) * up (29 x 150: two passes over the row) → fp8 linear 150→43."""
    gate, up = randn(29, 150, seed=13, scale=2.0), randn(29, 150, seed=14)
    w, b = linear_weights(43, 150, seed=15, dtype=torch.float16)
    fp8 = Fp8Linear(w, b)
    out = torch.full((29, 43), float("nan"), dtype=torch.float16)

    def produce(q, s):
        from opbench.kernels.launch import BoundKernels

        call, choice = quantize_rows_call(up, q, s, gate=gate, gate_mode="silu_mul")
        return BoundKernels.of([call], q, [choice])

    fp8.bind_on_codes((29,), torch.float16, up.device, produce, out=out).launch()
    product = F.silu(gate.double()) * up.double()
    unfused = fp8((F.silu(gate.float()).half() * up).half())
    exact, quantized = references(product, w, b, torch.float16)
    assert rel_l2(out, quantized) <= QUANTIZED_TOLERANCE[torch.float16]
    assert rel_l2(out, exact) <= TOLERANCE
    assert rel_l2(out, unfused.double()) <= CHAIN_TOLERANCE
