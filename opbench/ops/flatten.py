"""flatten from start_dim to the end. On contiguous data this is a view: no bytes move."""

from __future__ import annotations

from opbench.ops.base import Op, Param, ShapeError, numel
from opbench.ops.softmax import normalise_dim


class Flatten(Op):
    name = "flatten"
    summary = "merge dims start_dim.. into one (a view)"
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
