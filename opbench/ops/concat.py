"""concat: two or more inputs joined along one axis (Inception's branches, DenseNet's features,
a U-Net's skip connection). Every other axis must be equal. Axes count the batch as 0."""

from __future__ import annotations

from opbench.ops.base import VARIADIC, Example, Op, Param, ShapeError
from opbench.ops.binary import input_shapes
from opbench.ops.onnx_reading import JOIN, OnnxReading


def data_axis(axis: int, ndim: int, op: str) -> int:
    """`axis` (negative counts from the end) as an index in 1..ndim-1: the batch, axis 0, is
    the samples, not data a layer joins or cuts."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for a {ndim}-d input", "axis")
    axis %= ndim
    if axis == 0:
        raise ShapeError(f"{op} along axis 0, the batch, is not supported: axes count the "
                         "batch as 0, so the first data axis is 1", "axis")  # fmt: skip
    return axis


class Concat(Op):
    name = "concat"
    summary = "join two or more inputs along `axis` (batch is axis 0)"
    engine_names = "concat concatenation concatv2 aten::cat aten::concat aten::concatenate"
    torch_calls = ("torch.cat",)
    example = Example(((3, 5, 7), (2, 5, 7), (4, 5, 7)), (9, 5, 7), {"axis": 1})
    params = (Param("axis", "int", help="the axis the inputs are joined along; batch = 0"),)
    arity = VARIADIC
    onnx_imports = (("", "Concat", {}),)

    def read_onnx(self, node, implied):
        """Every input, a constant one as a model input of the file's values."""
        reads = tuple(range(len(node.inputs)))
        return OnnxReading({"axis": int(node.attr("axis", 0))}, JOIN, reads=reads, axes=("axis",))

    def infer_shape(self, in_shape, p):
        shapes = input_shapes(self.name, in_shape)
        first = shapes[0]
        if any(len(s) != len(first) for s in shapes):
            ranks = ", ".join(str(list(s)) for s in shapes)
            raise ShapeError(f"inputs {ranks} differ in rank", "inputs")
        axis = data_axis(p["axis"], len(first), self.name)
        for s in shapes[1:]:
            others = [d for d in range(len(first)) if d != axis and s[d] != first[d]]
            if others:
                raise ShapeError(
                    f"inputs {list(first)} and {list(s)} differ on axis {others[0]}, not only "
                    f"on the concat axis {axis}",
                    "inputs",
                )
        return (*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])

    def forward(self, x, weights, layer):
        import torch

        return torch.cat(tuple(x), dim=layer.params["axis"])

    def to_onnx(self, scope, x, weights, layer):
        return scope.one("Concat", list(x), axis=layer.params["axis"])
