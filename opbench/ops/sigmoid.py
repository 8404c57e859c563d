"""sigmoid(x) = 1 / (1 + exp(-x)), elementwise (the logistic function)."""

from __future__ import annotations

from opbench.ops.base import Example, Op, numel


class Sigmoid(Op):
    name = "sigmoid"
    summary = "1 / (1 + exp(-x))"
    engine_names = "sigmoid logistic aten::sigmoid"
    torch_calls = ("torch.sigmoid",)
    onnx_op = "Sigmoid"
    example = Example((5, 7), (5, 7))
    reference_written_out = True
    is_activation = True  # no epilogue applies it (yet): it fuses into no GEMM or conv

    def flops(self, in_shape, out_shape, p):
        return 4 * numel(in_shape)  # negate, exp, add, divide

    def forward(self, x, weights, layer):
        import torch

        return torch.sigmoid(x)

    def reference(self, x, weights, layer):
        import torch

        # exp(-x) overflows to inf for x << 0 and 1 / inf is 0: right, with no NaN.
        return 1.0 / (1.0 + torch.exp(-x))
