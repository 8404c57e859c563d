"""int8 conv2d (per-channel weight scales, per-image activation scales) in the CPU interpreter.

The reference is the float64 convolution of the unquantized fp16/bf16 inputs; the int8 limit is
relative L2 error <= 3e-2. Outputs are prefilled with NaN.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.conv.conv_int8 import Int8Conv
from opbench.kernels.conv.conv_int8 import build_conv2d_int8 as prepare_conv2d
from opbench.kernels.conv.conv_shapes import output_size

INT8_TOLERANCE = 3e-2


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


# (N, C, H, W, Cout, kernel, stride, padding, dilation, dtype, activation)
CASES = [
    (2, 20, 9, 11, 24, (3, 3), (1, 1), (1, 1), (1, 1), torch.float16, "relu"),
    (2, 36, 7, 5, 40, (1, 1), (1, 1), (0, 0), (1, 1), torch.bfloat16, "none"),
    (2, 3, 13, 11, 10, (7, 7), (2, 2), (3, 3), (1, 1), torch.float16, "relu"),
    (1, 18, 11, 9, 33, (3, 2), (2, 1), (2, 1), (2, 2), torch.bfloat16, "silu"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[5][0]}x{c[5][1]}-C{c[1]}-{c[9]}")
def test_int8_conv_matches_float64(case):
    n, c, h, w, cout, kernel, stride, padding, dilation, dtype, activation = case
    x, weight, bias = make_inputs(n, c, h, w, cout, kernel, dtype, seed=hash(case) % 1000)
    fn = prepare_conv2d(weight, bias, stride=stride, padding=padding, dilation=dilation,
                        activation=activation)  # fmt: skip
    oh, ow = output_size(h, w, *kernel, *stride, *padding, *dilation)
    out = torch.full((n, cout, oh, ow), float("nan"), dtype=dtype)
    fn(x, out)
    assert not torch.isnan(out).any()
    ref = F.conv2d(x.double(), weight.double(), bias.double(), stride=stride, padding=padding,
                   dilation=dilation)  # fmt: skip
    ref = {"none": ref, "relu": F.relu(ref), "silu": F.silu(ref)}[activation]
    assert rel_l2(out, ref) <= INT8_TOLERANCE


def test_int8_batchnorm_fold_channels_last():
    x, weight, bias = make_inputs(2, 24, 7, 8, 20, (3, 3), torch.float16, seed=5)
    batchnorm = {"running_mean": torch.randn(20), "running_var": torch.rand(20) + 0.5,
                 "weight": torch.randn(20), "bias": torch.randn(20), "eps": 1e-5}  # fmt: skip
    fn = prepare_conv2d(weight, bias, stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                        activation="relu", batchnorm=batchnorm)  # fmt: skip
    out = fn(x.contiguous(memory_format=torch.channels_last))
    ref = F.conv2d(x.double(), weight.double(), bias.double(), padding=1)
    ref = F.batch_norm(ref, batchnorm["running_mean"].double(), batchnorm["running_var"].double(),
                       batchnorm["weight"].double(), batchnorm["bias"].double(), False, 0.0, 1e-5)  # fmt: skip
    assert rel_l2(out, F.relu(ref)) <= INT8_TOLERANCE


def test_scales_are_per_image():
    """Each image is quantized with its own scale: scaling one image leaves the others unchanged."""
    x, weight, bias = make_inputs(3, 16, 6, 7, 17, (3, 3), torch.float16, seed=9)
    fn = prepare_conv2d(weight, bias, stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    first = fn(x).clone()
    x_loud = x.clone()
    x_loud[1] *= 64
    second = fn(x_loud)
    assert torch.equal(first[0], second[0]) and torch.equal(first[2], second[2])
    assert isinstance(fn, Int8Conv)
    assert fn.packed.dtype == torch.int8 and fn.w_scale.shape == (17,)


def test_int8_rejects_fp32_input():
    x, weight, bias = make_inputs(1, 16, 5, 5, 8, (3, 3), torch.float16, seed=3)
    fn = prepare_conv2d(weight, bias, stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    with pytest.raises(Unsupported):
        fn(x.float())
