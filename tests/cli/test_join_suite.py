"""The join ops end to end from the command line, on the CPU (torch, and Triton in its
interpreter): tests/data/suites/joins.yaml holds the graphs issue 25 names (a residual block
with a downsample branch, an inverted residual with relu6, a squeeze-excite gate and a concat of
two branches, a pre-norm block with q @ kᵀ and gate × up, named model inputs). Every layer must
pass every check and every whole model must match the float64 reference of its graph."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.results.io import read_run, resolve_latest
from opbench.results.model import Status

SUITE = Path(__file__).resolve().parents[1] / "data" / "suites" / "joins.yaml"
JOIN_OPS = {"add", "mul", "concat", "matmul", "relu6", "gelu", "reshape", "slice", "split"}

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def test_every_join_layer_and_every_whole_model_is_right(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(SUITE), "--out", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    run = read_run(resolve_latest(tmp_path / "joins") / "run.json")
    assert run.complete
    assert {r.op for r in run.layers} >= JOIN_OPS
    for r in run.layers:
        assert r.status == Status.OK, f"{r.model}/{r.layer}/{r.backend}: {r.message}"
        assert r.correct and r.correctness.unwritten == 0, f"{r.model}/{r.layer}/{r.backend}"
    triton = {(r.model, r.layer) for r in run.layers if r.backend == "triton"}
    assert len(triton) == len(run.layers) // 2, "triton ran every layer the torch backend did"
    views = {r.layer for r in run.layers if r.backend == "triton" and "no kernel" in (r.note or "")}
    assert views == {"heads"}, "reshape is a view; every slice here is a strided piece: copied"
    eager = [e for e in run.end_to_end if e.mode == "eager"]
    assert {(e.model, e.backend) for e in eager} == {
        (m, b) for m in ("resblock", "inverted", "attn_block", "two_inputs")
        for b in ("torch", "triton")
    }  # fmt: skip
    for e in eager:
        assert e.status == "ok" and e.correctness is not None, (e.model, e.backend, e.status)
        assert not e.correctness.failures, (e.model, e.backend, e.correctness)


def test_a_layer_may_read_one_value_twice(tmp_path: Path) -> None:
    """`add [x, x]` and `mul [r, r]` take two tensors (the same value twice); the group's inputs
    are the layer's `inputs:` as written, not a de-duplicated set (a bind with one tensor fails)."""
    suite = tmp_path / "twice.yaml"
    suite.write_text(
        "name: twice\n"
        "defaults: {backends: [torch, triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}\n"
        "models:\n"
        "  - name: twice\n"
        "    batch: 3\n"
        "    input: [5, 7]\n"
        "    layers:\n"
        "      - {name: double, op: add, inputs: [input, input]}\n"
        "      - {name: r, op: relu}\n"
        "      - {name: square, op: mul, inputs: [r, r]}\n"
    )
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    run = read_run(resolve_latest(tmp_path / "twice") / "run.json")
    assert {(r.layer, r.backend) for r in run.layers} == {
        (layer, backend) for layer in ("double", "r", "square") for backend in ("torch", "triton")
    }
    for r in run.layers:
        assert r.status == Status.OK and r.correct, f"{r.layer}/{r.backend}: {r.message}"
    for e in run.end_to_end:
        if e.mode == "eager":
            assert e.status == "ok" and not e.correctness.failures, (e.backend, e.correctness)
