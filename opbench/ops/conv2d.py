"""conv2d on [N, C, H, W] input (NCHW, PyTorch's layout), with optional fused activation."""

from __future__ import annotations

import math

from opbench.ops.base import QUANT, Example, Op, Param, ShapeError, numel
from opbench.ops.functional import activate, activate_onnx, activate_reference
from opbench.ops.kinds import ACTIVATION
from opbench.ops.onnx_reading import NCHW, OnnxNode, OnnxReading, Refused


def conv_out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


# ---- an ONNX Conv's or pool's window (pool.py reads it too) ---------------------------------


def onnx_pair(values, what: str) -> list[int]:
    values = [int(v) for v in values]
    if len(values) != 2:
        raise Refused(f"{what} {values} is not 2-D")
    return values


def onnx_explicit_pads(node: OnnxNode) -> None:
    mode = node.attr("auto_pad", "NOTSET")
    if mode not in ("NOTSET", "VALID"):
        raise Refused(f"auto_pad={mode} (explicit pads are supported)")


def onnx_padding(node: OnnxNode) -> list[int]:
    """`pads` as [top, left]: symmetric only."""
    pads = node.attr("pads")
    if not pads:
        return [0, 0]
    pads = [int(p) for p in pads]
    if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
        raise Refused(f"pads {pads} are not symmetric")
    return pads[:2]


class Conv2d(Op):
    name = "conv2d"
    summary = "2-D convolution on [C,H,W] input (NCHW), bias and activation"
    engine_names = (
        "conv fusedconv qlinearconv convinteger convolution convo conv2d aten::conv2d "
        "aten::convolution aten::_convolution groupconvolution"
    )
    torch_calls = ("torch.nn.functional.conv2d",)
    example = Example(
        (3, 7, 6),
        (4, 4, 3),
        {"out_channels": 4, "kernel_size": [3, 2], "stride": 2, "padding": 1, "dilation": [1, 2]},
    )
    params = (
        Param("out_channels", "pos_int"),
        Param("kernel_size", "pair"),
        Param("stride", "pair", (1, 1)),
        Param("padding", "pair", (0, 0)),
        Param("dilation", "pair", (1, 1)),
        Param("groups", "pos_int", 1),
        Param("bias", "bool", True),
        ACTIVATION,
        QUANT,
        Param(
            "channels_last",
            "bool",
            False,
            help="torch backend on the CPU: run in channels_last (on CUDA the faster layout is timed and kept)",
        ),
    )
    onnx_imports = (("", "Conv", {}),)

    def read_onnx(self, node, implied):
        onnx_explicit_pads(node)
        weight = node.constant(1)
        if weight is None or weight.ndim != 4:
            raise Refused("the weight is not a 4-D constant")
        has_bias = node.given(2)
        params = {
            "out_channels": int(weight.shape[0]),
            "kernel_size": [int(weight.shape[2]), int(weight.shape[3])],
            "stride": onnx_pair(node.attr("strides", [1, 1]), "strides"),
            "padding": onnx_padding(node),
            "dilation": onnx_pair(node.attr("dilations", [1, 1]), "dilations"),
            "groups": int(node.attr("group", 1)),
            "bias": has_bias,
        }
        defaults = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1,
                    "bias": True}  # fmt: skip
        params = {k: v for k, v in params.items() if defaults.get(k) != v}
        weights = {"weight": (1, "asis"), **({"bias": (2, "asis")} if has_bias else {})}
        return OnnxReading(params, NCHW, weights)

    def infer_shape(self, in_shape, p):
        if len(in_shape) != 4:
            raise ShapeError(f"conv2d needs input [C, H, W] (plus batch), got {list(in_shape[1:])}")
        n, c, h, w = in_shape
        kh, kw = p["kernel_size"]
        if kh < 1 or kw < 1:
            raise ShapeError("kernel_size must be at least 1", "kernel_size")
        for key in ("stride", "dilation"):
            if min(p[key]) < 1:
                raise ShapeError(f"{key} must be at least 1", key)
        groups = p["groups"]
        if c % groups or p["out_channels"] % groups:
            raise ShapeError(
                f"groups={groups} must divide in_channels={c} and out_channels={p['out_channels']}",
                "groups",
            )
        (sh, sw), (ph, pw), (dh, dw) = p["stride"], p["padding"], p["dilation"]
        span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
        if span_h > h + 2 * ph or span_w > w + 2 * pw:
            raise ShapeError(
                f"kernel {kh}x{kw} (dilation {dh}x{dw}) is larger than the padded input {h + 2 * ph}x{w + 2 * pw}",
                "kernel_size",
            )
        return (
            n,
            p["out_channels"],
            conv_out_size(h, kh, sh, ph, dh),
            conv_out_size(w, kw, sw, pw, dw),
        )

    def weight_shapes(self, in_shape, p):
        kh, kw = p["kernel_size"]
        shapes = {"weight": (p["out_channels"], in_shape[1] // p["groups"], kh, kw)}
        if p["bias"]:
            shapes["bias"] = (p["out_channels"],)
        return shapes

    def flops(self, in_shape, out_shape, p):
        kh, kw = p["kernel_size"]
        return 2 * numel(out_shape) * (in_shape[1] // p["groups"]) * kh * kw

    def make_weights(self, layer, generator):
        weights = super().make_weights(layer, generator)
        fan_in = numel(weights["weight"].shape[1:])
        weights["weight"] /= math.sqrt(fan_in)
        return weights

    def forward(self, x, weights, layer):
        return activate(self._conv(x, weights, layer), layer.params["activation"])

    def reference(self, x, weights, layer):
        # F.conv2d runs float64 on the CPU as plain sums of products (no reduced precision).
        return activate_reference(self._conv(x, weights, layer), layer.params["activation"])

    @staticmethod
    def _conv(x, weights, layer):
        import torch.nn.functional as F

        p = layer.params
        return F.conv2d(
            x,
            weights["weight"],
            weights.get("bias"),
            p["stride"],
            p["padding"],
            p["dilation"],
            p["groups"],
        )

    def to_onnx(self, scope, x, weights, layer):
        p = layer.params
        inputs = [x, scope.weight("weight", weights["weight"])]
        if "bias" in weights:
            inputs.append(scope.weight("bias", weights["bias"]))
        (ph, pw) = p["padding"]
        y = scope.one(
            "Conv",
            inputs,
            kernel_shape=list(p["kernel_size"]),
            strides=list(p["stride"]),
            pads=[ph, pw, ph, pw],
            dilations=list(p["dilation"]),
            group=p["groups"],
        )
        return activate_onnx(scope, y, p["activation"])
