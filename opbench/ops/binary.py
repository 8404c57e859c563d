"""add and mul: two inputs, the second broadcast onto the first by NumPy's rules.

The joins of real networks: ResNet's residual add (two maps of one shape), a squeeze-excite
gate (a [C, 1, 1] per-sample scale times a [C, H, W] map), a per-row scale ([S, 1] times
[S, E]), SwiGLU's gate × up (one shape). The output always has the first input's shape: a
first input that would itself have to broadcast is refused, so the layer's output shape is
its first input's, as a residual connection reads.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from opbench.ops.base import Example, Op, Shape, ShapeError, numel
from opbench.ops.onnx_reading import BROADCAST, OnnxReading


def input_shapes(op: str, in_shapes, count: int | None = None) -> tuple[Shape, ...]:
    """The tuple of input shapes a multi-input op receives (full shapes, batch included),
    checked for its length: `count` inputs, or two or more when None. (Resolution checks the
    count first; this keeps a direct caller from unpacking the wrong number.)"""
    shapes = tuple(tuple(s) for s in in_shapes)
    if count is not None and len(shapes) != count:
        raise ShapeError(f"{op} takes {count} inputs, got {len(shapes)}", "inputs")
    if count is None and len(shapes) < 2:
        raise ShapeError(f"{op} takes two or more inputs, got {len(shapes)}", "inputs")
    return shapes


def broadcast_shape(a: Sequence[int], b: Sequence[int]) -> Shape | None:
    """NumPy's broadcast of two shapes (aligned on the right), or None if they do not."""
    ndim = max(len(a), len(b))
    pa = (1,) * (ndim - len(a)) + tuple(a)
    pb = (1,) * (ndim - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(out)


def check_broadcast_onto(a: Sequence[int], b: Sequence[int]) -> None:
    """Raise ShapeError unless b broadcasts onto a with a's shape unchanged."""
    both = broadcast_shape(a, b)
    if both is None:
        raise ShapeError(f"inputs {list(a)} and {list(b)} do not broadcast", "inputs")
    if both != tuple(a):
        raise ShapeError(
            f"inputs {list(a)} and {list(b)} broadcast to {list(both)}, not to the first "
            "input's shape: put the larger input first",
            "inputs",
        )


class _Binary(Op):
    """y = a ∘ b, b broadcast onto a (shapes in `inputs:` order, batch included).

    The baseline is `torch.<name>(a, b)` (torch.add, torch.mul); the reference is `formula`,
    Python's operator on the float64 tensors."""

    arity = 2
    reference_written_out = True
    formula: Callable[[Any, Any], Any]

    def read_onnx(self, node, implied):
        """Its `onnx_op` node; a constant operand becomes a model input of the file's values."""
        return OnnxReading({}, BROADCAST, reads=(0, 1))

    def infer_shape(self, in_shape, p):
        a, b = input_shapes(self.name, in_shape, 2)
        check_broadcast_onto(a, b)
        return a

    def flops(self, in_shape, out_shape, p):
        return numel(out_shape)

    # min_bytes: Op's, every input read once (a broadcast one at its own, smaller size).

    def forward(self, x, weights, layer):
        import torch

        a, b = x
        return getattr(torch, self.name)(a, b)

    def reference(self, x, weights, layer):
        a, b = x
        return type(self).formula(a, b)


class Add(_Binary):
    name = "add"
    summary = "a + b, b broadcast onto a (residual add, per-channel or per-row bias)"
    engine_names = "add sum res residual elementwise eltwise addv2 aten::add aten::add_"
    torch_calls = ("torch.add",)
    onnx_op = "Add"
    onnx_imports = (("", "Add", {}),)
    example = Example(((3, 5, 7), (3, 5, 7)), (3, 5, 7))
    formula = operator.add


class Mul(_Binary):
    name = "mul"
    summary = "a · b, b broadcast onto a (gating: SwiGLU, squeeze-excite, per-row scale)"
    engine_names = "mul multiply prod aten::mul aten::mul_"
    torch_calls = ("torch.mul",)
    onnx_op = "Mul"
    onnx_imports = (("", "Mul", {}),)
    example = Example(((3, 5, 7), (3, 1, 1)), (3, 5, 7))
    formula = operator.mul
