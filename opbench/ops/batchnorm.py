"""batchnorm2d in inference: y = (x - mean) / sqrt(var + eps) · weight + bias, per channel."""

from __future__ import annotations

from opbench.ops.base import EPS, Example, Op, ShapeError, numel
from opbench.ops.onnx_reading import NCHW, OnnxReading, Refused


class BatchNorm2d(Op):
    name = "batchnorm2d"
    summary = "inference batch norm over [C,H,W] with running statistics"
    engine_names = (
        "batchnormalization batchnorm batchnorm2d batchnorminference scale aten::batch_norm "
        "aten::_native_batch_norm_legit_no_training"
    )
    torch_calls = ("torch.nn.functional.batch_norm",)
    example = Example((3, 5, 4), (3, 5, 4))
    reference_written_out = True
    params = (EPS,)
    onnx_imports = (("", "BatchNormalization", {}),)

    def read_onnx(self, node, implied):
        if len(node.outputs) > 1 and any(o is not None for o in node.outputs[1:]):
            raise Refused("a training-mode batch norm (running statistics as outputs)")
        keys = ("weight", "bias", "running_mean", "running_var")
        weights = {key: (i, "asis") for i, key in enumerate(keys, start=1)}
        return OnnxReading({"eps": node.epsilon()}, NCHW, weights)

    def infer_shape(self, in_shape, p):
        if len(in_shape) != 4:
            raise ShapeError(
                f"batchnorm2d needs input [C, H, W] (plus batch), got {list(in_shape[1:])}"
            )
        return in_shape

    def weight_shapes(self, in_shape, p):
        c = in_shape[1]
        return {"running_mean": (c,), "running_var": (c,), "weight": (c,), "bias": (c,)}

    def flops(self, in_shape, out_shape, p):
        return 2 * numel(in_shape)

    def make_weights(self, layer, generator):
        import torch

        weights = super().make_weights(layer, generator)
        # Variances must be positive; keep them near 1 like a trained network's.
        weights["running_var"] = 0.5 + torch.rand(weights["running_var"].shape, generator=generator)
        return weights

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        # Statistics in the layer's dtype, as `nn.BatchNorm2d(...).half()` keeps them.
        return F.batch_norm(
            x,
            weights["running_mean"],
            weights["running_var"],
            weights["weight"],
            weights["bias"],
            training=False,
            eps=layer.params["eps"],
        )

    def reference(self, x, weights, layer):
        def per_channel(key):
            return weights[key].view(1, -1, 1, 1)

        inv_std = 1.0 / (per_channel("running_var") + layer.params["eps"]).sqrt()
        return (x - per_channel("running_mean")) * inv_std * per_channel("weight") + per_channel(
            "bias"
        )

    def to_onnx(self, scope, x, weights, layer):
        keys = ("weight", "bias", "running_mean", "running_var")
        names = [scope.weight(k, weights[k]) for k in keys]
        return scope.one("BatchNormalization", [x, *names], epsilon=layer.params["eps"])
