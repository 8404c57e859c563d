"""matmul: the product of two activations, batched, as `torch.matmul` computes it.

    y[..., m, n] = sum_k a[..., m, k] * b[..., k, n]

Attention written out (q @ kᵀ, probs @ v), or any product of two layer outputs. Each input
has at least two dims besides the batch; the leading dims (batch included) broadcast by
NumPy's rules. A product with a weight is a `linear` layer, not this op.
"""

from __future__ import annotations

from opbench.ops.base import Example, Op, ShapeError, numel
from opbench.ops.binary import broadcast_shape, input_shapes
from opbench.ops.onnx_reading import BATCHED, OnnxReading, Refused


class MatMul(Op):
    name = "matmul"
    summary = "a @ b of two activations, batched ([..., M, K] @ [..., K, N])"
    # Engines name this product as they name a linear layer's (MatMul, MatrixMultiply,
    # aten::bmm ...): its rows carry linear's engine names (ops/linear.py lists them all).
    same_rows_as = "linear"
    torch_calls = ("torch.matmul",)
    onnx_op = "MatMul"
    example = Example(((2, 5, 7), (2, 7, 3)), (2, 5, 3))
    arity = 2
    onnx_imports = (("", "MatMul", {}),)

    def read_onnx(self, node, implied):
        if node.is_constant(1):
            return None  # by a constant: a linear layer
        if node.is_constant(0):
            raise Refused("a constant on the left of a MatMul")
        return OnnxReading({}, BATCHED, reads=(0, 1))

    def infer_shape(self, in_shape, p):
        a, b = input_shapes(self.name, in_shape, 2)
        if len(a) < 3 or len(b) < 3:
            raise ShapeError(
                f"inputs {list(a)} and {list(b)}: matmul takes [..., M, K] and [..., K, N], "
                "two dims besides the batch at least",
                "inputs",
            )
        if a[-1] != b[-2]:
            raise ShapeError(
                f"inputs {list(a)} and {list(b)}: K differs (a's last dim {a[-1]}, b's "
                f"second-last {b[-2]})",
                "inputs",
            )
        lead = broadcast_shape(a[:-2], b[:-2])
        if lead is None:
            raise ShapeError(
                f"inputs {list(a)} and {list(b)}: leading dims {list(a[:-2])} and "
                f"{list(b[:-2])} do not broadcast",
                "inputs",
            )
        return (*lead, a[-2], b[-1])

    def flops(self, in_shape, out_shape, p):
        return 2 * numel(out_shape) * in_shape[0][-1]

    def forward(self, x, weights, layer):
        import torch

        a, b = x
        return torch.matmul(a, b)
