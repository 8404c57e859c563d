"""The public API: importable without a GPU, torch or triton; its defaults; the Layer view."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from opbench import api
from opbench.plugins.adapters import PluginOp, layer_view
from opbench.spec.load import load_suite_text

REPO = Path(__file__).resolve().parents[2]

BLOCK_TORCH_AND_TRITON = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
import opbench.api as api
from opbench.api import Backend, Bound, Built, Layer, Op, Param, REQUIRED, ShapeError, Unsupported
print(sorted(api.__all__))
"""


def test_api_imports_without_torch_or_triton() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH_AND_TRITON],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert "'Backend'" in done.stdout and "'Op'" in done.stdout and "'Layer'" in done.stdout


def test_built_and_bound_are_the_pipelines_own() -> None:
    from opbench.backends import base

    assert api.Built is base.Built and api.Bound is base.Bound
    assert api.Unsupported is base.Unsupported


class Double(api.Op):
    name = "double"
    params = (api.Param("scale", "pos_float", 2.0),)

    def weight_shapes(self, input_shape, params):
        return {"bias": (input_shape[-1],)}

    def forward(self, x, weights, layer):
        return x * layer.params["scale"] + weights["bias"]


def test_op_defaults_reference_is_forward_and_bytes_count_weights() -> None:
    op = Double()
    assert op.output_shape((2, 3), {}) == (2, 3)
    assert op.flops((2, 3), (2, 3), {}) == 0
    # input 6 + output 6 + bias 3 elements, 2 bytes each in float16
    assert op.min_bytes((2, 3), (2, 3), {"scale": 2.0}, "float16") == 2 * 15
    layer = api.Layer("l", "double", "float32", {"scale": 3.0}, "none", (2, 3), (2, 3))
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    w = {"bias": torch.ones(3, dtype=torch.float64)}
    ref = op.reference(x, w, layer)
    assert ref.dtype == torch.float64 and torch.equal(ref, x * 3 + 1)
    weights = op.make_weights(layer, torch.Generator().manual_seed(0))
    assert weights["bias"].shape == (3,) and weights["bias"].dtype == torch.float32


def test_layer_is_a_read_only_view_of_the_resolved_layer() -> None:
    suite = load_suite_text(
        "name: s\nmodels:\n  - name: m\n    input: [4, 6]\n    dtype: float16\n"
        "    layers:\n      - {name: fc, op: linear, out_features: 8, quant: int8}\n"
    )
    spec = suite.models[0].layers[0]
    layer = layer_view(spec)
    assert (layer.name, layer.op, layer.dtype, layer.quant) == ("fc", "linear", "float16", "int8")
    assert layer.input_shape == (1, 4, 6) and layer.output_shape == (1, 4, 8)
    assert layer.params["out_features"] == 8 and layer.torch_dtype == torch.float16
    with pytest.raises(TypeError):
        layer.params["out_features"] = 9  # type: ignore[index]


class BadShape(api.Op):
    name = "badshape"

    def output_shape(self, input_shape, params):
        return [0, "x"]


class RaisingCost(api.Op):
    name = "raisingcost"

    def flops(self, input_shape, output_shape, params):
        raise ZeroDivisionError("division by zero")


def test_plugin_op_shape_and_cost_mistakes_are_shape_errors() -> None:
    from opbench.ops.base import ShapeError

    for op, text in (
        (BadShape(), "output_shape returned [0, 'x'], not a tuple of positive integers"),
        (RaisingCost(), "flops raised ZeroDivisionError: division by zero"),
    ):
        with pytest.raises(ShapeError, match=re.escape(text)):
            PluginOp(op).infer_shape((2, 3), {})


class Hypot(api.Op):
    """A join a user writes: two inputs of one shape, sqrt(a² + b²)."""

    name = "hypot"
    arity = 2

    def output_shape(self, input_shape, params):
        a, b = input_shape
        if a != b:
            raise api.ShapeError(f"inputs {list(a)} and {list(b)} differ")
        return a

    def forward(self, x, weights, layer):
        a, b = x
        return torch.hypot(a, b)


def test_a_plugin_join_gets_one_shape_and_one_tensor_per_input() -> None:
    op = PluginOp(Hypot())
    assert op.arity == 2 and op.takes(2) and not op.takes(1)
    assert op.infer_shape([[2, 3], [2, 3]], {}) == (2, 3)
    with pytest.raises(api.ShapeError, match=r"inputs \[2, 3\] and \[2, 4\] differ"):
        op.infer_shape(((2, 3), (2, 4)), {})
    # every input read once, the output written once: 3 tensors of 6 float32
    assert op.min_bytes(((2, 3), (2, 3)), (2, 3), {}, "float32") == 3 * 6 * 4
    layer = api.Layer("h", "hypot", "float32", {}, "none", (2, 3), (2, 3), ("a", "b"),
                      ((2, 3), (2, 3)))  # fmt: skip
    a, b = torch.full((2, 3), 3.0), torch.full((2, 3), 4.0)
    assert torch.equal(op.plugin.forward((a, b), {}, layer), torch.full((2, 3), 5.0))


@pytest.mark.parametrize("arity", [0, -2, 1.5, True])
def test_a_plugin_op_with_an_impossible_arity_is_refused(arity) -> None:
    class Bad(Hypot):
        pass

    Bad.arity = arity
    with pytest.raises(ValueError, match="arity must be a positive integer"):
        PluginOp(Bad())
