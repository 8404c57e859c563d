"""transpose and permute. The result is made contiguous: the data movement is what gets timed."""

from __future__ import annotations

from opbench.ops.base import Example, Op, Param, ShapeError
from opbench.ops.softmax import normalise_dim


class Permute(Op):
    name = "permute"
    summary = "reorder all dims (batch is dim 0); contiguous result"
    same_rows_as = "transpose"  # engines call a permute a transpose
    torch_calls = ("torch.Tensor.permute", "torch.Tensor.contiguous")
    example = Example((3, 5, 7), (7, 3, 5), {"dims": [0, 3, 1, 2]})
    params = (Param("dims", "int_list"),)

    def permutation(self, ndim: int, p) -> tuple[int, ...]:
        dims = tuple(d % ndim if -ndim <= d < ndim else d for d in p["dims"])
        if sorted(dims) != list(range(ndim)):
            raise ShapeError(
                f"dims {list(p['dims'])} is not a permutation of the {ndim} dims 0..{ndim - 1}",
                "dims",
            )
        return dims

    def infer_shape(self, in_shape, p):
        dims = self.permutation(len(in_shape), p)
        return tuple(in_shape[d] for d in dims)

    def forward(self, x, weights, layer):
        return x.permute(self.permutation(x.dim(), layer.params)).contiguous()

    def to_onnx(self, scope, x, weights, layer):
        """Transpose by the permutation (transpose's too: the two dims swapped)."""
        perm = self.permutation(len(layer.input_shape), layer.params)
        return scope.one("Transpose", [x], perm=list(perm))


class Transpose(Permute):
    name = "transpose"
    summary = "swap two dims (batch is dim 0); contiguous result"
    engine_names = "transpose permute shuffle aten::transpose aten::permute"
    torch_calls = ("torch.Tensor.transpose", "torch.Tensor.contiguous")
    example = Example((5, 7), (7, 5), {"dims": [1, -1]})
    params = (Param("dims", "int_list"),)

    def permutation(self, ndim: int, p) -> tuple[int, ...]:
        dims = p["dims"]
        if len(dims) != 2:
            raise ShapeError(f"transpose takes two dims [a, b], got {list(dims)}", "dims")
        try:
            a, b = (normalise_dim(d, ndim) for d in dims)
        except ShapeError as exc:
            raise ShapeError(str(exc), "dims") from None
        order = list(range(ndim))
        order[a], order[b] = order[b], order[a]
        return tuple(order)

    def forward(self, x, weights, layer):
        a, b = (normalise_dim(d, x.dim()) for d in layer.params["dims"])
        return x.transpose(a, b).contiguous()
