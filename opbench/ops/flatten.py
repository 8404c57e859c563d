"""flatten from start_dim to the end. On contiguous data this is a view: no bytes move."""

from __future__ import annotations

from opbench.ops.base import Example, Op, Param, ShapeError, numel
from opbench.ops.softmax import normalise_dim


class Flatten(Op):
    name = "flatten"
    summary = "merge dims start_dim.. into one (a view)"
    engine_names = "flatten reshape aten::flatten aten::view aten::reshape"
    torch_calls = ("torch.Tensor.flatten",)
    example = Example((3, 5, 7), (3, 35), {"start_dim": 2})
    params = (Param("start_dim", "int", 1),)
    is_view = True

    def infer_shape(self, in_shape, p):
        try:
            start = normalise_dim(p["start_dim"], len(in_shape))
        except ShapeError as exc:
            raise ShapeError(str(exc), "start_dim") from None
        return (*in_shape[:start], numel(in_shape[start:]))

    def min_bytes(self, in_shape, out_shape, p, dtype):
        return 0

    def forward(self, x, weights, layer):
        return x.flatten(layer.params["start_dim"])

    def to_onnx(self, scope, x, weights, layer):
        """Flatten(axis=1) for start_dim 1, else a Reshape to the output shape."""
        start = layer.params["start_dim"] % len(layer.input_shape)
        if start == 1:
            return scope.one("Flatten", [x], axis=1)
        return scope.one("Reshape", [x, scope.ints("shape", layer.output_shape)])
