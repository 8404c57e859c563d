"""An ONNX Runtime node is its node_index and its name together (issue 51): two nodes of one
name are two rows, each linked to its own layer; several events of one node in one run are
summed per run, said in a note and flagged, and matching doubts the row (never a PASS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opbench.match.links import match_model
from opbench.match.suite_layers import SuiteLayer, SuiteModel
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.onnxruntime import READER


def _event(name: str, op: str, ts: int, dur: int, index: int | None) -> dict:
    args = {"op_name": op, "provider": "CPUExecutionProvider"}
    if index is not None:
        args["node_index"] = str(index)
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "ph": "X",
            "args": args}  # fmt: skip


def _profile(path: Path, nodes: list[tuple[str, str, int | None]], runs: int = 3) -> Path:
    """`runs` model_run windows, each running `nodes` (name, op, node_index) in turn; the k-th
    node takes 10·(k+1) µs."""
    events = []
    for run in range(runs):
        start = 1000 * run
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": 900})
        for k, (name, op, index) in enumerate(nodes):
            events.append(_event(name, op, start + 50 * (k + 1), 10 * (k + 1), index))
    path.write_text(json.dumps(events))
    return path


# the suite `opbench suite from-onnx` writes of conv → pool 'dup' → flatten 'dup' → fc
SUITE = SuiteModel(
    "m",
    "m",
    (
        SuiteLayer("conv", 0, "conv2d"),
        SuiteLayer("dup", 1, "maxpool2d"),
        SuiteLayer("flatten", 2, "flatten", reference_name="dup#2"),
        SuiteLayer("fc", 3, "linear"),
    ),
)
FILE_NODES = [("conv", "Conv", 0), ("dup", "MaxPool", 1), ("dup", "Flatten", 2), ("fc", "Gemm", 3)]


def test_two_nodes_of_one_name_are_two_rows_each_on_its_own_layer(tmp_path: Path):
    profile = READER.read(_profile(tmp_path / "p.json", FILE_NODES), ReaderOptions())
    rows = {row.name: row for row in profile.layers}
    assert (rows["dup"].raw_type, rows["dup#2"].raw_type) == ("MaxPool", "Flatten")
    assert rows["dup"].median_ms == pytest.approx(0.020)  # the pool's own time, not the sum
    assert rows["dup#2"].median_ms == pytest.approx(0.030)
    assert any("2 nodes are named 'dup'" in note for note in profile.notes)
    found = match_model(SUITE, profile.layers)
    covers = {(profile.layers[link.row].name, link.layer) for link in found.links}
    assert ("dup", "dup") in covers and ("dup#2", "flatten") in covers
    assert ("dup", "flatten") not in covers and ("dup#2", "dup") not in covers
    assert not found.ambiguities


@pytest.mark.parametrize("index", [None, 1], ids=["no node_index", "a loop body"])
def test_several_events_of_one_node_in_a_run_are_flagged_and_doubted(tmp_path: Path, index):
    nodes = [("conv", "Conv", 0), ("dup", "MaxPool", index), ("dup", "MaxPool", index)]
    profile = READER.read(_profile(tmp_path / "p.json", nodes), ReaderOptions())
    row = next(r for r in profile.layers if r.name == "dup")
    assert Flag.REPEATED_IN_RUN in row.flags
    assert row.median_ms == pytest.approx(0.050)  # 20 + 30 µs: the node's time per run
    assert any("several events in one run ('dup' ×2)" in note for note in profile.notes)
    found = match_model(SUITE, profile.layers)
    doubted = {profile.layers[pos].name for pos, _ in found.ambiguities}
    assert "dup" in doubted
