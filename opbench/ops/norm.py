"""layernorm and rmsnorm over the last dimension, with affine weights."""

from __future__ import annotations

from opbench.ops.base import EPS, Example, Op, numel
from opbench.ops.onnx_reading import ROWS, OnnxNode, OnnxReading, Refused


def over_last_axis(node: OnnxNode, what: str) -> None:
    rank = len(node.shape(0))
    if int(node.attr("axis", -1)) % rank != rank - 1:
        raise Refused(f"{what} that is not over the last axis")


class LayerNorm(Op):
    name = "layernorm"
    summary = "layer norm over the last dim, affine"
    engine_names = (
        "layernormalization layernorm skiplayernormalization mvn aten::layer_norm "
        "aten::native_layer_norm"
    )
    torch_calls = ("torch.nn.functional.layer_norm",)
    example = Example((5, 7), (5, 7), {"eps": 0.001})
    reference_written_out = True
    params = (EPS,)
    onnx_imports = (("", "LayerNormalization", {}),)

    def read_onnx(self, node, implied):
        over_last_axis(node, "a layer norm")
        weights = {"weight": (1, "asis"), **({"bias": (2, "asis")} if node.given(2) else {})}
        return OnnxReading({"eps": node.epsilon()}, ROWS, weights)

    def weight_shapes(self, in_shape, p):
        return {"weight": (in_shape[-1],), "bias": (in_shape[-1],)}

    def flops(self, in_shape, out_shape, p):
        return 8 * numel(in_shape)

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        return F.layer_norm(
            x, (x.shape[-1],), weights["weight"], weights["bias"], layer.params["eps"]
        )

    def reference(self, x, weights, layer):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return (x - mean) / (var + layer.params["eps"]).sqrt() * weights["weight"] + weights["bias"]

    def to_onnx(self, scope, x, weights, layer):
        affine = [scope.weight(key, weights[key]) for key in ("weight", "bias")]
        return scope.one("LayerNormalization", [x, *affine], axis=-1, epsilon=layer.params["eps"])


class RMSNorm(Op):
    name = "rmsnorm"
    summary = "RMS norm over the last dim, affine"
    engine_names = (
        "simplifiedlayernormalization skipsimplifiedlayernormalization rmsnormalization "
        "rmsnorm aten::rms_norm"
    )
    torch_calls = ("torch.nn.functional.rms_norm",)
    example = Example((5, 7), (5, 7), {"eps": 0.001})
    reference_written_out = True
    params = (EPS,)
    #: ONNX's (opset 23) and importers/onnx/rules.py's, which reads the RMS norm's spellings
    onnx_imports = (("", "RMSNormalization", {}), ("opbench", "RMSNormalization", {}))

    def read_onnx(self, node, implied):
        over_last_axis(node, "an RMS norm")
        return OnnxReading({"eps": node.epsilon()}, ROWS, {"weight": (1, "asis")})

    def weight_shapes(self, in_shape, p):
        return {"weight": (in_shape[-1],)}

    def flops(self, in_shape, out_shape, p):
        return 4 * numel(in_shape)

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        # PyTorch's own RMS norm (torch >= 2.4): a fused kernel on recent CUDA builds.
        return F.rms_norm(x, (x.shape[-1],), weights["weight"], layer.params["eps"])

    def reference(self, x, weights, layer):
        rms = (x.pow(2).mean(-1, keepdim=True) + layer.params["eps"]).sqrt()
        return x / rms * weights["weight"]

    def to_onnx(self, scope, x, weights, layer):
        """x / sqrt(mean(x²) + eps) · w, written out (RMSNormalization needs opset 23)."""
        import numpy as np

        squares = scope.one("Mul", [x, x])
        mean = scope.one("ReduceMean", [squares, scope.ints("axes", [-1])], keepdims=1)
        eps = scope.weight("eps", np.array(layer.params["eps"], dtype=np.float32))
        root = scope.one("Sqrt", [scope.one("Add", [mean, eps])])
        weight = scope.weight("weight", weights["weight"])
        return scope.one("Mul", [scope.one("Div", [x, root]), weight])
