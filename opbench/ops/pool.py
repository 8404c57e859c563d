"""maxpool2d and avgpool2d on [N, C, H, W] input, with PyTorch's defaults
(floor output size, average counts padding, max pads with -inf); a max pool may round its
output size up (`ceil_mode`, SqueezeNet's and GoogLeNet's pools)."""

from __future__ import annotations

from opbench.ops.base import Example, Op, Param, ShapeError, numel
from opbench.ops.conv2d import conv_out_size, onnx_explicit_pads, onnx_padding, onnx_pair
from opbench.ops.onnx_reading import NCHW, OnnxReading, Refused


def pool_out_size(size: int, kernel: int, stride: int, padding: int, ceil: bool) -> int:
    """Output length of a pooling window: floored as a conv's, or rounded up (ceil_mode) with
    PyTorch's rule that the last window must start inside the input or its left padding."""
    if not ceil:
        return conv_out_size(size, kernel, stride, padding, 1)
    out = -(-(size + 2 * padding - kernel) // stride) + 1
    if (out - 1) * stride >= size + padding:
        out -= 1
    return out


class _Pool2d(Op):
    params = (
        Param("kernel_size", "pair"),
        Param("stride", "pair", None),
        Param("padding", "pair", (0, 0)),
    )

    def read_onnx(self, node, implied):
        """MaxPool / AveragePool: floor sizes, no dilation; an average counts the padding."""
        onnx_explicit_pads(node)
        ceil = bool(node.attr("ceil_mode", 0))
        if ceil and node.op_type != "MaxPool":
            raise Refused("average pooling with ceil_mode=1")
        if any(int(d) != 1 for d in node.attr("dilations", [1, 1])):
            raise Refused("dilated pooling")
        padding = onnx_padding(node)
        if node.op_type == "AveragePool" and any(padding) and not node.attr("count_include_pad", 0):
            raise Refused("average pooling that leaves the padding out of the count")
        kernel = onnx_pair(node.attr("kernel_shape"), "kernel_shape")
        params: dict = {"kernel_size": kernel}
        strides = onnx_pair(node.attr("strides", [1, 1]), "strides")
        if strides != kernel:
            params["stride"] = strides
        if any(padding):
            params["padding"] = padding
        if ceil:
            params["ceil_mode"] = True
        return OnnxReading(params, NCHW)

    @staticmethod
    def stride(p) -> tuple[int, int]:
        return p["stride"] if p.get("stride") is not None else p["kernel_size"]

    def infer_shape(self, in_shape, p):
        if len(in_shape) != 4:
            raise ShapeError(
                f"{self.name} needs input [C, H, W] (plus batch), got {list(in_shape[1:])}"
            )
        n, c, h, w = in_shape
        (kh, kw), (sh, sw), (ph, pw) = p["kernel_size"], self.stride(p), p["padding"]
        if min(kh, kw) < 1:
            raise ShapeError("kernel_size must be at least 1", "kernel_size")
        if min(sh, sw) < 1:
            raise ShapeError("stride must be at least 1", "stride")
        if ph > kh // 2 or pw > kw // 2:
            raise ShapeError(
                f"padding {ph}x{pw} must be at most half the kernel {kh}x{kw}", "padding"
            )
        if kh > h + 2 * ph or kw > w + 2 * pw:
            raise ShapeError(
                f"kernel {kh}x{kw} is larger than the padded input {h + 2 * ph}x{w + 2 * pw}",
                "kernel_size",
            )
        ceil = bool(p.get("ceil_mode"))
        return (n, c, pool_out_size(h, kh, sh, ph, ceil), pool_out_size(w, kw, sw, pw, ceil))

    def flops(self, in_shape, out_shape, p):
        kh, kw = p["kernel_size"]
        return numel(out_shape) * kh * kw

    def onnx_attributes(self, p) -> dict:
        """The ONNX pool's kernel_shape, strides and pads (begin and end alike)."""
        (ph, pw) = p["padding"]
        attributes = {
            "kernel_shape": list(p["kernel_size"]),
            "strides": list(self.stride(p)),
            "pads": [ph, pw, ph, pw],
        }
        if p.get("ceil_mode"):
            attributes["ceil_mode"] = 1
        return attributes


class MaxPool2d(_Pool2d):
    name = "maxpool2d"
    summary = "max pooling over [C,H,W] (ceil_mode: the output size rounded up)"
    params = (
        *_Pool2d.params,
        Param("ceil_mode", "bool", False, help="round the output size up, as PyTorch does"),
    )
    engine_names = "maxpool maxpool2d aten::max_pool2d aten::max_pool2d_with_indices"
    torch_calls = ("torch.nn.functional.max_pool2d",)
    example = Example((3, 8, 6), (3, 4, 3), {"kernel_size": 3, "stride": 2, "ceil_mode": True})
    onnx_imports = (("", "MaxPool", {}),)

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        p = layer.params
        return F.max_pool2d(
            x, p["kernel_size"], self.stride(p), p["padding"], ceil_mode=p["ceil_mode"]
        )

    def to_onnx(self, scope, x, weights, layer):
        return scope.one("MaxPool", [x], **self.onnx_attributes(layer.params))


class AvgPool2d(_Pool2d):
    name = "avgpool2d"
    summary = "average pooling over [C,H,W] (padding counted, as PyTorch's default)"
    engine_names = "averagepool avgpool avgpool2d globalaveragepool aten::avg_pool2d"
    torch_calls = ("torch.nn.functional.avg_pool2d",)
    example = Example((3, 7, 6), (3, 4, 4), {"kernel_size": 2, "padding": 1})
    #: GlobalAveragePool, and a mean over H and W (the other means are a norm's: rules.py)
    onnx_imports = (
        ("", "AveragePool", {}), ("", "GlobalAveragePool", {}), ("", "ReduceMean", {}),
    )  # fmt: skip

    def read_onnx(self, node, implied):
        if node.op_type == "AveragePool":
            return super().read_onnx(node, implied)
        shape = node.shape(0)
        if len(shape) != 4:
            raise Refused("global pooling needs a 4-D input")
        if node.op_type == "ReduceMean":
            axes = node.attr("axes")
            if axes is None and node.given(1):
                axes = [int(v) for v in node.constant(1).reshape(-1)]
            if sorted(int(a) % 4 for a in axes or []) != [2, 3]:
                raise Refused("a mean that is not over H and W (nor part of a norm)")
        return OnnxReading({"kernel_size": [shape[2], shape[3]]}, NCHW)

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        p = layer.params
        return F.avg_pool2d(x, p["kernel_size"], self.stride(p), p["padding"])

    def to_onnx(self, scope, x, weights, layer):
        """AveragePool with count_include_pad=1: PyTorch counts the padding."""
        attributes = self.onnx_attributes(layer.params)
        return scope.one("AveragePool", [x], count_include_pad=1, **attributes)
