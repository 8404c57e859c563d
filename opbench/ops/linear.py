"""linear: y = act(x @ W^T + b) over the last dimension; `quant: int8` asks for W8A8."""

from __future__ import annotations

import math

from opbench.ops.base import ACTIVATION, QUANT, Example, Op, Param, ShapeError, numel
from opbench.ops.functional import activate, activate_reference


class Linear(Op):
    name = "linear"
    summary = "y = act(x·Wᵀ + b) over the last dim; quant: int8 for W8A8"
    engine_names = (
        "output gemm matmul fusedmatmul fusedgemm matmulinteger qgemm matmulnbits "
        "dynamicquantizematmul fullyconnected fc matrixmultiply linear aten::linear "
        "aten::addmm aten::mm innerproduct batchmatmul batchmatmulv2 bmm aten::bmm aten::matmul"
    )
    torch_calls = ("torch.nn.functional.linear",)
    example = Example((5, 7), (5, 9), {"out_features": 9, "activation": "gelu"})
    reference_written_out = True
    params = (
        Param("out_features", "pos_int"),
        Param("bias", "bool", True),
        ACTIVATION,
        QUANT,
    )

    def infer_shape(self, in_shape, p):
        if len(in_shape) < 2:
            raise ShapeError(f"linear needs at least [batch, features], got {list(in_shape)}")
        return (*in_shape[:-1], p["out_features"])

    def weight_shapes(self, in_shape, p):
        shapes = {"weight": (p["out_features"], in_shape[-1])}
        if p["bias"]:
            shapes["bias"] = (p["out_features"],)
        return shapes

    def flops(self, in_shape, out_shape, p):
        return 2 * numel(in_shape[:-1]) * in_shape[-1] * p["out_features"]

    def make_weights(self, layer, generator):
        weights = super().make_weights(layer, generator)
        # Scale so outputs stay O(1) for any K: keeps fp16 chains far from overflow.
        weights["weight"] /= math.sqrt(layer.input_shape[-1])
        return weights

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        y = F.linear(x, weights["weight"], weights.get("bias"))
        return activate(y, layer.params["activation"])

    def reference(self, x, weights, layer):
        # A `quant: int8` layer is checked against the unquantized math: the quantization
        # error is what its looser tolerance allows for.
        y = x @ weights["weight"].T
        if "bias" in weights:
            y = y + weights["bias"]
        return activate_reference(y, layer.params["activation"])
