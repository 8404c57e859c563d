"""The pointwise conv (conv_pointwise.py: 1x1 on NCHW as out[n] = W @ X[n] per image) against
float64, in the CPU interpreter.

Fresh random-normal data; odd shapes, so every axis has a partial tile under the interpreter's
32-wide tile (Cout 37 → two channel tiles, P = 35 → two pixel tiles, C = 40 → two K steps);
batch > 1 (the grid's image axis); outputs prefilled with NaN, so an unwritten tile fails.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels.conv.conv import build_conv2d
from opbench.kernels.conv.conv_plans import float_paths
from opbench.kernels.conv.conv_pointwise import pixel_run_stride
from opbench.kernels.conv.conv_shapes import output_size

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}
ACTIVATIONS = {"none": lambda t: t, "relu": F.relu, "silu": F.silu}


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def batchnorm_of(cout: int, gen: torch.Generator) -> dict:
    return {"running_mean": torch.randn(cout, generator=gen),
            "running_var": torch.rand(cout, generator=gen) + 0.5,
            "weight": torch.randn(cout, generator=gen), "bias": torch.randn(cout, generator=gen),
            "eps": 1e-5}  # fmt: skip


def chain64(x, weight, bias, bn, skip, stride, activation):
    """conv2d → [batchnorm2d] → [add skip] → activation, layer by layer in float64."""
    y = F.conv2d(x.double(), weight.double(), None if bias is None else bias.double(),
                 stride=stride)  # fmt: skip
    if bn is not None:
        y = F.batch_norm(y, bn["running_mean"].double(), bn["running_var"].double(),
                         bn["weight"].double(), bn["bias"].double(), False, 0.0, bn["eps"])  # fmt: skip
    if skip is not None:
        y = y + skip.double()
    return ACTIVATIONS[activation](y)


# (N, C, H, W, Cout, stride, bias, batchnorm, skip layout or None, activation, x layout)
CASES = [
    (3, 40, 5, 7, 37, (1, 1), True, False, None, "none", "nchw"),
    (2, 40, 5, 7, 37, (1, 1), False, True, "nchw", "relu", "nchw"),  # a bottleneck's tail
    (2, 19, 9, 11, 33, (2, 2), False, True, "nchw", "relu", "nchw"),  # a downsample, fused
    (2, 19, 9, 12, 33, (2, 2), True, True, "nchw", "none", "nchw"),
    (3, 41, 4, 6, 37, (1, 2), False, False, None, "relu", "nchw"),  # two K steps, strided
    (3, 21, 7, 10, 18, (2, 1), True, False, None, "silu", "nchw"),
    (2, 17, 1, 13, 20, (1, 1), False, True, "channels_last", "relu", "nchw"),  # one row
    (2, 18, 11, 1, 35, (1, 1), True, True, "nchw", "relu", "nchw"),  # one column
    (2, 24, 6, 5, 19, (1, 1), True, True, "nchw", "relu", "channels_last"),  # x runs of stride C
    (1, 70, 3, 3, 9, (1, 1), False, False, None, "relu", "nchw"),  # three K steps, tiny P
]


def make_case(case, dtype, seed):
    n, c, h, w, cout, stride, has_bias, has_bn, skip_layout, activation, x_layout = case
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, c, h, w), generator=gen).to(dtype)
    if x_layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    weight = (torch.randn((cout, c, 1, 1), generator=gen) / math.sqrt(c)).to(dtype)
    bias = torch.randn((cout,), generator=gen).to(dtype) if has_bias else None
    bn = batchnorm_of(cout, gen) if has_bn else None
    oh, ow = output_size(h, w, 1, 1, *stride, 0, 0, 1, 1)
    skip = None
    if skip_layout is not None:
        skip = torch.randn((n, cout, oh, ow), generator=gen).to(dtype)
        if skip_layout == "channels_last":
            skip = skip.contiguous(memory_format=torch.channels_last)
    return x, weight, bias, bn, skip, (n, cout, oh, ow)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"N{c[0]}-C{c[1]}-{c[2]}x{c[3]}-s{c[5][0]}{c[5][1]}-{c[8]}-{c[10]}"
)
def test_pointwise_matches_float64_chain(case, dtype):
    x, weight, bias, bn, skip, out_shape = make_case(case, dtype, seed=CASES.index(case))
    stride, activation = case[5], case[9]
    conv = build_conv2d(weight, bias, stride=stride, padding=(0, 0), dilation=(1, 1),
                        activation=activation, batchnorm=bn, path="pointwise")  # fmt: skip
    out = torch.full(out_shape, float("nan"), dtype=dtype)
    assert conv(x, out, residual=skip) is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = chain64(x, weight, bias, bn, skip, stride, activation)
    assert rel_l2(out, ref) <= TOLERANCE[dtype]


def test_the_skip_and_the_batch_axis_are_read():
    """A wrong image offset or an ignored skip would still give finite outputs: compare the
    fused result with and without the skip, and image 1 against image 0's data swapped in."""
    x, weight, _, bn, skip, out_shape = make_case(CASES[1], torch.float32, seed=5)
    conv = build_conv2d(
        weight, None, stride=1, padding=0, dilation=1, batchnorm=bn, path="pointwise"
    )
    with_skip = conv(x, residual=skip)
    without = conv(x)
    assert (with_skip - without).abs().max() > 0.1
    swapped = conv(x.flip(0).contiguous())
    torch.testing.assert_close(swapped, without.flip(0), rtol=1e-5, atol=1e-5)
    assert with_skip.shape == out_shape


