"""softmax over one dimension (dims count the batch dimension as 0)."""

from __future__ import annotations

from opbench.ops.base import Example, Op, Param, ShapeError, numel
from opbench.ops.onnx_reading import JOIN, ROWS, OnnxReading


def normalise_dim(dim: int, ndim: int) -> int:
    if not -ndim <= dim < ndim:
        raise ShapeError(f"dim {dim} is out of range for a {ndim}-d tensor", "dim")
    return dim % ndim


class Softmax(Op):
    name = "softmax"
    summary = "softmax over one dim"
    engine_names = "softmax logsoftmax aten::softmax aten::_softmax"
    torch_calls = ("torch.softmax",)
    example = Example((5, 7), (5, 7), {"dim": 1})
    reference_written_out = True
    params = (Param("dim", "int", -1),)
    onnx_imports = (("", "Softmax", {}),)

    def read_onnx(self, node, implied):
        """Over the last axis: rows, whatever the other dims hold; over another: that dim."""
        rank = len(node.shape(0))
        axis = int(node.attr("axis", -1)) % rank
        if axis == rank - 1:
            return OnnxReading({}, ROWS)
        return OnnxReading({"dim": axis}, JOIN, axes=("dim",))

    def infer_shape(self, in_shape, p):
        normalise_dim(p["dim"], len(in_shape))
        return in_shape

    def flops(self, in_shape, out_shape, p):
        return 5 * numel(in_shape)

    def forward(self, x, weights, layer):
        import torch

        return torch.softmax(x, dim=layer.params["dim"])

    def reference(self, x, weights, layer):
        dim = layer.params["dim"]
        e = (x - x.amax(dim, keepdim=True)).exp()
        return e / e.sum(dim, keepdim=True)

    def to_onnx(self, scope, x, weights, layer):
        return scope.one("Softmax", [x], axis=layer.params["dim"])
