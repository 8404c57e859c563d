"""Triton implicit-GEMM conv2d (fp16/bf16/fp32) against a float64 reference, in the CPU interpreter.

Every case uses fresh random-normal data, odd shapes (no dimension a multiple of a block), and an
output prefilled with NaN, so a tile the kernel forgets to write fails the test.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.conv.conv import build_conv2d
from opbench.kernels.conv.conv import build_conv2d as prepare_conv2d
from opbench.kernels.conv.conv_int8 import build_conv2d_int8
from opbench.kernels.conv.conv_shapes import output_size

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}
ACTIVATIONS = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
               "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid}  # fmt: skip


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def make_inputs(n, c, h, w, cout, kernel, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, c, h, w), generator=gen).to(dtype)
    weight = (
        torch.randn((cout, c, *kernel), generator=gen) / math.sqrt(c * kernel[0] * kernel[1])
    ).to(dtype)
    bias = torch.randn((cout,), generator=gen).to(dtype)
    return x, weight, bias


def reference(x, weight, bias, stride, padding, dilation, activation="none", batchnorm=None):
    ref = F.conv2d(x.double(), weight.double(), None if bias is None else bias.double(),
                   stride=stride, padding=padding, dilation=dilation)  # fmt: skip
    if batchnorm is not None:
        bn = {k: v.double() if torch.is_tensor(v) else v for k, v in batchnorm.items()}
        ref = F.batch_norm(ref, bn["running_mean"], bn["running_var"], bn["weight"], bn["bias"],
                           False, 0.0, bn["eps"])  # fmt: skip
    return ACTIVATIONS[activation](ref)


def run_poisoned(fn, x, cout, kernel, stride, padding, dilation):
    oh, ow = output_size(x.shape[2], x.shape[3], *kernel, *stride, *padding, *dilation)
    out = torch.full((x.shape[0], cout, oh, ow), float("nan"), dtype=x.dtype)
    result = fn(x, out)
    assert result is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    return out


# (N, C, H, W, Cout, kernel, stride, padding, dilation, path, activation)
CASES = [
    (2, 17, 9, 11, 20, (3, 3), (2, 2), (1, 1), (1, 1), "direct", "relu"),
    (1, 24, 10, 13, 70, (3, 3), (1, 1), (2, 2), (2, 2), "nhwc", "none"),
    (2, 19, 11, 9, 12, (3, 5), (1, 2), (1, 2), (2, 1), "auto", "gelu"),
    (2, 3, 15, 13, 9, (7, 7), (2, 2), (3, 3), (1, 1), "auto", "relu"),
    (2, 40, 7, 5, 33, (1, 1), (1, 1), (0, 0), (1, 1), "auto", "silu"),
    (1, 40, 7, 9, 33, (1, 1), (2, 2), (0, 0), (1, 1), "direct", "none"),
    (3, 18, 5, 1, 17, (2, 1), (1, 1), (0, 0), (1, 1), "nhwc", "relu"),
    (2, 16, 6, 7, 24, (1, 1), (1, 1), (0, 0), (1, 1), "auto", "hardswish"),  # MobileNetV3
    (1, 8, 5, 6, 12, (3, 3), (1, 1), (1, 1), (1, 1), "direct", "hardsigmoid"),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[5][0]}x{c[5][1]}-C{c[1]}-{c[9]}")
def test_conv_matches_float64(case, dtype):
    n, c, h, w, cout, kernel, stride, padding, dilation, path, activation = case
    x, weight, bias = make_inputs(n, c, h, w, cout, kernel, dtype, seed=hash(case) % 1000)
    fn = build_conv2d(weight, bias, stride=stride, padding=padding, dilation=dilation,
                      activation=activation, path=path)  # fmt: skip
    out = run_poisoned(fn, x, cout, kernel, stride, padding, dilation)
    assert out.dtype == dtype
    ref = reference(x, weight, bias, stride, padding, dilation, activation)
    assert rel_l2(out, ref) <= TOLERANCE[dtype]


@pytest.mark.parametrize("path", ["direct", "nhwc", "gather", "pointwise"])
def test_fp32_is_true_fp32(path):
    kernel = (1, 1) if path == "pointwise" else (3, 2)
    padding = (0, 0) if path == "pointwise" else (1, 0)
    x, weight, bias = make_inputs(2, 18, 7, 9, 21, kernel, torch.float32, seed=7)
    fn = build_conv2d(weight, bias, stride=(1, 1), padding=padding, dilation=(1, 1), path=path)
    out = run_poisoned(fn, x, 21, kernel, (1, 1), padding, (1, 1))
    assert (
        rel_l2(out, reference(x, weight, bias, (1, 1), padding, (1, 1))) <= TOLERANCE[torch.float32]
    )


def test_batchnorm_fold_and_relu():
    x, weight, bias = make_inputs(2, 20, 9, 7, 23, (3, 3), torch.float16, seed=11)
    batchnorm = {"running_mean": torch.randn(23), "running_var": torch.rand(23) + 0.5,
                 "weight": torch.randn(23), "bias": torch.randn(23), "eps": 1e-5}  # fmt: skip
    fn = prepare_conv2d(weight, bias, stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                        activation="relu", batchnorm=batchnorm)  # fmt: skip
    out = run_poisoned(fn, x, 23, (3, 3), (1, 1), (1, 1), (1, 1))
    ref = reference(x, weight, bias, (1, 1), (1, 1), (1, 1), "relu", batchnorm)
    assert rel_l2(out, ref) <= TOLERANCE[torch.float16]


def test_no_bias_channels_last_input_and_fresh_output():
    x, weight, _ = make_inputs(2, 16, 9, 10, 18, (3, 3), torch.float16, seed=13)
    fn = prepare_conv2d(weight, None, stride=(2, 1), padding=(1, 1), dilation=(1, 1))
    out = fn(x.contiguous(memory_format=torch.channels_last))
    assert out.is_contiguous() and out.dtype == torch.float16
    ref = reference(x, weight, None, (2, 1), (1, 1), (1, 1))
    assert rel_l2(out, ref) <= TOLERANCE[torch.float16]
    again = fn(torch.randn_like(x))  # same signature, new data: the cached plan
    assert not torch.isnan(again).any()


def test_rejections():
    _, weight, bias = make_inputs(1, 8, 5, 5, 8, (3, 3), torch.float16, seed=1)
    geometry = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    with pytest.raises(Unsupported):
        prepare_conv2d(weight[:, :4], bias, groups=2, **geometry)
    with pytest.raises(Unsupported):
        prepare_conv2d(torch.randn(4, 3, 9, 9, dtype=torch.float16), None, **geometry)
    with pytest.raises(Unsupported):
        build_conv2d_int8(weight.float(), bias.float(), **geometry)
    fn = prepare_conv2d(weight, bias, **geometry)
    with pytest.raises(TypeError):
        fn(torch.randn(1, 8, 5, 5))
    with pytest.raises(ValueError):
        fn(
            torch.randn(1, 8, 5, 5, dtype=torch.float16),
            torch.empty(1, 8, 4, 4, dtype=torch.float16),
        )
