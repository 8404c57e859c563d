"""linear: y = act(x @ W^T + b) over the last dimension; `quant` asks for a quantized kernel:
int8 (W8A8), fp8 (e4m3 W8A8), int8-weight or int4-weight (weight-only; int4 in groups of
`group_size` along K). The formats are in kernels/quant.py."""

from __future__ import annotations

import math

from opbench.ops.base import ITEMSIZE, Example, Op, Param, ShapeError, numel
from opbench.ops.functional import activate, activate_onnx, activate_reference
from opbench.ops.kinds import ACTIVATION
from opbench.ops.onnx_reading import ROWS, OnnxReading, Refused
from opbench.ops.quant import DEFAULT_GROUP_SIZE, LINEAR_QUANTS

LINEAR_QUANT = Param("quant", "choice", "none", LINEAR_QUANTS)
GROUP_SIZE = Param("group_size", "pos_int", DEFAULT_GROUP_SIZE,
                   help="int4-weight: weights per scale along K (a power of two >= 16)")  # fmt: skip


class Linear(Op):
    name = "linear"
    summary = "y = act(x·Wᵀ + b) over the last dim; quant: int8 | fp8 | int8-weight | int4-weight"
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
        LINEAR_QUANT,
        GROUP_SIZE,
    )
    #: MatMul by a constant (of two activations it is matmul's), Gemm, and importers/onnx/rules.py's
    #: MatMul + Add of a bias
    onnx_imports = (("", "MatMul", {}), ("", "Gemm", {}), ("opbench", "Linear", {}))

    def read_onnx(self, node, implied):
        if node.op_type == "MatMul" and not node.is_constant(1):
            return None
        array = node.constant(1)
        if array is None or array.ndim != 2:
            raise Refused("the right-hand side is not a 2-D constant")
        how = "transpose"  # MatMul's x·W keeps Wᵀ
        if node.op_type == "Gemm":
            if (
                node.attr("transA", 0)
                or node.attr("alpha", 1.0) != 1.0
                or node.attr("beta", 1.0) != 1.0
            ):
                raise Refused("only Gemm with transA=0, alpha=beta=1 is a linear layer")
            if node.attr("transB", 0):
                how = "asis"
        out = int(array.shape[0] if how == "asis" else array.shape[1])
        weights = {"weight": (1, how)}
        if node.given(2):
            b = node.constant(2)
            if b is None or b.size != out or (b.ndim == 2 and b.shape[0] != 1):
                raise Refused("the addend is not a bias over the output features")
            weights["bias"] = (2, "asis")
        params = {"out_features": out, "bias": node.given(2)}
        return OnnxReading(params, ROWS, weights, last_dim=out)

    def infer_shape(self, in_shape, p):
        if len(in_shape) < 2:
            raise ShapeError(f"linear needs at least [batch, features], got {list(in_shape)}")
        group = p.get("group_size", DEFAULT_GROUP_SIZE)
        if p.get("quant") == "int4-weight":
            if group < 16 or group & (group - 1):
                raise ShapeError(
                    f"group_size must be a power of two >= 16, got {group}", field="group_size"
                )
            if in_shape[-1] % group:
                raise ShapeError(
                    f"int4-weight needs in_features ({in_shape[-1]}) to be a multiple of "
                    f"group_size ({group})",
                    field="group_size",
                )
        return (*in_shape[:-1], p["out_features"])

    def min_bytes(self, in_shape, out_shape, p, dtype):
        """x and y once in the layer's dtype, the weight once as stored: 1 byte per element for
        int8, fp8 and int8-weight (+ fp32 channel scales), half a byte for int4-weight (+ one
        scale in the layer's dtype per group); the bias in the layer's dtype."""
        size = ITEMSIZE[dtype]
        n, k = p["out_features"], in_shape[-1]
        quant = p.get("quant", "none")
        if quant in ("int8", "fp8", "int8-weight"):
            weight = n * k + 4 * n
        elif quant == "int4-weight":
            weight = n * k // 2 + n * (k // p.get("group_size", DEFAULT_GROUP_SIZE)) * size
        else:
            weight = n * k * size
        bias = n * size if p.get("bias", True) else 0
        return (numel(in_shape) + numel(out_shape)) * size + weight + bias

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
        # A quantized layer is checked against the unquantized math: the quantization error is
        # what its looser tolerance allows for (spec/model.py, QUANT_TOLERANCE).
        y = x @ weights["weight"].T
        if "bias" in weights:
            y = y + weights["bias"]
        return activate_reference(y, layer.params["activation"])

    def to_onnx(self, scope, x, weights, layer):
        """Gemm (transB=1) on 2-D input; above 2-D MatMul with Wᵀ, then Add for the bias."""
        if len(layer.input_shape) == 2:
            inputs = [x, scope.weight("weight", weights["weight"])]
            if "bias" in weights:
                inputs.append(scope.weight("bias", weights["bias"]))
            y = scope.one("Gemm", inputs, transB=1)
        else:
            y = scope.one("MatMul", [x, scope.weight("weight_t", weights["weight"].T)])
            if "bias" in weights:
                y = scope.one("Add", [y, scope.weight("bias", weights["bias"])])
        return activate_onnx(scope, y, layer.params["activation"])
