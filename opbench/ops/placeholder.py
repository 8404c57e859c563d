"""placeholder: a layer that stands for an ONNX node opbench has no op for.

`opbench suite from-onnx --skip-unsupported` writes one for each unsupported node, so that the
graph stays connected: the layers after it still read what they read in the model, with their
shapes. It computes nothing, so no backend runs it: every backend reports it `unsupported`
(its verdict is NOT-MEASURED), and a model that holds one is never timed end to end.
"""

from __future__ import annotations

from opbench.errors import Unsupported
from opbench.ops.base import VARIADIC, Example, Op, Param, ShapeError


class Placeholder(Op):
    name = "placeholder"
    summary = "stands for an unsupported ONNX node; never run, never measured"
    example = Example(((3, 5),), (4, 2), {"stands_for": "TopK", "shape": [4, 2]})
    params = (
        Param("stands_for", "str", help="the ONNX op type it stands for"),
        Param("shape", "int_list", help="its output shape without the batch"),
        Param("reads", "pos_int", 1, help="how many inputs it reads"),
    )
    arity = VARIADIC
    runs = False

    def input_count(self, params) -> int:
        return int(params.get("reads", 1))

    def takes(self, count: int, params=None) -> bool:
        return count >= 1 if params is None else count == self.input_count(params)

    def infer_shape(self, in_shape, p):
        if any(d < 1 for d in p["shape"]):
            raise ShapeError(f"shape {list(p['shape'])} has a dim below 1", "shape")
        return (in_shape[0][0], *p["shape"])

    def min_bytes(self, in_shape, out_shape, p, dtype) -> int:
        return 0

    def forward(self, x, weights, layer):
        raise Unsupported(
            f"a placeholder for an unsupported ONNX {layer.params['stands_for']} node: "
            "nothing to run or measure"
        )

    reference = forward
