"""The graph suites of issue 25 (tests/data/suites/graph_blocks.yaml: ResNet blocks with a downsample
branch, a pre-norm block with SwiGLU's gate × up, an inverted residual with relu6 and a concat
of two branches) validate, and run on the CPU with torch and Triton (interpreter): every layer
and every whole model passes its check. Bad graphs of the real join ops give located errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import ExitCode
from opbench.pipeline import RunOptions, run_suite
from opbench.results.model import Status
from opbench.spec.load import load_suite

SUITES = Path(__file__).resolve().parents[1] / "data" / "suites"
GRAPHS = SUITES / "graph_blocks.yaml"


@pytest.fixture(scope="module")
def run():
    return run_suite(load_suite(GRAPHS), RunOptions(device="cpu"))


def test_the_graph_suites_are_graphs_and_validate_cleanly() -> None:
    suite = load_suite(GRAPHS)
    assert suite.warnings == (), [str(w) for w in suite.warnings]
    by = {m.name: m for m in suite.models}
    resnet = by["resnet_blocks"]
    assert resnet.layer("b1_add").inputs == ("b1_bn3", "b1_down_bn")
    assert resnet.layer("b2_add").inputs == ("b2_bn2", "b1_out")
    assert resnet.graph.consumers[resnet.graph.index("b1_out")] == (
        resnet.graph.index("b2_conv1"),
        resnet.graph.index("b2_add"),
    )
    swiglu = by["prenorm_swiglu"]
    assert swiglu.layer("prod").inputs == ("gate", "up")
    assert swiglu.layer("out").inputs == ("h", "down")
    mobile = by["mobilenet_blocks"]
    assert mobile.layer("cat").output_shape == (2, 9, 7, 7)
    for model in suite.models:
        assert len(model.graph.pieces) == 1 and len(model.graph.outputs) == 1


def test_every_layer_passes_on_torch_and_triton(run) -> None:
    assert {r.backend for r in run.layers} == {"torch", "triton"}
    for r in run.layers:
        assert r.status == Status.OK, f"{r.model}/{r.layer}/{r.backend}: {r.message}"
        assert r.correct, f"{r.model}/{r.layer}/{r.backend}: {r.correctness}"
    joins = {(r.model, r.layer) for r in run.layers if r.op in ("add", "mul", "concat")}
    assert joins == {
        ("resnet_blocks", "b1_add"),
        ("resnet_blocks", "b2_add"),
        ("prenorm_swiglu", "h"),
        ("prenorm_swiglu", "prod"),
        ("prenorm_swiglu", "out"),
        ("mobilenet_blocks", "ir_add"),
        ("mobilenet_blocks", "cat"),
    }


def test_triton_fuses_conv_bn_act_along_the_graph(run) -> None:
    fused = {r.covers for r in run.layers if r.backend == "triton" and r.covers}
    assert ("b1_down", "b1_down_bn") in fused, "the downsample branch, after the main path"
    # issue 26: the residual add and the ReLU after it join the conv's epilogue
    assert ("b1_conv3", "b1_bn3", "b1_add", "b1_out") in fused
    assert ("ir_expand", "ir_bn1", "ir_act1") in fused, "relu6 fuses too"
    assert ("br_b", "br_b_act") in fused


def test_every_whole_model_runs_over_its_graph_and_is_right(run) -> None:
    rows = {(e.model, e.backend, e.mode): e for e in run.end_to_end}
    assert len(rows) == 3 * 2 * 2
    for model, output in (
        ("resnet_blocks", "b2_out"),
        ("prenorm_swiglu", "out"),
        ("mobilenet_blocks", "head"),
    ):
        for backend in ("torch", "triton"):
            eager = rows[(model, backend, "eager")]
            assert eager.status == Status.OK, (model, backend, eager.message)
            assert eager.correct, (model, backend, eager.correctness)
            assert eager.outputs == (output,) and eager.live_bytes > 0
            assert eager.correctness.reference == "float64-cpu"
            graph = rows[(model, backend, "cuda_graph")]
            assert graph.status == Status.UNSUPPORTED and graph.correctness is None


BAD = """\
name: bad
models:
  - name: m
    batch: 2
    input: [4, 7, 6]
    layers:
      - {name: a, op: conv2d, out_channels: 8, kernel_size: 1}
      - {name: b1_add, op: add, inputs: [a, input]}
      - {name: cat, op: concat, axis: 1, inputs: [a, c]}
      - {name: c, op: relu}
      - {name: cat2, op: concat, axis: 2, inputs: [a, input]}
      - {name: prod, op: mul, inputs: [a]}
      - {name: typo, op: relu, inputs: [b1_ad]}
"""


def test_bad_graphs_of_the_real_joins_are_located_all_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == ExitCode.BAD_INPUT
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 5, result.output
    assert f"{path}:8:33, model 'm', layer 'b1_add'" in errors[0]
    assert errors[0].endswith(
        "add 'b1_add': inputs [2, 8, 7, 6] and [2, 4, 7, 6] do not broadcast (batch included)"
    )
    assert "input 'c' is a later layer" in errors[1]
    assert "concat 'cat2': inputs [2, 8, 7, 6] and [2, 4, 7, 6] differ" in errors[2]
    assert errors[3].endswith("op 'mul' takes 2 inputs, this layer reads 1")
    assert "unknown input 'b1_ad' (did you mean 'b1_add'?)" in errors[4]
    assert "Traceback" not in result.output


def test_torch_compiles_the_whole_graph_and_its_outputs_are_checked(monkeypatch) -> None:
    """torch-compile's graph figure is its compile of the whole forward over the graph (a
    counting Dynamo backend stands in for Inductor here; the timer is a stand-in too, so the
    CUDA-only graph row runs on the CPU)."""
    import opbench.pipeline.end_to_end as end_to_end
    from opbench.backends.registry import get_backend
    from opbench.backends.torch_compile import TorchCompile
    from opbench.measure.timer import Measurement
    from opbench.pipeline import ModelData, time_end_to_end

    graphs = []

    def counting_backend(graph_module, example_inputs, mode=None, options=None):
        graphs.append(graph_module)
        return graph_module.forward

    monkeypatch.setattr(TorchCompile, "compiler", staticmethod(counting_backend))
    monkeypatch.setattr(
        end_to_end, "time_callable", lambda fn, *a, **k: (fn(), Measurement(((1.0,),), "fake"))[1]
    )
    suite = load_suite(GRAPHS)
    model = suite.model("mobilenet_blocks")
    data = ModelData(suite, model, "cpu")
    backend = get_backend("torch-compile")
    built = {
        (i,): backend.build([la], [data.weights(i)], "cpu") for i, la in enumerate(model.layers)
    }
    eager, graph = time_end_to_end(
        model, "torch-compile", built, data, RunOptions(device="cuda"), backend
    )
    assert len(graphs) == len(model.layers) + 1, "one more compile: the whole forward"
    called = {str(n.target) for n in graphs[-1].graph.nodes if n.op == "call_function"}
    assert any("cat" in t for t in called) and any("add" in t for t in called), called
    assert graph.status == Status.OK and "reduce-overhead" in graph.message
    assert graph.correct and graph.outputs == ("head",), graph.correctness
    assert eager.correct
