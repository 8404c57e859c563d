"""Elementwise activations: relu, gelu (exact erf form, PyTorch's default) and silu."""

from __future__ import annotations

from opbench.ops.base import Op, numel
from opbench.ops.functional import activate, activate_reference


class _Activation(Op):
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


class GELU(_Activation):
    name = "gelu"
    summary = "x·Φ(x), erf form"
    flops_per_element = 8


class SiLU(_Activation):
    name = "silu"
    summary = "x·sigmoid(x)"
    flops_per_element = 4
