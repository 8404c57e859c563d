"""Elementwise activations: relu, gelu (exact erf form, PyTorch's default, or its tanh
approximation with `approximate: tanh`), silu, relu6, MobileNetV3's hardswish and hardsigmoid,
and tanh.

Each one is the whole of what opbench knows about the function: its torch call, its written-out
formula and its ONNX nodes, given the parameters alone, so that the same code serves the op's
own layers and a conv's or linear's `activation:` (ops/functional.py and the ONNX export find
the op by its `epilogue` name, ops/kinds.py). Adding an activation is one class here (or a
module of its own) and the kernels' epilogue function it names.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from opbench.ops.base import Example, Op, Param, numel
from opbench.ops.onnx_reading import OnnxNode, OnnxReading, Refused

if TYPE_CHECKING:
    import torch


class Activation(Op):
    """An activation op: `activate` (the torch call), `activate_reference` (the formula) and
    `onnx_nodes` (its ONNX form: one `onnx_op` node unless it says more) take x and the
    parameters, not a layer."""

    reference_written_out = True
    flops_per_element = 1
    is_activation = True

    def flops(self, in_shape, out_shape, p):
        return self.flops_per_element * numel(in_shape)

    def activate(self, x: torch.Tensor, p) -> torch.Tensor:
        raise NotImplementedError

    def activate_reference(self, x: torch.Tensor, p) -> torch.Tensor:
        raise NotImplementedError

    def onnx_nodes(self, scope: Any, x: str, p) -> str:
        """The nodes that apply it to tensor `x`, added through `scope` (export/onnx_ops.py's
        LayerScope, passed in: ops import no exporter); the output tensor's name. By default
        one `onnx_op` node."""
        return scope.one(self.onnx_op, [x])

    @property
    def exports_to_onnx(self) -> bool:
        """Whether it has an ONNX form: an `onnx_op`, or `onnx_nodes` (or `to_onnx`) of its own."""
        own = type(self)
        return (
            bool(self.onnx_op)
            or own.onnx_nodes is not Activation.onnx_nodes
            or own.to_onnx is not Activation.to_onnx
        )

    def forward(self, x, weights, layer):
        return self.activate(x, layer.params)

    def reference(self, x, weights, layer):
        return self.activate_reference(x, layer.params)

    def to_onnx(self, scope, x, weights, layer):
        return self.onnx_nodes(scope, x, layer.params)


def clip_bounds(node: OnnxNode) -> tuple[float | None, float | None]:
    """A Clip's (min, max): constant inputs (opset 11+) or attributes; None: unbounded."""
    low, high = node.scalar(1), node.scalar(2)
    return (node.attr("min") if low is None else low, node.attr("max") if high is None else high)


class ReLU(Activation):
    name = "relu"
    epilogue = "relu"
    summary = "max(x, 0)"
    engine_names = "relu aten::relu"
    torch_calls = ("torch.nn.functional.relu",)
    onnx_op = "Relu"
    example = Example((5, 7), (5, 7))
    onnx_imports = (("", "Relu", {}), ("", "Clip", {}))  # Clip(x, 0) too

    def read_onnx(self, node, implied):
        if node.op_type != "Clip":
            return super().read_onnx(node, implied)
        low, high = clip_bounds(node)
        return OnnxReading({}) if low == 0.0 and (high is None or high >= 3.4e38) else None

    def activate(self, x, p):
        import torch.nn.functional as F

        return F.relu(x)

    def activate_reference(self, x, p):
        return x.clamp_min(0)


class GELU(Activation):
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
    #: ONNX's Gelu (opset 20; `approximate` read by `from_onnx`), ONNX Runtime's contrib Gelu
    #: and FastGelu (the tanh form).
    onnx_imports = (
        ("", "Gelu", {}),
        ("com.microsoft", "Gelu", {}),
        ("com.microsoft", "FastGelu", {"approximate": "tanh"}),
    )

    def from_onnx(self, implied, attributes):
        approximate = attributes.get("approximate", "none")
        if approximate not in ("none", "tanh"):
            return None
        return {"approximate": "tanh"} if approximate == "tanh" else dict(implied)

    @staticmethod
    def tanh(p) -> bool:
        return p.get("approximate", "none") == "tanh"

    def epilogue_name(self, params):
        """The kernels' epilogue function (kernels/epilogue.py): gelu, or gelu_tanh."""
        return "gelu_tanh" if self.tanh(params) else "gelu"

    def activate(self, x, p):
        import torch.nn.functional as F

        return F.gelu(x, approximate="tanh") if self.tanh(p) else F.gelu(x)

    def activate_reference(self, x, p):
        import torch

        if self.tanh(p):
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1.0 + torch.tanh(inner))
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))

    def onnx_nodes(self, scope, x, p):
        return (
            scope.one("Gelu", [x], approximate="tanh") if self.tanh(p) else scope.one("Gelu", [x])
        )


