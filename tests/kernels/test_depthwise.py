"""Depthwise conv2d (groups = channels) with a folded batchnorm and an activation, against the
unfused chain conv → batchnorm → activation in float64, under the CPU interpreter.

Fresh random-normal data, odd channel counts and map sizes, strides, padding and dilation,
NCHW and channels_last inputs, outputs prefilled with NaN, float32/float16/bfloat16.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels.conv.conv_shapes import output_size
from opbench.kernels.conv.depthwise import build_depthwise_conv2d

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}
ACTIVATIONS = {"none": lambda t: t, "relu": F.relu, "silu": F.silu}

# (N, C, H, W, kernel, stride, padding, dilation, activation, batchnorm, layout)
CASES = [
    (2, 7, 9, 11, (3, 3), (1, 1), (1, 1), (1, 1), "relu", True, "nchw"),  # 2 channel tiles
    (1, 37, 13, 10, (3, 3), (2, 2), (1, 1), (1, 1), "none", True, "channels_last"),
    (3, 5, 7, 7, (5, 5), (1, 2), (2, 2), (1, 1), "silu", False, "nchw"),
    (1, 11, 12, 9, (3, 3), (1, 1), (2, 2), (2, 2), "relu", True, "nchw"),
    (2, 6, 1, 15, (1, 3), (1, 2), (0, 1), (1, 1), "none", False, "channels_last"),
]


def unfused_chain(x, weight, bias, bn, geometry, activation):
    y = F.conv2d(x.double(), weight.double(), None if bias is None else bias.double(),
                 groups=x.shape[1], **geometry)  # fmt: skip
    if bn is not None:
        y = F.batch_norm(y, bn["running_mean"].double(), bn["running_var"].double(),
                         bn["weight"].double(), bn["bias"].double(), False, 0.0, bn["eps"])  # fmt: skip
    return ACTIVATIONS[activation](y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}-{c[4][0]}x{c[4][1]}-s{c[5][0]}")
def test_depthwise_matches_the_unfused_chain(case, dtype):
    n, c, h, w, kernel, stride, padding, dilation, activation, with_bn, layout = case
    gen = torch.Generator().manual_seed(CASES.index(case))
    x = torch.randn(n, c, h, w, generator=gen).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    weight = (torch.randn(c, 1, *kernel, generator=gen) / (kernel[0] * kernel[1]) ** 0.5).to(dtype)
    bias = torch.randn(c, generator=gen).to(dtype)
    bn = None
    if with_bn:
        bn = {"running_mean": torch.randn(c, generator=gen),
              "running_var": torch.rand(c, generator=gen) + 0.5,
              "weight": torch.randn(c, generator=gen), "bias": torch.randn(c, generator=gen),
              "eps": 1e-5}  # fmt: skip
    geometry = {"stride": stride, "padding": padding, "dilation": dilation}
    conv = build_depthwise_conv2d(weight, bias, activation=activation, batchnorm=bn, **geometry)
    oh, ow = output_size(h, w, *kernel, *stride, *padding, *dilation)
    out = torch.full((n, c, oh, ow), float("nan"), dtype=dtype)
    assert conv(x, out) is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = unfused_chain(x, weight, bias, bn, geometry, activation)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[dtype], f"relative L2 error {err:.2e}"


def test_rejections():
    with pytest.raises(ValueError, match="depthwise weight"):
        build_depthwise_conv2d(torch.randn(4, 2, 3, 3), None)
    conv = build_depthwise_conv2d(torch.randn(4, 1, 3, 3), None, padding=1)
    with pytest.raises(ValueError, match=r"\[N, 4, H, W\]"):
        conv(torch.randn(1, 3, 5, 5))
    with pytest.raises(TypeError):
        conv(torch.randn(1, 4, 5, 5).half())
