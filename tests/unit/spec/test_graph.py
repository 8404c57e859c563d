"""Models as graphs: `inputs:` wiring, named model inputs, shapes inferred over the graph, the
graph's own queries (spec/graph.py), and every wiring mistake reported at once with its place.

The join ops here are the tests' own (`t_add`, `t_concat`: tests/unit/graph_ops.py), so the
plumbing is tested apart from the real ops."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import ExitCode
from opbench.spec.graph import INPUT, fresh_input
from opbench.spec.load import load_suite_text
from opbench.spec.problems import SuiteErrors

pytestmark = pytest.mark.usefixtures("join_ops")

RESIDUAL = """\
name: g
models:
  - name: block
    batch: 2
    input: [4, 5, 5]
    layers:
      - {name: conv1, op: conv2d, out_channels: 6, kernel_size: 3, padding: 1}
      - {name: relu1, op: relu}
      - {name: conv2, op: conv2d, out_channels: 6, kernel_size: 1}
      - {name: down, op: conv2d, out_channels: 6, kernel_size: 1, inputs: [input]}
      - {name: add, op: t_add, inputs: [conv2, down]}
      - {name: out, op: relu}
"""


def test_layers_read_the_layer_before_them_unless_they_name_their_inputs() -> None:
    model = load_suite_text(RESIDUAL, "g.yaml").models[0]
    assert [layer.inputs for layer in model.layers] == [
        (INPUT,),
        ("conv1",),
        ("relu1",),
        (INPUT,),
        ("conv2", "down"),
        ("add",),
    ]
    add = model.layer("add")
    assert add.input_shapes == ((2, 6, 5, 5), (2, 6, 5, 5)) and add.output_shape == (2, 6, 5, 5)
    assert add.input_shape == add.input_shapes[0]
    # Fresh data only: the first layer and the branch reading the model input.
    assert [all(p is None for p in ps) for ps in model.graph.producers] == [
        True,
        False,
        False,
        True,
        False,
        False,
    ]


def test_the_graph_knows_producers_consumers_outputs_and_last_readers() -> None:
    model = load_suite_text(RESIDUAL, "g.yaml").models[0]
    graph = model.graph
    assert graph is model.graph, "computed once per model"
    assert graph.inputs == {INPUT: (2, 4, 5, 5)}
    assert graph.producers == ((None,), (0,), (1,), (None,), (2, 3), (4,))
    assert graph.consumers == ((1,), (2,), (4,), (4,), (5,), ())
    assert graph.outputs == (5,)
    assert graph.last_reader == {INPUT: 3, "conv1": 1, "relu1": 2, "conv2": 4, "down": 4, "add": 5}
    assert graph.freed_after(4) == ("conv2", "down")
    assert graph.pieces == ((0, 1, 2, 3, 4, 5),)
    assert graph.ancestors(4) == {0, 1, 2, 3}
    assert graph.is_connected((2, 4, 5)) and not graph.is_connected((0, 3))
    assert graph.external_inputs((2, 4)) == ("relu1", "down")
    assert graph.group_outputs((2, 4)) == (4,) and graph.group_outputs((0, 1)) == (1,)


def test_groups_run_in_an_order_of_the_graph_not_of_their_first_layer() -> None:
    # `side` (layer 1) reads `a`, which the group (0, 2) makes: the group must run first,
    # although `side` comes before the group's second layer.
    text = """\
name: g
models:
  - name: m
    input: [6]
    layers:
      - {name: a, op: relu}
      - {name: side, op: silu}
      - {name: b, op: t_add, inputs: [a, side]}
"""
    graph = load_suite_text(text, "g.yaml").models[0].graph
    assert graph.order_groups([(1,), (0,), (2,)]) == [(0,), (1,), (2,)]
    with pytest.raises(ValueError, match="no order"):
        graph.order_groups([(0, 2), (1,)])  # b needs side, side needs a: a cycle of groups
    with pytest.raises(ValueError, match="exactly once"):
        graph.order_groups([(0,), (2,)])


def test_live_bytes_free_each_output_after_its_last_reader() -> None:
    model = load_suite_text(RESIDUAL, "g.yaml").models[0]
    graph = model.graph
    per = 2 * 6 * 5 * 5 * 4  # every output here is [2, 6, 5, 5] float32
    # At `add` (layer 4): conv2 and down are alive and add is written: three at once.
    assert graph.live_bytes([4] * 6) == 3 * per
    assert graph.live_bytes([2] * 6) == 3 * per // 2


def test_named_model_inputs_get_the_batch_and_are_read_by_name() -> None:
    text = """\
