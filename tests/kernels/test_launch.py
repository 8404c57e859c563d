"""Bind once, launch many (kernels/launch.py), for every kernel family, under the interpreter.

For each family: the bound launch writes the same values as the family's one-shot call (which
binds again), into the one output buffer allocated at bind; a second launch after the input
changed in place recomputes from the new values into the same buffer; and the backend's
`LayerKernel` re-binds when a tensor of another shape comes, and only then.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from opbench.backends.triton_table import LayerKernel
from opbench.kernels.attention.attention_int8_layer import Int8Attention
from opbench.kernels.attention.attention_layer import Attention
from opbench.kernels.conv.conv import build_conv2d
from opbench.kernels.conv.conv_int8 import build_conv2d_int8
from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_int8 import Int8Linear
from opbench.kernels.host import fold_batchnorm
from opbench.kernels.launch import signature_args
from opbench.kernels.memory.activation import activation, bind_activation
from opbench.kernels.memory.batchnorm import batchnorm2d, bind_batchnorm2d
from opbench.kernels.memory.norm import bind_norm, layernorm, rmsnorm
from opbench.kernels.memory.pool import avgpool2d, bind_pool2d, maxpool2d
from opbench.kernels.memory.softmax import bind_softmax, softmax
from opbench.kernels.memory.transpose import bind_permute, permute

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def randn(*shape: int, dtype: torch.dtype = torch.float16, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def _linear(int8: bool):
    w, b = randn(24, 40, seed=1) / 6, randn(24, seed=2)
    layer = (Int8Linear if int8 else Linear)(w, b, activation="relu")
    return layer.bind, layer, (5, 40)


def _conv(int8: bool):
    w, b = randn(12, 18, 3, 3, seed=3) / 12, randn(12, seed=4)
    build = build_conv2d_int8 if int8 else build_conv2d
    conv = build(w, b, stride=1, padding=1, dilation=1, activation="silu")
    return conv.bind, conv, (2, 18, 7, 6)


def _attention(int8: bool):
    layer = (Int8Attention if int8 else Attention)(heads=2, causal=True, packed_qkv=True)
    return layer.bind, layer, (1, 19, 3 * 2 * 16)


def _bn():
    stats = (randn(6, dtype=torch.float32, seed=5), torch.rand(6) + 0.5, None, None, 1e-5)
    scale, shift = (t.float().contiguous() for t in fold_batchnorm(*stats))
    return (lambda x: bind_batchnorm2d(x, scale, shift)), (lambda x: batchnorm2d(x, scale, shift))


W16, B16 = randn(33, seed=6), randn(33, seed=7)
# name -> (binder, one-shot call, input shape)
FAMILIES = {
    "linear": _linear(int8=False),
    "linear_int8": _linear(int8=True),
    "conv2d": _conv(int8=False),
    "conv2d_int8": _conv(int8=True),
    "attention": _attention(int8=False),
    "attention_int8": _attention(int8=True),
    "layernorm": (lambda x: bind_norm(x, W16, B16, 1e-5, rms=False),
                  lambda x: layernorm(x, W16, B16, 1e-5), (3, 5, 33)),
    "rmsnorm": (lambda x: bind_norm(x, W16, None, 1e-5, rms=True),
                lambda x: rmsnorm(x, W16, 1e-5), (7, 33)),
    "softmax": (lambda x: bind_softmax(x, 1), lambda x: softmax(x, 1), (3, 29, 4)),
    "gelu": (lambda x: bind_activation(x, "gelu"), lambda x: activation(x, "gelu"), (5, 37)),
    "maxpool2d": (lambda x: bind_pool2d(x, 3, 2, 1, is_max=True),
                  lambda x: maxpool2d(x, 3, 2, 1), (2, 3, 9, 10)),
    "global avgpool2d": (lambda x: bind_pool2d(x, (5, 4), 1, 0, is_max=False),
                         lambda x: avgpool2d(x, (5, 4), 1, 0), (2, 3, 5, 4)),
    "batchnorm2d": (*_bn(), (2, 6, 5, 7)),
    "permute": (lambda x: bind_permute(x, (0, 2, 1)), lambda x: permute(x, (0, 2, 1)),
                (4, 9, 13)),
}  # fmt: skip


@pytest.mark.parametrize("name", list(FAMILIES))
def test_bound_launch_matches_one_shot_call_and_reuses_its_buffer(name: str) -> None:
    binder, one_shot, shape = FAMILIES[name]
    x = randn(*shape, dtype=torch.float32 if name == "batchnorm2d" else torch.float16, seed=9)
    bound = binder(x)
    assert bound.choices, "every bound kernel reports its configuration"
    bound.out.fill_(float("nan"))
    first = bound.launch()
    assert first is bound.out
    assert not torch.isnan(first).any(), "the bound launch writes every output"
    assert torch.equal(first, one_shot(x)), "bound and one-shot calls compute the same"
    pointer = first.data_ptr()
    x.mul_(-0.5)  # new values in the bound input: the next launch must read them
    second = bound.launch()
    assert second is bound.out and second.data_ptr() == pointer, "no new output buffer"
    assert torch.equal(second, one_shot(x))


@pytest.mark.parametrize("name", ["linear", "softmax", "conv2d", "batchnorm2d"])
def test_layer_kernel_rebinds_only_for_a_new_input(name: str, monkeypatch) -> None:
    binder, one_shot, shape = FAMILIES[name]
    dtype = torch.float32 if name == "batchnorm2d" else torch.float16
    binds = []

    def counting(x):
        binds.append(tuple(x.shape))
        return binder(x)

    kernel = LayerKernel(counting)
    x = randn(*shape, dtype=dtype, seed=10)
    out = kernel(x)
    assert kernel(x) is out and binds == [tuple(shape)], "same input: the kept binding"
    bigger = randn(shape[0] + 2, *shape[1:], dtype=dtype, seed=11)
    out_big = kernel(bigger)
    assert out_big.shape[0] != out.shape[0] and len(binds) == 2, "a new shape re-binds"
    assert torch.equal(out_big, one_shot(bigger))
    again = kernel(x)
    assert len(binds) == 3 and torch.equal(again, one_shot(x))


def test_every_family_reports_where_its_plan_came_from() -> None:
    x = randn(5, 40, seed=12)
    bound = FAMILIES["linear"][0](x)
    (choice,) = bound.choices
    assert choice.kernel == "linear" and choice.device == "interpreter"
    # 5 rows of fp16: the streaming GEMV (M <= GEMV_MAX_M)
    assert choice.source == "fixed" and choice.config["KIND"] == "stream"
    assert bound.plan()["choices"][0]["config"]["meta"]["BLOCK_M"] == 16


def test_int8_linear_fused_quantization_is_one_launch() -> None:
    """Quantizing x inside the GEMM is one kernel, two without; the decode table takes the two
    (measured faster on the H200, linear_plans.FUSED_QUANT_MAX_M)."""
    from opbench.kernels.gemm.linear_plans import decode_plan

    for m in (1, 16, 64):
        assert not decode_plan(m, 4096, 4096, 1, int8=True, sm_count=132)["FUSED_QUANT"]
    layer = FAMILIES["linear_int8"][1]
    x = randn(5, 40, seed=13)
    fused = next(p for p in layer.candidates(x) if p["FUSED_QUANT"])
    two = next(p for p in layer.candidates(x) if not p["FUSED_QUANT"])
    assert len(layer.calls(fused, x, torch.empty(5, 24, dtype=x.dtype))[0]) == 1
    assert len(layer.calls(two, x, torch.empty(5, 24, dtype=x.dtype))[0]) == 2


def test_decode_table_is_fixed_by_shape() -> None:
    """The same plan for the same shape on every machine of one SM count. K = N = 4096 on 132
    SMs: fp16 up to 16 rows splits K four ways (256 programs, two per SM); wider fp16 rows and
    int8 split two ways (128 programs, one per SM); 64-column tiles throughout."""
    from opbench.kernels.gemm.linear_plans import decode_plan

    for m in (1, 8, 16, 32, 64):
        for int8, elem in ((False, 2), (True, 1)):
            plan = decode_plan(m, 4096, 4096, elem, int8=int8, sm_count=132)
            assert plan == decode_plan(m, 4096, 4096, elem, int8=int8, sm_count=132)
            assert plan["KIND"] == "split_k" and plan["BLOCK_N"] == 64
            assert plan["SPLIT_K"] == (4 if m <= 16 and not int8 else 2)
            assert plan["BLOCK_M"] == max(16, 2 ** math.ceil(math.log2(m)))
            assert plan["BLOCK_K"] * elem == (256 if m <= 16 else 512)


def test_signature_args_put_every_parameter_in_order() -> None:
    names = ["x_ptr", "y_ptr", "n", "BLOCK", "FLAG"]
    assert signature_args(names, ("x", "y"), {"FLAG": 1, "BLOCK": 64, "n": 3}) == [
        "x", "y", 3, 64, 1]  # fmt: skip
    with pytest.raises(TypeError, match="BLOCK"):
        signature_args(names, ("x", "y", 3), {"FLAG": 1})


def test_reference_agreement_of_the_bound_int8_linear() -> None:
    """The bound int8 linear against float64: int8 rounding only (relative L2 <= 3e-2)."""
    binder, layer, shape = FAMILIES["linear_int8"]
    x = randn(*shape, seed=14)
    out = binder(x).launch().double()
    ref = F.relu(x.double() @ randn(24, 40, seed=1).double().T / 6 + randn(24, seed=2).double())
    assert ((out - ref).norm() / ref.norm()).item() <= 3e-2


# Shared memory per block on Hopper (H100/H200: 227 KB); a plan above it does not launch.
HOPPER_SHARED_BYTES = 232448


def test_decode_table_plans_fit_in_shared_memory() -> None:
    """Every decode-table plan's pipelined tiles (x and W, num_stages deep) fit in a Hopper
    SM's shared memory: the table is fixed, so a plan that does not fit would be an error on
    the GPU, not a slower choice (seen: 64 rows at 512-byte K steps and four stages)."""
    from opbench.kernels.gemm.linear_plans import SMALL_M, decode_plan

    for m in range(1, SMALL_M + 1):
        for int8, elem in ((False, 2), (True, 1)):
            for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (12288, 4096)):
                p = decode_plan(m, n, k, elem, int8=int8, sm_count=132)
                tile = (p["BLOCK_M"] + p["BLOCK_N"]) * p["BLOCK_K"] * elem
                assert tile * p.num_stages <= HOPPER_SHARED_BYTES, (m, int8, n, k)
