"""add → layernorm / rmsnorm in one kernel (the pre-norm residual stream): both outputs, the sum
and its normalisation, against the unfused chain computed in float64, under the CPU interpreter.

Both outputs are prefilled with NaN and must be fully written. Hidden sizes from 1 to rows
longer than one block (the two-pass variant, which re-reads the sum it wrote), 3-D inputs,
missing weight or bias, float32/float16/bfloat16.
"""

from __future__ import annotations

import pytest
import torch

from opbench.kernels.memory.norm import bind_norm
from opbench.kernels.tuning import Config

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
EPS = 1e-5
# The looped variant on small rows: 16-element chunks, so a 37-wide row takes three.
LOOPED = Config.of(BLOCK_R=2, BLOCK_L=16, ONE_PASS=False, num_warps=1, num_stages=1)
pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered"),
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0"),
]


def norm64(s: torch.Tensor, weight, bias, rms: bool) -> torch.Tensor:
    s = s.double()
    if rms:
        y = s / torch.sqrt((s * s).mean(-1, keepdim=True) + EPS)
    else:
        centred = s - s.mean(-1, keepdim=True)
        y = centred / torch.sqrt((centred**2).mean(-1, keepdim=True) + EPS)
    y = y if weight is None else y * weight.double()
    return y if bias is None else y + bias.double()


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def run(shape, dtype, rms, affine=(True, True), config=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x, residual = (torch.randn(*shape, generator=gen).to(dtype) for _ in range(2))
    hidden = shape[-1]
    weight = torch.randn(hidden, generator=gen).to(dtype) if affine[0] else None
    bias = torch.randn(hidden, generator=gen).to(dtype) if affine[1] and not rms else None
    out, total = (torch.full(shape, float("nan"), dtype=dtype) for _ in range(2))
    bound = bind_norm(x, weight, bias, EPS, out, rms=rms, config=config, residual=residual,
                      sum_out=total)  # fmt: skip
    assert bound.launch() is out and bound.extra == (total,)
    assert not torch.isnan(out).any() and not torch.isnan(total).any(), "unwritten outputs"
    return x, residual, weight, bias, out, total


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rms", [True, False], ids=["rmsnorm", "layernorm"])
@pytest.mark.parametrize("shape", [(5, 37), (2, 3, 129), (3, 1)], ids=str)
def test_both_outputs_match_the_unfused_chain(shape, rms, dtype):
    x, residual, weight, bias, out, total = run(shape, dtype, rms, seed=len(shape))
    unfused_sum = x.double() + residual.double()  # add, then the norm: in float64
    assert rel_l2(total, unfused_sum) <= TOLERANCE[dtype]
    assert rel_l2(out, norm64(unfused_sum, weight, bias, rms)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rms", [True, False], ids=["rmsnorm", "layernorm"])
def test_two_pass_rows_reread_the_sum_they_wrote(rms, dtype):
    x, residual, weight, bias, out, total = run((7, 37), dtype, rms, config=LOOPED, seed=3)
    unfused_sum = x.double() + residual.double()
    assert rel_l2(total, unfused_sum) <= TOLERANCE[dtype]
    assert rel_l2(out, norm64(unfused_sum, weight, bias, rms)) <= TOLERANCE[dtype]


def test_the_output_is_the_norm_of_the_sum_written():
    """y is computed from s rounded to fp16, exactly what an add layer would hand the norm."""
    _, _, weight, bias, out, total = run((4, 33), torch.float16, False, seed=4)
    assert rel_l2(out, norm64(total, weight, bias, rms=False)) <= 1e-3


@pytest.mark.parametrize("affine", [(False, False), (True, False), (False, True)])
def test_without_weight_or_bias(affine):
    x, residual, weight, bias, out, _ = run((3, 20), torch.float32, False, affine, seed=5)
    ref = norm64(x.double() + residual.double(), weight, bias, rms=False)
    assert rel_l2(out, ref) <= TOLERANCE[torch.float32]


def test_a_residual_of_another_shape_or_layout_is_refused():
    x = torch.randn(4, 6)
    with pytest.raises(ValueError, match="residual must be"):
        bind_norm(x, None, None, EPS, rms=True, residual=torch.randn(4, 5))
    with pytest.raises(ValueError, match="laid out like x"):
        bind_norm(x, None, None, EPS, rms=True, residual=torch.randn(6, 4).T)