name: g
models:
  - name: m
    batch: [1, 3]
    inputs: {x: [4, 8], y: [1, 8]}
    layers:
      - {name: sum, op: t_add, inputs: [x, y]}
      - {name: cat, op: t_concat, axis: 1, inputs: [sum, x, sum]}
"""
    one, three = load_suite_text(text, "g.yaml").models
    assert one.inputs == (("x", (1, 4, 8)), ("y", (1, 1, 8)))
    assert three.layer("sum").input_shapes == ((3, 4, 8), (3, 1, 8))
    assert three.layer("cat").output_shape == (3, 12, 8)
    graph = three.graph
    assert graph.inputs == {"x": (3, 4, 8), "y": (3, 1, 8)}
    assert graph.consumers[0] == (1,), "a layer read twice by one reader is one edge"
    assert graph.external_inputs((0, 1)) == ("x", "y")
    assert graph.producers[0] == (None, None) and graph.producers[1] == (0, None, 0)


def test_a_layer_with_its_own_input_starts_a_piece_of_fresh_data() -> None:
    text = """\
name: g
models:
  - name: m
    input: [8]
    layers:
      - {name: a, op: relu}
      - {name: b, op: relu, input: [5]}
      - {name: c, op: silu}
"""
    suite = load_suite_text(text, "g.yaml")
    model = suite.models[0]
    assert model.layer("b").inputs == (fresh_input("b"),) == ("b/input",)
    assert model.graph.inputs == {INPUT: (1, 8), "b/input": (1, 5)}
    assert model.graph.pieces == ((0,), (1, 2))
    assert model.graph.outputs == (0, 2)
    (warning,) = suite.warnings
    assert "falls apart into 2 disconnected pieces" in str(warning)
    assert str(warning).startswith("g.yaml:7:9, model 'm', layer 'b'")


def test_dead_branches_and_unread_inputs_are_warnings_not_errors() -> None:
    text = """\
name: g
models:
  - name: m
    inputs: {x: [6], unused: [6]}
    layers:
      - {name: a, op: relu, inputs: [x]}
      - {name: dead, op: silu}
      - {name: b, op: gelu, inputs: [a]}
"""
    suite = load_suite_text(text, "g.yaml")
    lines = [str(w) for w in suite.warnings]
    assert len(lines) == 2, lines
    assert any("layer 'dead'" in w and "read by no later layer" in w for w in lines)
    assert any("model input 'unused' is read by no layer" in w for w in lines)


BAD = """\
name: bad
models:
  - name: m
    batch: 2
    inputs: {x: [6, 5, 5], y: [4, 5, 5]}
    layers:
      - {name: a, op: relu, inputs: [x]}
      - {name: b, op: relu, inputs: [xx]}
      - {name: c, op: relu, inputs: [later]}
      - {name: d, op: relu, inputs: [d]}
      - {name: e, op: relu, input: [3], inputs: [a]}
      - {name: f, op: t_add, inputs: [a]}
      - {name: g, op: t_add, inputs: [a, y]}
      - {name: h, op: t_concat, axis: 1, inputs: [a, y, x]}  # fine: only axis 1 differs
      - {name: i, op: t_concat, axis: 2, inputs: [a, y]}
      - {name: later, op: relu, inputs: [a]}
      - {name: y, op: relu, inputs: [a]}
