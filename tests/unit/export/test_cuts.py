"""Cutting a graph into one model per layer (export/cuts.py, export/model_files.py).

On a residual model and a branching model built with onnx.helper: every cut has one input and
one output, holds exactly the layer and what it depends on, and ONNX Runtime computes from it
the same tensor as from the whole model; the weights are on disk once. On ResNet-50 at full
size: the export's size and time targets of issue 28.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from opbench.errors import InputError
from opbench.export.cuts import INLINE_BYTES, ancestor_cuts, layer_graph
from opbench.export.model_files import write_model_files
from tests.unit.export.onnx_graphs import Builder, branching, residual, resnet50

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _all_tensors(proto, feed) -> dict[str, np.ndarray]:
    """Every node output of the whole model, by ONNX Runtime."""
    from onnx import helper

    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for out in node.output:
            if out not in known:
                probe.graph.output.append(helper.make_empty_tensor_value_info(out))
    session = ort.InferenceSession(probe.SerializeToString())
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feed), strict=True))


@pytest.mark.parametrize("make", [residual, branching], ids=["residual", "branching"])
def test_every_cut_is_the_layer_and_what_it_depends_on(make, tmp_path: Path):
    b: Builder = make()
    proto = b.model([b.out])
    expected = _all_tensors(proto, b.feed())
    graph = layer_graph(proto, b.layers)
    entry, _files = write_model_files(proto, b.name, b.manifest_layers(), b.feed(), tmp_path)
    assert [c["layer"] for c in entry["cuts"]] == [name for name, _ in b.layers]
    for cut, found in zip(entry["cuts"], ancestor_cuts(graph), strict=True):
        members = set(cut["members"])
        # closed under "reads": every layer a member reads is a member (or the model input)
        for name in members:
            reads = graph.reads[graph.index(name)]
            assert all(r in members or r == "input" for r in reads), (cut["layer"], name)
        # and nothing more: every member leads to the cut's layer
        assert cut["members"] == [graph.names[k] for k in found.members]
        assert len(cut["inputs"]) == 1 and len(cut["outputs"]) == 1
        session = ort.InferenceSession(str(tmp_path / cut["file"]))
        (got,) = session.run(None, {"input": np.load(tmp_path / cut["inputs"][0]["file"])})
        want = expected[cut["outputs"][0]["name"]]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert list(got.shape) == cut["outputs"][0]["shape"]
    # a join's cut holds both branches; a branch's cut holds only its own path
    cuts = {c["layer"]: set(c["members"]) for c in entry["cuts"]}
    if b.name == "residual":
        assert {"b1_conv3_bn", "b1_down_bn"} <= cuts["b1_add"]
        assert not {"b1_conv1", "b1_conv2", "b1_conv3"} & cuts["b1_down_bn"]
    else:
        assert {"b1", "b2_3x3", "b3_1x1"} <= cuts["cat"]
        assert cuts["b3_1x1"] == {"stem", "b3_pool", "b3_1x1"}


@pytest.mark.parametrize("make", [residual, branching], ids=["residual", "branching"])
def test_weights_are_written_once(make, tmp_path: Path):
    """Every weight of INLINE_BYTES or more is in the one weights file, at one offset, and the
    cut files only point there. (On a model this small the cuts' graphs outweigh its weights;
    the 1.5x bound is checked on ResNet-50 below.)"""
    from onnx import TensorProto

    b: Builder = make()
    proto = b.model([b.out])
    big = {
        t.name: len(t.raw_data) for t in proto.graph.initializer if len(t.raw_data) >= INLINE_BYTES
    }
    assert big  # the test means something
    entry, _files = write_model_files(proto, b.name, b.manifest_layers(), b.feed(), tmp_path)
    folder = tmp_path / entry["stem"]
    assert [p.suffix for p in folder.iterdir()].count(".weights") == 1
    assert (tmp_path / entry["weights"]).stat().st_size >= sum(big.values())
    assert entry["weights_bytes"] == (tmp_path / entry["weights"]).stat().st_size
    places: dict[str, tuple[str, ...]] = {}
    for path in [entry["file"], *(c["file"] for c in entry["cuts"])]:
        model = onnx.load(str(tmp_path / path), load_external_data=False)
        for tensor in model.graph.initializer:
            if tensor.name in big:
                assert tensor.data_location == TensorProto.EXTERNAL and not tensor.raw_data
                where = tuple((e.key, e.value) for e in tensor.external_data)
                assert places.setdefault(tensor.name, where) == where  # the same bytes


def test_layers_out_of_order_are_bad_input():
    b = residual()
    proto = b.model([b.out])
    layers = list(b.layers)
    layers[1], layers[2] = layers[2], layers[1]  # stem_relu before stem_bn, which it reads
    with pytest.raises(InputError, match="comes after it: layers must be in topological order"):
        layer_graph(proto, layers)


def test_a_node_in_no_layer_is_bad_input():
    b = residual()
    proto = b.model([b.out])
    with pytest.raises(InputError, match="belongs to no layer"):
        layer_graph(proto, b.layers[:-1])


def test_resnet50_export_size_and_time(tmp_path: Path):
    """Issue 28's targets at the ONNX level: every conv and add has its own cut, the export
    takes at most 30 s on this CPU and writes at most 150 MB, 1.5x the model at most."""
    b = resnet50()
    proto = b.model([b.out])
    whole = sum(len(t.raw_data) for t in proto.graph.initializer) + len(b.nodes) * 200
    started = time.perf_counter()
    entry, _files = write_model_files(proto, b.name, b.manifest_layers(), b.feed(), tmp_path)
    seconds = time.perf_counter() - started
    written = sum(p.stat().st_size for p in (tmp_path / entry["stem"]).iterdir())
    convs = [name for name, _ in b.layers if b.ops[name] == "conv2d"]
    adds = [name for name, _ in b.layers if b.ops[name] == "add"]
    assert (len(convs), len(adds), len(entry["cuts"])) == (53, 16, 122)
    assert {c["layer"] for c in entry["cuts"]} >= set(convs) | set(adds)
    assert seconds <= 30, seconds
    assert written <= 150e6 and written <= 1.5 * whole, (written, whole)
    assert all(len(c["inputs"]) == 1 and len(c["outputs"]) == 1 for c in entry["cuts"])