class SiLU(Activation):
    name = "silu"
    epilogue = "silu"
    summary = "x·sigmoid(x)"
    engine_names = "silu swish aten::silu"
    torch_calls = ("torch.nn.functional.silu",)
    example = Example((5, 7), (5, 7))
    flops_per_element = 4
    onnx_imports = (("opbench", "Silu", {}),)  # importers/onnx/rules.py's x·sigmoid(x)

    def activate(self, x, p):
        import torch.nn.functional as F

        return F.silu(x)

    def activate_reference(self, x, p):
        import torch

        return x / (1.0 + torch.exp(-x))

    def onnx_nodes(self, scope, x, p):
        gate = scope.one("Sigmoid", [x])  # first, so it carries the layer's name
        return scope.one("Mul", [x, gate])


class ReLU6(Activation):
    name = "relu6"
    epilogue = "relu6"
    summary = "min(max(x, 0), 6) (MobileNet's activation)"
    engine_names = "relu6 clip clamp aten::relu6 aten::hardtanh"
    torch_calls = ("torch.nn.functional.relu6",)
    example = Example((5, 7), (5, 7))
    flops_per_element = 2
    onnx_imports = (("", "Clip", {}),)  # Clip(x, 0, 6), as its export writes it

    def read_onnx(self, node, implied):
        low, high = clip_bounds(node)
        if low == 0.0 and high == 6.0:
            return OnnxReading({})
        raise Refused(f"Clip({low}, {high}) is neither relu nor relu6")

    def activate(self, x, p):
        import torch.nn.functional as F

        return F.relu6(x)

    def activate_reference(self, x, p):
        return x.clamp(0.0, 6.0)

    def onnx_nodes(self, scope, x, p):
        """Clip(x, 0, 6) with the bounds as scalar initializers."""
        import numpy as np

        low = scope.weight("clip_min", np.array(0.0, dtype=np.float32))
        high = scope.weight("clip_max", np.array(6.0, dtype=np.float32))
        return scope.one("Clip", [x, low, high])


class HardSwish(Activation):
    name = "hardswish"
    epilogue = "hardswish"
    summary = "x·min(max(x + 3, 0), 6)/6 (MobileNetV3's activation)"
    engine_names = "hardswish hard_swish aten::hardswish"
    torch_calls = ("torch.nn.functional.hardswish",)
    onnx_op = "HardSwish"
    example = Example((5, 7), (5, 7))
    flops_per_element = 4

    def activate(self, x, p):
        import torch.nn.functional as F

        return F.hardswish(x)

    def activate_reference(self, x, p):
        return x * (x + 3.0).clamp(0.0, 6.0) / 6.0


#: PyTorch's hardsigmoid is ONNX's HardSigmoid with alpha 1/6 (stored in float32), beta 1/2.
HARDSIGMOID_ALPHA = 1.0 / 6.0


class HardSigmoid(Activation):
    name = "hardsigmoid"
    epilogue = "hardsigmoid"
    summary = "min(max(x/6 + 1/2, 0), 1) (MobileNetV3's squeeze-excitation gate)"
    engine_names = "hardsigmoid hard_sigmoid aten::hardsigmoid"
    torch_calls = ("torch.nn.functional.hardsigmoid",)
    example = Example((5, 7), (5, 7))
    flops_per_element = 3
    onnx_imports = (("", "HardSigmoid", {}),)

    def from_onnx(self, implied, attributes):
        """PyTorch's slope and offset only (ONNX's default alpha is 0.2: another function)."""
        alpha, beta = attributes.get("alpha", 0.2), attributes.get("beta", 0.5)
        if abs(alpha - HARDSIGMOID_ALPHA) > 1e-7 or beta != 0.5:
            return None
        return dict(implied)

    def activate(self, x, p):
        import torch.nn.functional as F

        return F.hardsigmoid(x)

    def activate_reference(self, x, p):
        return (x / 6.0 + 0.5).clamp(0.0, 1.0)

    def onnx_nodes(self, scope, x, p):
        return scope.one("HardSigmoid", [x], alpha=HARDSIGMOID_ALPHA, beta=0.5)


class Tanh(Activation):
    name = "tanh"
    epilogue = "tanh"
    summary = "tanh(x)"
    engine_names = "tanh aten::tanh"
    torch_calls = ("torch.tanh",)
    onnx_op = "Tanh"
    example = Example((5, 7), (5, 7))
    flops_per_element = 4

    def activate(self, x, p):
        import torch

        return torch.tanh(x)

    def activate_reference(self, x, p):
        import torch

        # 1 - 2/(e^{2|x|} + 1), odd: no overflow to inf/inf for large |x|.
        return torch.sign(x) * (1.0 - 2.0 / (torch.exp(2.0 * x.abs()) + 1.0))
