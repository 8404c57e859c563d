"""A residual block's tail in one conv kernel: conv → batchnorm (folded) → add(skip) → activation,
against the unfused chain of those layers computed in float64, under the CPU interpreter.

Fresh random-normal data, odd shapes, every read path, skips in NCHW and channels_last,
outputs prefilled with NaN (an unwritten tile fails), float32/float16/bfloat16 and int8.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels.conv.conv import build_conv2d
from opbench.kernels.conv.conv_int8 import build_conv2d_int8
from opbench.kernels.conv.conv_shapes import output_size

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}
INT8_TOLERANCE = 3e-2
ACTIVATIONS = {"none": lambda t: t, "relu": F.relu, "silu": F.silu}


def batchnorm_of(cout: int, gen: torch.Generator) -> dict:
    return {"running_mean": torch.randn(cout, generator=gen),
            "running_var": torch.rand(cout, generator=gen) + 0.5,
            "weight": torch.randn(cout, generator=gen), "bias": torch.randn(cout, generator=gen),
            "eps": 1e-5}  # fmt: skip


def unfused_chain(x, weight, bn, skip, geometry, activation):
    """conv2d → batchnorm2d → add → activation, each layer on its own, in float64."""
    y = F.conv2d(x.double(), weight.double(), None, **geometry)
    y = F.batch_norm(y, bn["running_mean"].double(), bn["running_var"].double(),
                     bn["weight"].double(), bn["bias"].double(), False, 0.0, bn["eps"])  # fmt: skip
    return ACTIVATIONS[activation](y + skip.double())


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


# (N, C, H, W, Cout, kernel, stride, padding, path, activation, skip layout)
CASES = [
    (2, 17, 9, 11, 20, (3, 3), (1, 1), (1, 1), "direct", "relu", "nchw"),
    (1, 24, 10, 13, 33, (3, 3), (2, 2), (1, 1), "nhwc", "relu", "channels_last"),
    (2, 3, 15, 13, 9, (7, 7), (2, 2), (3, 3), "gather", "relu", "nchw"),
    (2, 40, 7, 5, 37, (1, 1), (1, 1), (0, 0), "pointwise", "none", "nchw"),
    (3, 18, 5, 1, 17, (1, 1), (1, 1), (0, 0), "pointwise", "relu", "channels_last"),
    (1, 19, 1, 9, 21, (1, 3), (1, 1), (0, 1), "direct", "silu", "nchw"),
]


def make_case(case, dtype, seed):
    n, c, h, w, cout, kernel, stride, padding, path, activation, layout = case
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, c, h, w), generator=gen).to(dtype)
    weight = torch.randn((cout, c, *kernel), generator=gen) / math.sqrt(c * kernel[0] * kernel[1])
    bn = batchnorm_of(cout, gen)
    oh, ow = output_size(h, w, *kernel, *stride, *padding, 1, 1)
    skip = torch.randn((n, cout, oh, ow), generator=gen).to(dtype)
    if layout == "channels_last":
        skip = skip.contiguous(memory_format=torch.channels_last)
    geometry = {"stride": stride, "padding": padding, "dilation": (1, 1)}
    return x, weight.to(dtype), bn, skip, geometry


def run_poisoned(conv, x, skip):
    out = torch.full(skip.shape, float("nan"), dtype=skip.dtype)
    assert conv(x, out, residual=skip) is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[5][0]}x{c[5][1]}-C{c[1]}-{c[8]}-{c[10]}")
def test_conv_bn_add_act_matches_the_unfused_chain(case, dtype):
    x, weight, bn, skip, geometry = make_case(case, dtype, seed=CASES.index(case))
    activation, path = case[9], case[8]
    conv = build_conv2d(weight, None, activation=activation, batchnorm=bn, path=path, **geometry)
    out = run_poisoned(conv, x, skip)
    assert rel_l2(out, unfused_chain(x, weight, bn, skip, geometry, activation)) <= TOLERANCE[dtype]


def test_int8_conv_adds_the_skip_in_float():
    x, weight, bn, skip, geometry = make_case(CASES[0], torch.float16, seed=5)
    conv = build_conv2d_int8(weight, None, activation="relu", batchnorm=bn, **geometry)
    out = run_poisoned(conv, x, skip)
    assert rel_l2(out, unfused_chain(x, weight, bn, skip, geometry, "relu")) <= INT8_TOLERANCE


def test_the_skip_is_read_not_ignored():
    """A second skip changes the output by exactly that skip where no ReLU clips: the epilogue
    reads it at the output's own indices (a transposed or shifted read would not match)."""
    x, weight, bn, skip, geometry = make_case(CASES[3], torch.float32, seed=3)
    conv = build_conv2d(weight, None, batchnorm=bn, path="pointwise", **geometry)
    other = torch.randn_like(skip)
    delta = run_poisoned(conv, x, other) - run_poisoned(conv, x, skip)
    torch.testing.assert_close(delta, other - skip, rtol=1e-5, atol=1e-5)


def test_a_skip_of_another_shape_or_layout_is_refused():
    x, weight, bn, skip, geometry = make_case(CASES[0], torch.float16, seed=4)
    conv = build_conv2d(weight, None, batchnorm=bn, **geometry)
    with pytest.raises(ValueError, match="residual must be"):
        conv(x, residual=skip[:, :-1])
    with pytest.raises(ValueError, match="residual must be"):
        conv(x, residual=skip.float())
    with pytest.raises(ValueError, match="dense"):
        conv(x, residual=skip.transpose(2, 3).contiguous().transpose(2, 3))
