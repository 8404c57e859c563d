"""Which suite layers move no data, read from the run's suite spec: flatten and reshape always,
a slice or split exactly when its piece is contiguous in the input (so a reference engine
need not time it: exempt, not MISSING)."""

from __future__ import annotations

from types import SimpleNamespace

from opbench.match.suite_layers import suite_models
from opbench.spec.load import load_suite_text, spec_to_dict

SUITE = """
name: views
defaults: {backends: [torch]}
models:
  - name: m
    batch: {batch}
    input: [6, 8]
    layers:
      - {name: head, op: slice, axis: 1, start: 0, end: 4}
      - {name: cut, op: split, axis: -1, sizes: [3, 5], index: 1}
      - {name: flat, op: flatten}
      - {name: shaped, op: reshape, shape: [4, -1]}
      - {name: act, op: relu}
"""


def moves_data(batch: int) -> dict[str, bool]:
    suite = load_suite_text(SUITE.replace("{batch}", str(batch)), "views.yaml")
    results = [SimpleNamespace(model="m", members=(layer.name,), op=layer.op,
                               output_shape=layer.output_shape, reference_name=None)
               for layer in suite.models[0].layers]  # fmt: skip
    (model,) = suite_models(spec_to_dict(suite), results)
    return {layer.name: layer.moves_data for layer in model.layers}


def test_a_contiguous_piece_is_a_view_and_a_strided_one_a_copy() -> None:
    # Batch 1: the slice of axis 1 is the first 4 rows, contiguous; the split's piece of the
    # last axis of [1, 4, 8] is strided (4 rows of 5 of 8): a copy.
    assert moves_data(1) == {"head": False, "cut": True, "flat": False, "shaped": False,
                             "act": True}  # fmt: skip
    # Batch 2: rows 0..3 of each sample are two blocks: the slice copies too.
    assert moves_data(2) == {"head": True, "cut": True, "flat": False, "shaped": False,
                             "act": True}  # fmt: skip


def test_a_spec_without_shapes_falls_back_to_the_op() -> None:
    spec = {"models": [{"name": "m", "layers": [{"name": "s", "op": "slice"},
                                                {"name": "f", "op": "flatten"}]}]}  # fmt: skip
    results = [SimpleNamespace(model="m", members=(n,), op=op, output_shape=None,
                               reference_name=None) for n, op in (("s", "slice"), ("f", "flatten"))]  # fmt: skip
    (model,) = suite_models(spec, results)
    assert [layer.moves_data for layer in model.layers] == [True, False]
