"""masks.py: a mask computed from an int64 [B, N] model input is the key padding mask only if
the nodes between them compute exactly that (evaluated on probe masks); anything else is
refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ir = pytest.importorskip("onnxscript").ir
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from opbench.importers.onnx import masks as M  # noqa: E402
from opbench.importers.onnx.views import NotAView  # noqa: E402


def _mask_model(invert: bool, causal: bool, seq: int = 5):
    """attention_mask [2, seq] → an additive [2, 1, seq, seq] mask (0 seen, -inf hidden)."""
    nodes = [
        helper.make_node("Cast", ["m"], ["b"], to=TensorProto.BOOL, name="cast"),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b4"], name="unsqueeze"),
    ]
    keep = "b4"
    if invert:
        nodes.append(helper.make_node("Not", ["b4"], ["nb"], name="not"))
        keep = "nb"
    if causal:
        nodes.append(helper.make_node("And", [keep, "tril"], ["both"], name="and"))
        keep = "both"
    nodes.append(helper.make_node("Where", [keep, "zero", "minf"], ["mask"], name="where"))
    inits = [
        numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes"),
        numpy_helper.from_array(np.tril(np.ones((seq, seq), dtype=bool)), "tril"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        numpy_helper.from_array(np.array(-np.inf, dtype=np.float32), "minf"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("m", TensorProto.INT64, [2, seq])],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, None)],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model = ir.serde.deserialize_model(proto)
    order = {id(n): i for i, n in enumerate(model.graph)}
    value = model.graph.outputs[0]
    return M.mask_graph(value, {"m"}, order), {"": 18}


@pytest.mark.parametrize("causal", [False, True])
def test_a_key_padding_mask_is_read_with_or_without_causal(causal: bool):
    found, opsets = _mask_model(invert=False, causal=causal)
    assert [n.name for n in found.nodes][:2] == ["cast", "unsqueeze"]
    assert M.padding_mask(found, opsets, queries=5, kind="add") is causal


def test_another_mask_is_refused():
    found, opsets = _mask_model(invert=True, causal=False)
    with pytest.raises(NotAView, match="not a key padding mask"):
        M.padding_mask(found, opsets, queries=5, kind="add")
