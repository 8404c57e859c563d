"""Graphs through the pipeline on the CPU: a join's per-layer checks get its producers' data,
the whole model runs over the graph and is checked against the float64 reference of the whole
graph, each value is freed after its last reader, and the Triton fusion follows the graph.

The joins are the tests' own (`t_add`: tests/unit/graph_ops.py, torch only), so this tests the
plumbing apart from the real join ops and their kernels."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import opbench.pipeline.forward as forward_module
from opbench.backends.base import Bound, Built
from opbench.backends.registry import get_backend
from opbench.backends.triton import fusion_groups
from opbench.pipeline import ModelData, RunOptions, run_suite, time_end_to_end
from opbench.pipeline.torch_forward import module_forward
from opbench.results.model import Status
from opbench.spec.load import load_suite_text

pytestmark = pytest.mark.usefixtures("join_ops")

TIMING = "{warmup_ms: 0, rep_ms: 1, rounds: 1}"
RESIDUAL = f"""\
name: g
defaults: {{backends: [torch], timing: {TIMING}}}
models:
  - name: block
    batch: 2
    input: [3, 5, 4]
    layers:
      - {{name: conv1, op: conv2d, out_channels: 4, kernel_size: 3, padding: 1}}
      - {{name: relu1, op: relu}}
      - {{name: conv2, op: conv2d, out_channels: 4, kernel_size: 1}}
      - {{name: down, op: conv2d, out_channels: 4, kernel_size: 1, inputs: [input]}}
      - {{name: add, op: t_add, inputs: [conv2, down]}}
      - {{name: out, op: relu}}