"""


def test_every_wiring_mistake_is_reported_at_once_with_its_place() -> None:
    with pytest.raises(SuiteErrors) as caught:
        load_suite_text(BAD, "bad.yaml")
    found = {
        e.location.layer: (e.location.line, e.location.column, e.message)
        for e in caught.value.errors
    }
    assert found["b"][:2] == (8, 38) and "unknown input 'xx' (did you mean 'x'?)" in found["b"][2]
    assert found["c"][:2] == (9, 38)
    assert (
        "input 'later' is a later layer (layer 10 of the model, this is layer 3)" in found["c"][2]
    )
    assert "cannot read its own output" in found["d"][2]
    assert "either fresh data" in found["e"][2]
    assert found["f"][2] == "op 't_add' takes 2 inputs, this layer reads 1"
    assert found["g"][2] == (
        "t_add 'g': inputs [2, 6, 5, 5] and [2, 4, 5, 5] do not broadcast (batch included)"
    )
    assert "h" not in found
    assert found["i"][2] == (
        "t_concat 'i': inputs [2, 6, 5, 5] and [2, 4, 5, 5] differ outside axis 2 (batch included)"
    )
    assert found["i"][:2] == (15, 33), "a join's error points at its field when the op names one"
    assert "also the name of a model input" in found["y"][2]
    assert len(caught.value.errors) == 8
    text = str(caught.value)
    assert text.count("\nerror: ") == 7 and "Traceback" not in text


def test_validate_prints_every_mistake_and_exits_2(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == ExitCode.BAD_INPUT
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 8 and all(f"{path}:" in line for line in errors)
    assert "Traceback" not in result.output


def test_validate_prints_warnings_and_passes(tmp_path) -> None:
    path = tmp_path / "pieces.yaml"
    path.write_text(
        "name: p\nmodels:\n  - name: m\n    input: [8]\n    layers:\n"
        "      - {name: a, op: relu}\n      - {name: b, op: relu, input: [5]}\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"warning: {path}:7:9, model 'm', layer 'b'" in result.output
    assert "is valid" in result.output


@pytest.mark.parametrize(
    "model, message, line",
    [
        ("    input: [6]\n    inputs: {x: [6]}\n", "not both", 5),
        ("    inputs: {x: [6], y: [6]}\n", "its first layer must name the ones it reads", 6),
        ("    inputs: {'x y': [6]}\n", "input name 'x y'", 4),
        ("    inputs: {x: [0]}\n", "every dimension must be at least 1", 4),
    ],
)
def test_model_inputs_are_declared_one_way(model: str, message: str, line: int) -> None:
    text = f"name: bad\nmodels:\n  - name: m\n{model}    layers:\n      - {{name: a, op: relu}}\n"
    with pytest.raises(Exception) as caught:
        load_suite_text(text, "bad.yaml")
    assert message in str(caught.value)
    assert caught.value.location.line == line, str(caught.value)


def test_a_broken_layer_skips_only_what_reads_it() -> None:
    # `bad` fails; `after` reads it and is skipped silently; `other` reads the input and its
    # own mistake is still found.
    text = """\
name: bad
models:
  - name: m
    input: [6]
    layers:
      - {name: bad, op: linear}
      - {name: after, op: relu}
      - {name: other, op: softmax, dim: 5, inputs: [input]}
"""
    with pytest.raises(SuiteErrors) as caught:
        load_suite_text(text, "bad.yaml")
    assert [e.location.layer for e in caught.value.errors] == ["bad", "other"]


def test_an_op_may_take_a_number_of_inputs_its_parameters_say() -> None:
    text = """\
name: g
models:
  - name: m
    input: [6]
    layers:
      - {name: a, op: relu}
      - {name: one, op: t_pick, count: 1}
      - {name: three, op: t_pick, count: 3, inputs: [a, one]}
      - {name: bad, op: t_pick, count: 0, inputs: [a, one]}
"""
    with pytest.raises(SuiteErrors) as caught:
        load_suite_text(text, "g.yaml")
    found = {e.location.layer: e.message for e in caught.value.errors}
    assert found["three"] == "op 't_pick' takes 3 inputs, this layer reads 2"
    assert "count must be at least 1" in found["bad"], "the count's own mistake, nothing more"
    assert set(found) == {"three", "bad"}, "`one` takes the 1 input its count asks for"
