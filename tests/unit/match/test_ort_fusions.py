"""ONNX Runtime's fused rows, as ORT 1.32 writes them on the CPU (tests/data/reference/
make_ort_fused.py wrote both profiles): each fused row covers the layers it holds, an
activation computed inside a layer stands for a fused one, and a row holding work no layer
of the suite stands for is ambiguous (UNCERTAIN, never PASS), whether names or kinds and
shapes matched it (issue 40)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from opbench.match.links import MatchSource, match_model
from opbench.match.suite_layers import SuiteLayer, SuiteModel
from opbench.reference.interface import ReaderOptions
from opbench.reference.onnxruntime import READER

DATA = Path(__file__).parents[2] / "data" / "reference"
IMAGE = (1, 24, 8, 8)


def profile(level: str):
    return READER.read(DATA / f"ort_fused_{level}.json", ReaderOptions()).layers


def suite(name: str, *layers: tuple) -> SuiteModel:
    """layers: (name, op, output_shape, inputs[, activation])."""
    return SuiteModel(
        name,
        name,
        tuple(
            SuiteLayer(
                name=spec[0],
                index=i,
                op=spec[1],
                output_shape=spec[2],
                inputs=spec[3],
                activation=spec[4] if len(spec) > 4 else None,
            )
            for i, spec in enumerate(layers)
        ),
    )


# the graph as separate layers, named as the profile's nodes are
SEPARATE = suite(
    "b",
    ("conv1", "conv2d", IMAGE, ("x",)),
    ("relu1", "relu", IMAGE, ("conv1",)),
    ("conv2", "conv2d", IMAGE, ("relu1",)),
    ("add", "add", IMAGE, ("conv2", "relu1")),
    ("relu2", "relu", IMAGE, ("add",)),
    ("conv3", "conv2d", IMAGE, ("relu2",)),
    ("clip", "relu6", IMAGE, ("conv3",)),
    ("pool", "avgpool2d", (1, 24, 1, 1), ("clip",)),
    ("flat", "flatten", (1, 24), ("pool",)),
    ("fc", "linear", (1, 10), ("flat",)),
    ("fc_relu", "relu", (1, 10), ("fc",)),
)
# the activations inside the conv and linear layers (what `suite from-onnx` writes)
INSIDE = suite(
    "b",
    ("conv1", "conv2d", IMAGE, ("x",), "relu"),
    ("conv2", "conv2d", IMAGE, ("conv1",)),
    ("add", "add", IMAGE, ("conv2", "conv1")),
    ("relu2", "relu", IMAGE, ("add",)),
    ("conv3", "conv2d", IMAGE, ("relu2",), "relu6"),
    ("pool", "avgpool2d", (1, 24, 1, 1), ("conv3",)),
    ("flat", "flatten", (1, 24), ("pool",)),
    ("fc", "linear", (1, 10), ("flat",), "relu"),
)


def covers(model: SuiteModel, rows) -> dict[str, set[str]]:
    """Row name → the layers it covers."""
    out: dict[str, set[str]] = {}
    for link in match_model(model, rows).links:
        out.setdefault(rows[link.row].name, set()).add(link.layer)
    return out


@pytest.mark.parametrize("level", ["extended", "all"])
@pytest.mark.parametrize("model", [SEPARATE, INSIDE], ids=["separate", "inside"])
def test_every_layer_is_covered_once_and_no_cover_is_in_doubt(level, model):
    rows = profile(level)
    result = match_model(model, rows)
    assert not result.ambiguities, result.ambiguities
    assert result.layers == set(model.layer_names())
    timed = {i for i, r in enumerate(rows) if r.status == "timed"}
    assert result.rows == timed  # every timed row is some layer's (reorders are overhead)
    if model is SEPARATE:  # (INSIDE has no relu1 or clip layer to name the NCHWc rows)
        assert all(link.source != MatchSource.SIGNATURE for link in result.links)


def test_the_fused_rows_cover_what_ort_fused():
    extended = covers(SEPARATE, profile("extended"))
    assert extended["/b/conv1/Conv"] == {"conv1", "relu1"}  # FusedConv, no bias
    assert extended["/b/conv3/Conv"] == {"conv3", "clip"}  # FusedConv with Clip
    assert extended["fused /b/fc/Gemm"] == {"fc", "fc_relu"}  # FusedGemm
    blocked = covers(SEPARATE, profile("all"))
    assert blocked["/b/relu1/Relu_output_0_nchwc"] == {"conv1", "relu1"}
    # conv2 + add + relu2 in one NCHWc conv, the residual its third input (no bias); its
    # channels padded from 24 to 32
    assert blocked["/b/conv2/Conv_output_0_nchwc"] == {"conv2", "add", "relu2"}
    assert blocked["/b/clip/Clip_output_0_nchwc"] == {"conv3", "clip"}


WITHOUT_RELU = (SEPARATE.layers[0], *SEPARATE.layers[2:])  # conv1 → conv2 directly


def test_a_fused_row_against_a_layer_without_its_activation_is_in_doubt():
    model = replace(
        SEPARATE,
        layers=tuple(
            replace(layer, index=i, inputs=("conv1",) if layer.name == "conv2" else layer.inputs)
            for i, layer in enumerate(WITHOUT_RELU)
        ),
    )
    rows = profile("extended")
    result = match_model(model, rows)
    doubts = {rows[row].name: reason for row, reason in result.ambiguities}
    assert list(doubts) == ["/b/conv1/Conv"]
    assert "its time holds work the run did not time" in doubts["/b/conv1/Conv"]


def test_the_same_row_matched_by_kind_and_shape_is_in_doubt_too():
    """Names that match nothing (another model name, other layer names): rule 5 pairs the rows
    with layers by kind and shape, and the fused kinds are checked as for a named row."""
    model = suite(
        "net",
        ("first", "conv2d", IMAGE, ("x",)),
        ("second", "conv2d", IMAGE, ("first",)),
    )
    rows = profile("extended")[:2]  # FusedConv(conv1 + relu1), Conv(conv2)
    result = match_model(model, rows)
    assert {(rows[link.row].name, link.layer) for link in result.links} == {
        ("/b/conv1/Conv", "first"),
        ("/b/conv2/Conv", "second"),
    }
    (row, reason), *rest = result.ambiguities
    assert not rest and rows[row].name == "/b/conv1/Conv"
    assert "holds work the run did not time" in reason


def test_compare_never_passes_a_fused_row_against_the_conv_alone():
    """Issue 40: each layer 10× faster than ORT's row, at --target 0.5: the FusedConv row
    against a conv without its ReLU is UNCERTAIN with the reason, the others PASS."""
    from opbench.compare.compare import compare_run
    from opbench.reference.model import ReferenceProfile
    from opbench.results.model import RunResult
    from tests.unit.report.test_reports import result

    rows = profile("extended")
    ops = {"conv": "conv2d", "add": "add", "relu": "relu", "clip": "relu6", "pool": "avgpool2d",
           "flat": "flatten", "fc": "linear"}  # fmt: skip
    names = [layer.name for layer in WITHOUT_RELU]
    layers = tuple(
        result(name, 0.001, backend="torch", model="b", dtype="float32",
               op=next(op for prefix, op in ops.items() if name.startswith(prefix)))
        for name in names
    )  # fmt: skip
    run = RunResult(suite="b", started_at="2026-11-28T00:00:00Z", device="cpu", layers=layers)
    ref = ReferenceProfile(engine="onnxruntime", source="ort.json", format="onnxruntime",
                           layers=tuple(rows), device="cpu")  # fmt: skip
    comparison = compare_run(run, ref, backend="torch", target=0.5, allow_cpu_times=True)
    verdicts = {tuple(r.layers): r.timings[0] for r in comparison.rows}
    conv1 = verdicts[("conv1",)]
    assert conv1.verdict == "UNCERTAIN" and "work the run did not time" in conv1.reason
    assert verdicts[("conv3", "clip")].verdict == "PASS"
