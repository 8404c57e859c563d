"""fp8 (e4m3, row-wise scales) linear vs float64, under the CPU interpreter (Triton's
interpreter multiplies float8e4nv tiles exactly), plus the e4m3 rounding of the activation
quantizer against torch's cast. A GPU test runs the same checks on the fp8 tensor cores.

Two references: the unquantized layer (the suite's check, tolerance QUANT_TOLERANCE["fp8"],
twice the rounding's error: tests/unit/spec/test_tolerance.py) and the quantized math in
float64 (dequantized x and W): against that only the fp32 sums and the output's fp16 rounding
remain, so a wrong scale, code or tile shows at once.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.gemm.linear_fp8 import Fp8Linear
from opbench.kernels.memory.quantize import quantize_rows
from opbench.kernels.quant import dequantize_rows, fp8_rows
from opbench.spec.model import QUANT_TOLERANCE

TOLERANCE = QUANT_TOLERANCE["fp8"]
# fp32 sums of exact e4m3 products, output rounded to fp16 (2^-11) or bf16 (2^-8).
QUANTIZED_TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 6e-3}
ACTIVATIONS = {"none": lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu}

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def make_inputs(m: int, n: int, k: int, dtype: torch.dtype, seed: int, device: str = "cpu"):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    return x.to(device), w.to(device), b.to(device)


def references(x, w, b, activation: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(the unquantized layer, the quantized math) in float64."""
    act = ACTIVATIONS[activation]
    exact = act(x.double() @ w.double().T + b.double())
    xq = dequantize_rows(*fp8_rows(x))
    wq = dequantize_rows(*fp8_rows(w))
    return exact, act(xq @ wq.T + b.double())


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float((out.double().cpu() - ref.cpu()).norm() / ref.cpu().norm())


def test_activation_quantizer_matches_torchs_e4m3_cast() -> None:
    """Codes and scales of the kernel equal kernels.quant.fp8_rows (torch's round-to-nearest-even
    cast), on rows with values across every binade, subnormals and a zero row."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(5, 77, generator=gen) * torch.tensor([1e-3, 1.0, 30.0, 1e3, 0.0])[:, None]
    x[1, :5] = torch.tensor([1.9375, 1.96875, -3.25, 0.0009, 7.0])
    x = x.half()
    q = torch.full((5, 77), float("nan")).to(torch.float8_e4m3fn)
    q, scale = quantize_rows(x, q=q, scale=torch.full((5,), float("nan")))
    want_q, want_scale = fp8_rows(x)
    # Values, not bytes: torch keeps the sign of a -0.0 input, the kernel writes +0.0.
    assert torch.equal(q.float(), want_q.float())
    assert torch.equal(scale, want_scale)
    assert float(scale[4]) == 0.0 and not q[4].float().any()


# Each dtype once and each epilogue once (the epilogue's activation runs in fp32 before the one
# cast to the output dtype: no pair of them meets anywhere else).
@pytest.mark.parametrize("dtype,activation", [(torch.float16, "gelu"), (torch.bfloat16, "none")])
def test_every_kernel_kind(dtype: torch.dtype, activation: str) -> None:
    """Split-K (1 and 3 splits), tiled and TMA on e4m3 operands; K = 80 for TMA's alignment."""
    x, w, b = make_inputs(37, 51, 80, dtype, seed=7)
    fn = Fp8Linear(w, b, activation=activation)
    plans = fn.candidates(x, every_kind=True)
    assert {p["KIND"] for p in plans} == {"split_k", "tiled", "tma"}
    assert not any(p["FUSED_QUANT"] for p in plans)
    exact, quantized = references(x, w, b, activation)
    for plan in plans:
        out = torch.full((37, 51), float("nan"), dtype=dtype)
        fn.launch(plan, x, out)
        assert rel_l2(out, quantized) <= QUANTIZED_TOLERANCE[dtype], plan
        assert 1e-3 < rel_l2(out, exact) <= TOLERANCE, plan
    assert int(fn.arrivals.abs().sum()) == 0


def test_decode_row_and_odd_k() -> None:
    x, w, b = make_inputs(1, 45, 83, torch.float16, seed=5)
    fn = Fp8Linear(w, b, activation="silu")
    out = torch.full((1, 45), float("nan"), dtype=torch.float16)
    assert fn(x, out=out) is out
    exact, quantized = references(x, w, b, "silu")
    assert rel_l2(out, quantized) <= QUANTIZED_TOLERANCE[torch.float16]
    assert rel_l2(out, exact) <= TOLERANCE


def test_rejects_float32() -> None:
    _, w, b = make_inputs(1, 8, 16, torch.float32, seed=1)
    with pytest.raises(Unsupported, match="float16/bfloat16"):
        Fp8Linear(w, b)
    fn = Fp8Linear(w.half(), b.half())
    with pytest.raises(Unsupported):
        fn(torch.randn(2, 16))


@pytest.mark.gpu(capability=(8, 9))  # fp8 tensor cores
@pytest.mark.parametrize("m", [1, 16, 300])
def test_on_the_gpu(m: int) -> None:
    """The same two references on the GPU's fp8 tensor cores, every kernel kind, LLaMA-like K.
    A plan too large for the GPU (shared memory) is skipped, as the tuner skips it."""
    from triton.runtime.errors import OutOfResources

    x, w, b = make_inputs(m, 384, 1024, torch.bfloat16, seed=m, device="cuda")
    fn = Fp8Linear(w, b, activation="gelu")
    exact, quantized = references(x.cpu(), w.cpu(), b.cpu(), "gelu")
    ran = 0
    for plan in fn.candidates(x, every_kind=True):
        out = torch.full((m, 384), float("nan"), dtype=torch.bfloat16, device="cuda")
        try:
            fn.launch(plan, x, out)
        except OutOfResources:
            continue
        torch.cuda.synchronize()
        ran += 1
        assert rel_l2(out, quantized) <= 1e-2, plan  # fast fp8 accumulation on Hopper
        assert rel_l2(out, exact) <= TOLERANCE, plan
    assert ran >= 3
