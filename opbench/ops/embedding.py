"""embedding: rows of a weight table gathered by integer ids (a token, token-type or position
embedding).

Parameters:
- `num_embeddings` (required): rows of the table (the vocabulary, or the largest position + 1);
- `embedding_dim` (required): the width E of a row;
- `positions` (default false): gather rows `offset, offset + 1, ..., offset + S - 1` for
  every sequence, where S is the last dim of the input, instead of the rows the ids name.
  This is a position embedding (BERT's `position_ids = arange(S) + past`): the input is then
  read for its shape only (any dtype: the token ids, say);
- `offset` (default 0): with `positions`, the first position.

Input: ids [..., S] (the batch first), an integer tensor (int64, as a model input declared
`{shape: [S], dtype: int64, high: vocab}`: docs/suite-format.md); each id in [0, num_embeddings).
Weight: `weight` [num_embeddings, embedding_dim] (seeded random normal).
Output: [..., S, embedding_dim] in the layer's dtype.

Torch baseline: `F.embedding(ids, weight)` (a position embedding: `F.embedding(arange(S) +
offset` expanded over the batch, weight)`). Reference: `weight[ids]`,
indexing written out. Cost: no FLOPs; bytes = the ids read (8 bytes each) + the rows read +
the output written (each row is read once per id that names it: a gather reads what it writes).
"""

from __future__ import annotations

from opbench.ops.base import ITEMSIZE, Example, Op, Param, ShapeError, numel
from opbench.ops.onnx_reading import JOIN, OnnxReading, Refused

ID_BYTES = 8  # int64 ids


class Embedding(Op):
    name = "embedding"
    summary = "rows of a num_embeddings x embedding_dim table gathered by int64 ids"
    engine_names = "gather embedding aten::embedding aten::index_select"
    torch_calls = ("torch.nn.functional.embedding",)
    reference_written_out = True
    example = Example((7,), (7, 6), {"num_embeddings": 11, "embedding_dim": 6}, integer=(0,))
    params = (
        Param("num_embeddings", "pos_int", help="rows of the table (vocabulary size)"),
        Param("embedding_dim", "pos_int", help="width of a row"),
        Param("positions", "bool", False, help="gather rows offset .. offset+S-1 (positions)"),
        Param("offset", "nonneg_int", 0, help="first position (with positions: true)"),
    )
    #: Gather(table, ids) of a constant table by computed ids (the importer tells it from a
    #: Gather that is a view: importers/onnx/handlers_transformer.is_embedding)
    onnx_imports = (("", "Gather", {}),)

    def read_onnx(self, node, implied):
        table = node.constant(0)
        if table is None or table.ndim != 2 or int(node.attr("axis", 0)) != 0:
            raise Refused("a Gather of rows that is not a constant 2-D table over axis 0")
        if not node.inputs[1].integer:
            raise Refused("a Gather whose indices are not integers")
        params = {"num_embeddings": int(table.shape[0]), "embedding_dim": int(table.shape[1])}
        return OnnxReading(params, JOIN, {"weight": (0, "asis")}, reads=(1,))

    def integer_inputs(self, params):
        return (0,)

    def id_high(self, params):
        return params["num_embeddings"]

    def infer_shape(self, in_shape, p):
        if len(in_shape) < 2:
            raise ShapeError(f"embedding needs ids [..., S], got {list(in_shape[1:])}")
        if p["positions"] and p["offset"] + in_shape[-1] > p["num_embeddings"]:
            raise ShapeError(
                f"positions {p['offset']}..{p['offset'] + in_shape[-1] - 1} run past the "
                f"{p['num_embeddings']} rows of the table",
                "num_embeddings",
            )
        return (*in_shape, p["embedding_dim"])

    def weight_shapes(self, in_shape, p):
        return {"weight": (p["num_embeddings"], p["embedding_dim"])}

    def min_bytes(self, in_shape, out_shape, p, dtype):
        ids = 0 if p["positions"] else numel(in_shape) * ID_BYTES
        rows = numel(out_shape) if not p["positions"] else in_shape[-1] * p["embedding_dim"]
        return ids + (rows + numel(out_shape)) * ITEMSIZE[dtype]

    def position_ids(self, x, p):
        """[S] int64 positions offset .. offset + S - 1, on x's device."""
        import torch

        return torch.arange(x.shape[-1], device=x.device) + p["offset"]

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        p = layer.params
        if p["positions"]:  # the positions of every sequence (BERT: position_ids.expand)
            return F.embedding(self.position_ids(x, p).expand(x.shape), weights["weight"])
        return F.embedding(x, weights["weight"])

    def reference(self, x, weights, layer):
        p = layer.params
        ids = self.position_ids(x, p).expand(x.shape) if p["positions"] else x.long()
        return weights["weight"][ids]

    def to_onnx(self, scope, x, weights, layer):
        """Gather(table, ids, axis=0); a position embedding gathers the constant positions
        offset .. offset + S - 1 and Expands them over the batch."""
        import numpy as np

        p = layer.params
        table = scope.weight("weight", weights["weight"])
        if not p["positions"]:
            return scope.one("Gather", [table, x], axis=0)
        seq = layer.input_shape[-1]
        positions = scope.ints("positions", np.arange(p["offset"], p["offset"] + seq))
        rows = scope.one("Gather", [table, positions], axis=0)
        return scope.one("Expand", [rows, scope.ints("shape", layer.output_shape)])
