"""The model graph chart of report.html: lanes for branches, nodes coloured by verdict, one time
bar per comparison row, names escaped, carried through comparison.json."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from opbench.compare.compare import compare_run
from opbench.compare.graphs import GraphLayer, model_graphs
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus
from opbench.report.csvjson import comparison_json, read_comparison
from opbench.report.graph_chart import layout, model_svg
from opbench.report.html import render_html
from opbench.report.style import verdict_colour
from opbench.results.model import Correctness, LayerResult, RunResult

EVIL = "<b>&'x"
GOOD = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
BLOCK = (  # a residual block: conv → bn → add(skip) → relu, the skip a conv of the input
    GraphLayer("c1", "conv2d", ("input",)),
    GraphLayer("bn1", "batchnorm2d", ("c1",)),
    GraphLayer("down", "conv2d", ("input",)),
    GraphLayer("add", "add", ("bn1", "down")),
    GraphLayer(EVIL, "relu", ("add",)),
)


def test_a_chain_keeps_its_lane_and_a_branch_takes_the_next() -> None:
    placed, edges = layout(BLOCK)
    lanes = {p.name: p.lane for p in placed}
    assert [p.name for p in placed] == ["input", "c1", "bn1", "down", "add", EVIL]
    assert [p.row for p in placed] == list(range(6))
    assert lanes["c1"] == 1 and lanes["bn1"] == 1, "the input holds lane 0 until down reads it"
    assert lanes["down"] == 0, "the input's lane, freed by its last reader, goes on as down"
    assert lanes["add"] == 1 and lanes[EVIL] == 1
    assert ("down", "add") in edges and ("bn1", "add") in edges and len(edges) == 6


def spec_layer(layer: GraphLayer) -> dict:
    return {"name": layer.name, "op": layer.op, "inputs": list(layer.inputs)}


def result(layer: str, ms: float, covers: tuple[str, ...] = (), backend: str = "triton"):
    return LayerResult(
        model="m", layer=layer, op="conv2d", backend=backend, status="ok", dtype="float16",
        input_shape=(1, 4, 5, 5), output_shape=(1, 4, 5, 5),
        samples_ms=(tuple(ms * (1 + 0.01 * (i % 3)) for i in range(20)),), correctness=GOOD,
        covers=covers,
    )  # fmt: skip


def comparison():
    run = RunResult(
        suite="s", started_at="2026-11-25T00:00:00Z", device="cuda", complete=True,
        suite_spec={"models": [{"name": "m", "layers": [spec_layer(la) for la in BLOCK]}]},
        layers=(
            result("c1", 0.1, ("c1", "bn1")),
            result("down", 0.05),
            result("add", 0.2, ("add", EVIL)),
        ),
    )  # fmt: skip
    timing = dict(engine="onnxruntime", source="ref.json", status=RefStatus.TIMED)
    profile = ReferenceProfile(
        engine="onnxruntime", source="ref.json", format="onnxruntime",
        layers=(
            ReferenceTiming(index=0, name="c1", median_ms=1.0, **timing),
            ReferenceTiming(index=1, name="down", median_ms=0.01, **timing),
            ReferenceTiming(index=2, name="add", median_ms=1.0, **timing),
        ),
    )  # fmt: skip
    return compare_run(run, profile, run_label="run")


def test_the_chart_colours_each_layer_by_its_rows_verdict(tmp_path: Path) -> None:
    c = comparison()
    assert c.graphs == {"m": BLOCK}
    verdicts = {row.label: row.primary.verdict for row in c.rows}
    svg = model_svg(c, "m", BLOCK)
    root = ET.fromstring(svg)  # well-formed, names escaped
    circles = root.findall("{http://www.w3.org/2000/svg}g/{http://www.w3.org/2000/svg}circle")
    assert len(circles) == len(BLOCK)
    fills = [circle.get("fill") for circle in circles]
    assert fills[0] == fills[1] == verdict_colour(verdicts["c1 + bn1"])
    assert fills[2] == verdict_colour(verdicts["down"])
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("height") == "8"]
    assert len(bars) == 3, "one time bar per comparison row"
    html = render_html(c, [])
    assert '<figure class="model-graph" id="graph-m">' in html and EVIL not in html
    path = tmp_path / "comparison.json"
    path.write_text(comparison_json(c))
    assert read_comparison(path).graphs == c.graphs


def test_graphs_of_runs_without_inputs_read_as_chains() -> None:
    spec = {"models": [{"name": "m", "layers": [{"name": "a", "op": "relu"},
                                                {"name": "b", "op": "gelu"}]}]}  # fmt: skip
    assert model_graphs(spec, ["m", "other"]) == {
        "m": (GraphLayer("a", "relu", ("input",)), GraphLayer("b", "gelu", ("a",)))
    }
