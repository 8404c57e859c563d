"""slice and split: one piece of the input along one axis (batch = axis 0).

`slice` keeps `start:end:step` of the axis (Python's rules: negative indices count from the
end, out-of-range ends are clipped); `split` is one piece of `torch.split(x, sizes, axis)`,
piece `index` (a split into three pieces is three layers reading one input, e.g. q, k, v).

The result is the same memory as the input, a view, when the piece is contiguous there: every
axis before `axis` has size 1 (the batch too) and the step is 1, or the piece is the whole
axis. Then no bytes move and no kernel runs, and like flatten the layer is exempt from
verdicts (`view_layer`). Otherwise the piece is copied into a contiguous output, as a permute
is: the data movement is what gets timed, the torch baseline included (`.contiguous()`).
"""

from __future__ import annotations

from opbench.ops.base import ITEMSIZE, Example, Op, Param, Shape, ShapeError, numel
from opbench.ops.concat import data_axis


def contiguous_piece(in_shape: Shape, axis: int, start: int, length: int, step: int) -> bool:
    """True when elements start, start+step, ... (length of them) of `axis` of a contiguous
    tensor are themselves one contiguous block (so the piece is a view)."""
    if length == in_shape[axis] and step == 1:
        return True  # the whole axis: the whole tensor
    return numel(in_shape[:axis]) == 1 and (step == 1 or length == 1)


class _Piece(Op):
    """What slice and split share: a piece (axis, start, length, step) of one input."""

    def piece(self, in_shape: Shape, p) -> tuple[int, int, int, int]:
        raise NotImplementedError

    def view_layer(self, in_shape: Shape, p) -> bool:
        """The layer's output is a view of its input (no kernel, exempt from verdicts)."""
        return contiguous_piece(in_shape, *self.piece(in_shape, p))

    def infer_shape(self, in_shape, p):
        axis, _, length, _ = self.piece(in_shape, p)
        return (*in_shape[:axis], length, *in_shape[axis + 1 :])

    def min_bytes(self, in_shape, out_shape, p, dtype):
        if self.view_layer(in_shape, p):
            return 0
        return 2 * numel(out_shape) * ITEMSIZE[dtype]  # the piece read once, written once


class Slice(_Piece):
    name = "slice"
    summary = "start:end:step of one axis (a view when contiguous, else copied)"
    engine_names = "slice stridedslice aten::slice aten::narrow"
    torch_calls = ("torch.Tensor.__getitem__", "torch.Tensor.contiguous")
    example = Example((5, 9), (5, 3), {"axis": 2, "start": 1, "end": -2, "step": 2})
    params = (
        Param("axis", "int", help="the axis cut; batch = 0"),
        Param("start", "int", 0),
        Param("end", "int", None, help="exclusive; default: the end of the axis"),
        Param("step", "pos_int", 1),
    )

    def piece(self, in_shape, p):
        axis = data_axis(p["axis"], len(in_shape), self.name)
        size = in_shape[axis]
        start, stop, step = slice(p["start"], p["end"], p["step"]).indices(size)
        length = len(range(start, stop, step))
        if length == 0:
            raise ShapeError(
                f"start {p['start']}, end {p['end']}, step {p['step']} leave nothing of axis "
                f"{axis} (size {size})",
                "start",
            )
        return axis, start, length, step

    def forward(self, x, weights, layer):
        p = layer.params
        axis = data_axis(p["axis"], x.dim(), self.name)
        index = (slice(None),) * axis + (slice(p["start"], p["end"], p["step"]),)
        return x[index].contiguous()

    def to_onnx(self, scope, x, weights, layer):
        """Slice(starts, ends, axes, steps); no end: the int64 maximum (the whole axis)."""
        import numpy as np

        p = layer.params
        end = p["end"] if p.get("end") is not None else np.iinfo(np.int64).max
        inputs = [x, scope.ints("starts", [p.get("start", 0)]), scope.ints("ends", [end])]
        inputs += [scope.ints("axes", [p["axis"]]), scope.ints("steps", [p.get("step", 1)])]
        return scope.one("Slice", inputs)


class Split(_Piece):
    name = "split"
    summary = "piece `index` of splitting one axis into `sizes` (a view when contiguous)"
    engine_names = "split splitwithsizes variadicsplit aten::split aten::split_with_sizes"
    torch_calls = ("torch.split", "torch.Tensor.contiguous")
    example = Example((5, 9), (5, 4), {"axis": -1, "sizes": [3, 4, 2], "index": 1})
    params = (
        Param("axis", "int", help="the axis split; batch = 0"),
        Param("sizes", "int_list", help="every piece's length; they add up to the axis"),
        Param("index", "nonneg_int", help="which piece this layer is, from 0"),
    )

    def piece(self, in_shape, p):
        axis = data_axis(p["axis"], len(in_shape), self.name)
        sizes = list(p["sizes"])
        if not sizes or any(s < 1 for s in sizes):
            raise ShapeError(f"sizes {sizes} must be positive lengths", "sizes")
        if sum(sizes) != in_shape[axis]:
            raise ShapeError(
                f"sizes {sizes} add up to {sum(sizes)}, not to axis {axis}'s size {in_shape[axis]}",
                "sizes",
            )
        index = p["index"]
        if index >= len(sizes):
            raise ShapeError(f"index {index} is past the {len(sizes)} pieces", "index")
        return axis, sum(sizes[:index]), sizes[index], 1

    def forward(self, x, weights, layer):
        import torch

        p = layer.params
        return torch.split(x, list(p["sizes"]), dim=p["axis"])[p["index"]].contiguous()

    def to_onnx(self, scope, x, weights, layer):
        """The one piece the layer is, as a Slice (ONNX's Split would make every piece; the
        others would be dangling outputs nothing reads). The principal node's hint (the
        exporter's `layer_hint`) says it is a split."""
        p = layer.params
        start = sum(p["sizes"][: p["index"]])
        end = start + p["sizes"][p["index"]]
        inputs = [x, scope.ints("starts", [start]), scope.ints("ends", [end])]
        return scope.one("Slice", [*inputs, scope.ints("axes", [p["axis"]])])