def test_auto_picks_the_pointwise_kernel_for_nchw_1x1():
    g = {"KH": 1, "KW": 1, "SH": 1, "SW": 1, "PH": 0, "PW": 0, "DH": 1, "DW": 1}
    x = torch.empty((2, 64, 56, 56), dtype=torch.float16)
    assert float_paths(x, g, "auto") == ["pointwise"]
    assert float_paths(x[:, :, :49, :49].contiguous(), g, "auto") == ["pointwise", "nhwc"]
    strided = {**g, "SH": 2, "SW": 2}
    assert float_paths(x, strided, "auto") == ["direct", "nhwc"]  # measured: gathers lose
    assert "pointwise" not in float_paths(x.contiguous(memory_format=torch.channels_last), g,
                                          "auto")  # fmt: skip


def test_pixel_runs():
    g1 = {"SH": 1, "SW": 1}
    assert pixel_run_stride((2, 8, 5, 7), (280, 35, 7, 1), g1) == 1
    assert pixel_run_stride((2, 8, 5, 7), (280, 1, 56, 8), g1) == 8  # channels_last
    assert pixel_run_stride((2, 8, 5, 1), (40, 5, 1, 99), g1) == 1  # one column: rows are the run
    assert pixel_run_stride((2, 8, 5, 7), (280, 35, 7, 1), {"SH": 2, "SW": 2}) == 0


def test_pointwise_refuses_padding_and_larger_kernels():
    w = torch.randn(4, 8, 1, 1, dtype=torch.float16)
    with pytest.raises(ValueError):
        build_conv2d(w, None, stride=1, padding=1, dilation=1, path="pointwise")(
            torch.randn(1, 8, 4, 4).half()
        )
    with pytest.raises(ValueError):
        build_conv2d(
            torch.randn(4, 8, 3, 3).half(), None, stride=1, padding=0, dilation=1, path="pointwise"
        )(torch.randn(1, 8, 4, 4).half())


@pytest.mark.parametrize("channels", [16, 24, 32, 64, 96, 2048])
@pytest.mark.parametrize("cout", [8, 16, 96, 1000])
def test_every_stride_1_1x1_conv_has_gpu_candidates(monkeypatch, channels, cout):
    """The GPU's tile tables (not the interpreter's one tile): MobileNetV2's 16- and 24-deep
    1x1 convs once had no candidate at all and stopped the run."""
    from opbench.kernels.conv import conv_plans

    monkeypatch.setattr(conv_plans, "INTERPRET", False)
    x = torch.empty(1, channels, 56, 56, dtype=torch.float16)
    geometry = dict(KH=1, KW=1, SH=1, SW=1, PH=0, PW=0, DH=1, DW=1, G=1)
    plans = conv_plans.float_candidates(x, cout, geometry, torch.float16, "auto")
    pointwise = [p for p in plans if p["PATH"] == "pointwise"]
    assert pointwise, "no pointwise tile"
    deepest = max(32, 1 << (channels - 1).bit_length())
    assert all(p["BLOCK_K"] <= deepest for p in pointwise)
