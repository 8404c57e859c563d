"""reshape: the same elements under another per-sample shape (the batch stays dim 0). Layer
outputs are contiguous, so this is always a view: no bytes move (like flatten)."""

from __future__ import annotations

from opbench.ops.base import Example, Op, Param, ShapeError, numel


class Reshape(Op):
    name = "reshape"
    summary = "another per-sample shape for the same elements (a view)"
    # Engines call it Reshape / View, as they call a flatten: flatten's engine names.
    same_rows_as = "flatten"
    torch_calls = ("torch.Tensor.reshape",)
    example = Example((3, 5, 7), (7, 15), {"shape": [7, -1]})
    params = (Param("shape", "int_list", help="the target shape without the batch; one -1"),)
    is_view = True

    def infer_shape(self, in_shape, p):
        target = list(p["shape"])
        if not target:
            raise ShapeError("shape must name at least one dim (the batch is kept)", "shape")
        if target.count(-1) > 1:
            raise ShapeError(f"shape {target} has more than one -1", "shape")
        if any(d < 1 and d != -1 for d in target):
            raise ShapeError(f"shape {target}: dims are positive, or -1 for one inferred dim",
                             "shape")  # fmt: skip
        per_sample = numel(in_shape[1:])
        known = numel([d for d in target if d != -1])
        if -1 in target:
            if per_sample % known:
                raise ShapeError(
                    f"shape {target} cannot hold the {per_sample} elements of one sample",
                    "shape",
                )
            target[target.index(-1)] = per_sample // known
        elif known != per_sample:
            raise ShapeError(
                f"shape {target} holds {known} elements, one sample of the input {per_sample}",
                "shape",
            )
        return (in_shape[0], *target)

    def min_bytes(self, in_shape, out_shape, p, dtype):
        return 0

    def forward(self, x, weights, layer):
        return x.reshape(x.shape[0], *layer.params["shape"])

    def to_onnx(self, scope, x, weights, layer):
        """Reshape to (batch, *shape), a -1 kept as written."""
        shape = [layer.output_shape[0], *layer.params["shape"]]
        return scope.one("Reshape", [x, scope.ints("shape", shape)])
