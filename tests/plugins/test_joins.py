"""A plugin join: a user's op of two inputs (`arity = 2`) and a user's backend for it, run from
a suite that wires named model inputs into it; both layers and the whole model checked."""

from __future__ import annotations

from pathlib import Path

from plugin_helpers import invoke, write

from opbench.results.io import read_run
from opbench.results.model import Status

HYPOT_PLUGIN = """
    from opbench.api import Backend, Op, ShapeError


    class Hypot(Op):
        name = "hypot"
        summary = "sqrt(a² + b²) of two inputs of one shape"
        arity = 2

        def output_shape(self, input_shape, params):
            a, b = input_shape
            if a != b:
                raise ShapeError(f"inputs {list(a)} and {list(b)} differ")
            return a

        def forward(self, x, weights, layer):
            import torch

            a, b = x
            return torch.hypot(a, b)

        def reference(self, x, weights, layer):
            a, b = x
            return (a * a + b * b).sqrt()


    class HypotKernels(Backend):
        name = "hypot-kernels"

        def supports(self, layer):
            return None if layer.op == "hypot" else "hypot only"

        def build(self, layer, weights, device):
            # what the layer reads, by name and shape, as the suite wires it
            assert layer.inputs in (("x", "y"), ("h", "x")), layer.inputs
            assert layer.input_shapes == (layer.input_shape, layer.output_shape)

            def run(a, b):
                return (a.square() + b.square()).sqrt()

            return run
"""

SUITE = """
    name: joins
    models:
      - name: m
        batch: 3
        inputs: {x: [4, 7], y: [4, 7]}
        backends: [torch, hypot-kernels]
        layers:
          - {name: h, op: hypot, inputs: [x, y]}
          - {name: wide, op: hypot, inputs: [h, x]}
"""


def test_a_plugin_join_runs_and_the_whole_model_is_checked(tmp_path: Path) -> None:
    plugin = write(tmp_path / "hypot.py", HYPOT_PLUGIN)
    suite = write(tmp_path / "s.yaml", SUITE)
    done = invoke("run", suite, "--plugin", plugin, "--device", "cpu", "--quick", "--out", tmp_path)
    assert done.exit_code == 0, done.output
    run = read_run(tmp_path / "joins" / "latest" / "run.json")
    assert len(run.layers) == 4 and all(r.correct for r in run.layers)
    rows = {(e.backend, e.mode): e for e in run.end_to_end}
    for backend in ("torch", "hypot-kernels"):
        eager = rows[(backend, "eager")]
        assert eager.status == Status.OK and eager.correct, eager
        assert eager.outputs == ("wide",)


def test_a_join_given_one_input_is_refused_with_its_place(tmp_path: Path) -> None:
    plugin = write(tmp_path / "hypot.py", HYPOT_PLUGIN)
    suite = write(
        tmp_path / "s.yaml",
        SUITE.replace("inputs: [h, x]", "inputs: [h]"),
    )
    done = invoke("validate", suite, "--plugin", plugin)
    assert done.exit_code == 2
    assert f"{suite}:10:33, model 'm', layer 'wide', field 'inputs'" in done.output
    assert "op 'hypot' takes 2 inputs, this layer reads 1" in done.output
