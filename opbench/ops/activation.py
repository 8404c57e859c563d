"""Elementwise activations: relu, gelu (exact erf form, PyTorch's default, or its tanh
approximation with `approximate: tanh`), silu and relu6."""

from __future__ import annotations

from opbench.ops.base import Example, Op, Param, numel
from opbench.ops.functional import activate, activate_reference


class _Activation(Op):
    reference_written_out = True
    flops_per_element = 1
    is_activation = True

    def flops(self, in_shape, out_shape, p):
        return self.flops_per_element * numel(in_shape)

    def forward(self, x, weights, layer):
        return activate(x, self.name)

    def reference(self, x, weights, layer):
        return activate_reference(x, self.name)


class ReLU(_Activation):
    name = "relu"
    epilogue = "relu"
    summary = "max(x, 0)"
    engine_names = "relu aten::relu"
    torch_calls = ("torch.nn.functional.relu",)
    example = Example((5, 7), (5, 7))


class GELU(_Activation):
    name = "gelu"
    epilogue = "gelu"
    summary = "x·Φ(x): erf form, or the tanh approximation (approximate: tanh)"
    engine_names = "gelu biasgelu fastgelu aten::gelu"
    torch_calls = ("torch.nn.functional.gelu",)
    example = Example((5, 7), (5, 7), {"approximate": "tanh"})
    params = (
        Param(
            "approximate", "choice", "none", ("none", "tanh"),
            help="none: x/2·(1 + erf(x/√2)); tanh: x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))",
        ),
    )  # fmt: skip
    flops_per_element = 8

    @staticmethod
    def function(p) -> str:
        """The activation's name in ops/functional.py and kernels/epilogue.py."""
        return "gelu_tanh" if p.get("approximate") == "tanh" else "gelu"

    def epilogue_name(self, params):
        return self.function(params)

    def forward(self, x, weights, layer):
        return activate(x, self.function(layer.params))

    def reference(self, x, weights, layer):
        return activate_reference(x, self.function(layer.params))


class SiLU(_Activation):
    name = "silu"
    epilogue = "silu"
    summary = "x·sigmoid(x)"
    engine_names = "silu swish aten::silu"
    torch_calls = ("torch.nn.functional.silu",)
    example = Example((5, 7), (5, 7))
    flops_per_element = 4


class ReLU6(_Activation):
    name = "relu6"
    epilogue = "relu6"
    summary = "min(max(x, 0), 6) (MobileNet's activation)"
    engine_names = "relu6 clip clamp aten::relu6 aten::hardtanh"
    torch_calls = ("torch.nn.functional.relu6",)
    example = Example((5, 7), (5, 7))
    flops_per_element = 2
