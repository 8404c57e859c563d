"""Elementwise activations: relu, gelu (exact erf form, PyTorch's default) and silu."""

from __future__ import annotations

from opbench.ops.base import Example, Op, numel
from opbench.ops.functional import activate, activate_reference


class _Activation(Op):
    reference_written_out = True
    flops_per_element = 1

    def flops(self, in_shape, out_shape, p):
        return self.flops_per_element * numel(in_shape)

    def forward(self, x, weights, layer):
        return activate(x, self.name)

    def reference(self, x, weights, layer):
        return activate_reference(x, self.name)


class ReLU(_Activation):
    name = "relu"
    summary = "max(x, 0)"
    engine_names = "relu aten::relu"
    torch_calls = ("torch.nn.functional.relu",)
    example = Example((5, 7), (5, 7))


class GELU(_Activation):
    name = "gelu"
    summary = "x·Φ(x), erf form"
    engine_names = "gelu biasgelu fastgelu aten::gelu"
    torch_calls = ("torch.nn.functional.gelu",)
    example = Example((5, 7), (5, 7))
    flops_per_element = 8


class SiLU(_Activation):
    name = "silu"
    summary = "x·sigmoid(x)"
    engine_names = "silu swish aten::silu"
    torch_calls = ("torch.nn.functional.silu",)
    example = Example((5, 7), (5, 7))
    flops_per_element = 4