"""


def torch_built(model, data, backend="torch"):
    impl = get_backend(backend)
    return {
        (i,): impl.build([layer], [data.weights(i)], "cpu") for i, layer in enumerate(model.layers)
    }


def test_a_join_is_checked_on_its_producers_data() -> None:
    suite = load_suite_text(RESIDUAL, "g.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    a, b = data.inputs(4)
    assert a is data.value("conv2", "float32") and b is data.value("down", "float32")
    assert data.input(3) is data.input(0), "the branch and the first layer read one input"
    second = data.inputs(4, check="torch")
    assert not torch.equal(second[0], a), "the second input is drawn afresh"
    run = run_suite(suite, RunOptions())
    add = run.find("block", "add", "torch")
    assert add.status == Status.OK and add.correct, add.correctness
    assert add.input_shape == (2, 4, 5, 4)
    # two inputs read and one output written, float32
    assert add.bytes == 3 * 2 * 4 * 5 * 4 * 4
    assert all(r.correct for r in run.layers)


def test_the_whole_residual_graph_is_run_and_checked() -> None:
    suite = load_suite_text(RESIDUAL, "g.yaml")
    run = run_suite(suite, RunOptions())
    eager, graph = run.end_to_end
    assert (eager.mode, eager.status) == ("eager", Status.OK)
    assert eager.outputs == ("out",)
    corr = eager.correctness
    assert corr is not None and corr.passed and corr.reference == "float64-cpu", corr
    assert corr.rel_l2 < 1e-6 and corr.tolerance == 1e-4
    assert eager.correct
    # conv2, down and add alive at once: three [2, 4, 5, 4] float32 tensors
    assert eager.live_bytes == 3 * 2 * 4 * 5 * 4 * 4
    assert eager.peak_bytes is None, "no device memory figure on the CPU"
    assert (graph.status, graph.correctness) == (Status.UNSUPPORTED, None)


def test_the_whole_graph_check_finds_a_wrong_join() -> None:
    suite = load_suite_text(RESIDUAL, "g.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    built = torch_built(model, data)
    built[(4,)] = Built(fn=lambda a, b: a - b)  # wrong: the residual subtracted
    eager, _ = time_end_to_end(model, "torch", built, data, RunOptions())
    assert eager.status == Status.WRONG and not eager.correct
    assert any(f.startswith("rel_l2") for f in eager.correctness.failures)


def test_the_whole_graph_check_finds_a_buffer_never_written() -> None:
    """`down` (bound: it reads the model input) writes its buffer while the forward is set up,
    then never again: the check poisons every bound buffer first, so the stale answer cannot
    pass, and the poison reaches the model's output."""
    suite = load_suite_text(RESIDUAL, "g.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    built = torch_built(model, data)
    right = built[(3,)].fn
    calls = []

    def lazy_bind(x):
        out = torch.empty(model.layers[3].output_shape)

        def launch():
            calls.append(1)
            if len(calls) == 1:
                out.copy_(right(x))
            return out

        return Bound(launch, out)

    built[(3,)] = Built(fn=right, bind=lazy_bind)
    eager, _ = time_end_to_end(model, "torch", built, data, RunOptions())
    # NaN + x keeps the NaN's bits on the CPU: the output may even read as never written.
    assert eager.correctness.nonfinite == out_numel(model, 5)
    assert eager.correctness.failures and not eager.correct


def out_numel(model, index: int) -> int:
    n = 1
    for d in model.layers[index].output_shape:
        n *= d
    return n


def test_each_value_is_freed_after_its_last_reader() -> None:
    suite = load_suite_text(RESIDUAL, "g.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    plain = torch_built(model, data)
    made: dict[str, weakref.ref] = {}
    alive_at_add: list[set[str]] = []

    def recording(name, fn):
        def run(*xs):
            if name == "add":
                gc.collect()
                alive_at_add.append({n for n, ref in made.items() if ref() is not None})
            out = fn(*xs)
            made[name] = weakref.ref(out)
            return out

        return Built(fn=run)

    built = {g: recording(model.layers[g[0]].name, b.fn) for g, b in plain.items()}
    forward = forward_module.eager_forward(model, built, data)
    made.clear()
    (out,) = forward.call()
    gc.collect()
    # While add runs, only its two inputs are alive: conv1 and relu1 were freed after conv2.
    assert alive_at_add[-1] == {"conv2", "down"}
    assert {n for n, ref in made.items() if ref() is not None} == {"out"}
    assert made["out"]() is out


def test_several_model_outputs_are_all_returned_and_checked() -> None:
    text = f"""\
name: g
defaults: {{backends: [torch], timing: {TIMING}}}
models:
  - name: two_heads
    inputs: {{x: [6], y: [6]}}
    batch: 3
    layers:
      - {{name: a, op: linear, out_features: 6, inputs: [x], dtype: float16}}
      - {{name: head1, op: softmax}}
      - {{name: mix, op: t_add, inputs: [a, y]}}
      - {{name: head2, op: silu}}
"""
    suite = load_suite_text(text, "g.yaml")
    run = run_suite(suite, RunOptions())
    eager = run.end_to_end[0]
    assert eager.outputs == ("head1", "head2")
    assert eager.correct, eager.correctness
    assert eager.correctness.tolerance == 5e-3, "the loosest layer's (float16)"


def test_a_whole_graph_check_names_the_output_that_is_wrong() -> None:
    text = f"""\
name: g
defaults: {{backends: [torch], timing: {TIMING}}}
models:
  - name: two_heads
    input: [6]
    layers:
      - {{name: a, op: relu}}
      - {{name: head1, op: softmax}}
      - {{name: head2, op: silu, inputs: [a]}}
"""
    suite = load_suite_text(text, "g.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    built = torch_built(model, data)
    built[(2,)] = Built(fn=lambda x: x * 2)
    eager, _ = time_end_to_end(model, "torch", built, data, RunOptions())
    failures = eager.correctness.failures
    assert failures and all(f.startswith("output 'head2': ") for f in failures), failures


def test_the_compiled_whole_forward_returns_every_output_of_the_graph() -> None:
    suite = load_suite_text(RESIDUAL.replace("      - {name: out, op: relu}\n", ""), "g.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")

    class NoCompiler:
        def compile_model(self, forward, inputs):
            assert len(inputs) == 1, "one model input, read by conv1 and down"
            return forward

    forward = module_forward(model, data, "cpu", NoCompiler())
    (out,) = forward.call()
    refs, _ = data.model_reference()
    torch.testing.assert_close(out.double(), refs[4], rtol=1e-5, atol=1e-5)


FUSE = f"""\
name: g
defaults: {{backends: [torch, triton], timing: {TIMING}}}
models:
  - name: fused
    batch: 1
    input: [3, 5, 4]
    fuse: true
    layers:
      - {{name: conv, op: conv2d, out_channels: 4, kernel_size: 3, padding: 1}}
      - {{name: side, op: silu, inputs: [input]}}
      - {{name: bn, op: batchnorm2d, inputs: [conv]}}
      - {{name: relu, op: relu}}
      - {{name: conv2, op: conv2d, out_channels: 4, kernel_size: 1}}
      - {{name: bn2, op: batchnorm2d}}
      - {{name: tap, op: gelu, inputs: [conv2]}}
"""


def test_fusion_follows_the_graph_not_the_list() -> None:
    model = load_suite_text(FUSE, "g.yaml").models[0]
    # conv → bn → relu although `side` stands between; conv2's output is also read by `tap`,
    # so it must exist in memory: conv2 and bn2 stay apart.
    assert fusion_groups(model) == [(0, 2, 3), (1,), (4,), (5,), (6,)]


def test_a_fused_piece_of_the_graph_runs_and_the_whole_model_is_right() -> None:
    run = run_suite(load_suite_text(FUSE, "g.yaml"), RunOptions())
    fused = run.find("fused", "bn", "triton")
    assert fused.covers == ("conv", "bn", "relu") and fused.correct, fused.correctness
    rows = {(e.backend, e.mode): e for e in run.end_to_end}
    for backend in ("torch", "triton"):
        eager = rows[(backend, "eager")]
        assert eager.status == Status.OK and eager.correct, (backend, eager)
        assert eager.outputs == ("side", "bn2", "tap")
