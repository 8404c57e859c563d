"""The torch eager backend against the float64 reference, for every op and dtype (CPU torch);
the int8 note; channels_last; torch-compile availability."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from opbench.backends.base import torch_dtype
from opbench.backends.registry import BACKEND_NAMES, get_backend
from opbench.measure.check import compare_outputs
from opbench.ops.registry import OPS
from opbench.pipeline import ModelData, RunOptions, WorkItem, measure_item
from opbench.results.model import Status
from opbench.spec.load import load_suite_text
from opbench.spec.model import DEFAULT_TOLERANCE, SuiteSpec
from opbench.vocabulary import BUILTIN, op_origin

TIMING = "{warmup_ms: 0, rep_ms: 1, rounds: 2}"


def example_case(op_name: str) -> tuple[str, str]:
    """The op's own `example` (ops/<op>.py) as a suite writes it: input shape and parameters.
    For an op of several inputs the shape is the model's `inputs:` mapping ({x0: [..], ..})."""
    example = OPS[op_name].example
    assert example is not None, f"op {op_name!r} has no example"
    params = ", ".join(f"{key}: {json.dumps(value)}" for key, value in example.params.items())
    shapes = example.inputs
    if len(shapes) == 1 and not example.integer:
        return json.dumps(list(shapes[0])), params
    return example.declared([f"x{i}" for i in range(len(shapes))]), params


# One layer per built-in op (its example: odd, small shapes), whatever ops there are.
# Ops that compute (a `placeholder` stands for an ONNX node and runs nowhere: test_placeholder).
BUILTIN_OPS = [name for name in OPS if op_origin(name) == BUILTIN and OPS[name].runs]
CASES = {name: example_case(name) for name in BUILTIN_OPS}
EXTRA_CASES = {
    "linear-no-bias-relu": ("linear", "[1, 7]", "out_features: 3, bias: false, activation: relu"),
    "linear-silu": ("linear", "[7]", "out_features: 5, activation: silu"),
    "conv2d-groups-gelu": (
        "conv2d",
        "[4, 5, 5]",
        "out_channels: 6, kernel_size: 3, groups: 2, padding: 1, activation: gelu",
    ),
    "conv2d-depthwise-no-bias": (
        "conv2d",
        "[3, 5, 5]",
        "out_channels: 3, kernel_size: 3, groups: 3, bias: false",
    ),
    "attention-packed": ("attention", "[5, 18]", "heads: 3, packed_qkv: true"),
    "attention-one-token": ("attention", "[1, 4]", "heads: 1, causal: true"),
    "attention-packed-gqa": ("attention", "[5, 24]", "heads: 4, kv_heads: 1, packed_qkv: true"),
    "attention-decode": ("attention", "[3, 16]", "heads: 4, kv_heads: 2, kv_len: 9, causal: true"),
    "attention-qkv": (
        "attention",
        "{q: [3, 16], k: [9, 8], v: [9, 8]}",
        "heads: 4, kv_heads: 2, causal: true, separate_qkv: true",
    ),
    "softmax-batch-dim": ("softmax", "[3]", "dim: 0"),
    "gelu-erf": ("gelu", "[5, 7]", "approximate: none"),
    "add-per-channel": ("add", "{x0: [4, 3, 5], x1: [4, 1, 1]}", ""),
    "mul-per-row": ("mul", "{x0: [5, 9], x1: [5, 1]}", ""),
    "matmul-broadcast-batch": ("matmul", "{x0: [1, 5, 7], x1: [3, 7, 4]}", ""),
    "concat-last-axis": ("concat", "{x0: [5, 2], x1: [5, 7]}", "axis: -1"),
    "split-first-piece": ("split", "[6, 4]", "axis: 1, sizes: [2, 4], index: 0"),
}


def one_layer_suite(
    op: str, input_shape: str, params: str, dtype: str, backend: str = "torch"
) -> SuiteSpec:
    extra = f", {params}" if params else ""
    declared = "input"
    if input_shape.startswith("{"):  # several named inputs (example_case), read in order
        declared = "inputs"
        names = list(yaml.safe_load(input_shape))
        extra += f", inputs: [{', '.join(names)}]"
    text = (
        f"name: t\ndefaults: {{dtype: {dtype}, backends: [{backend}], timing: {TIMING}}}\n"
        f"models:\n  - name: m\n    batch: 2\n    {declared}: {input_shape}\n"
        f"    layers:\n      - {{name: layer, op: {op}{extra}}}\n"
    )
    return load_suite_text(text, "test.yaml")


def run_one(suite: SuiteSpec, backend: str = "torch"):
    model = suite.models[0]
    return measure_item(
        WorkItem(model, (0,), backend),
        ModelData(suite, model, "cpu"),
        get_backend(backend),
        RunOptions(),
    )


def test_every_builtin_op_has_an_example() -> None:
    assert BUILTIN_OPS and all(OPS[name].example is not None for name in BUILTIN_OPS)


DTYPE_LIMIT = {
    "float32": 1e-5,
    "float16": DEFAULT_TOLERANCE["float16"],
    "bfloat16": DEFAULT_TOLERANCE["bfloat16"],
}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", list(CASES) + list(EXTRA_CASES))
def test_torch_matches_float64_reference(op: str, dtype: str) -> None:
    op_name, shape, params = (op, *CASES[op]) if op in CASES else EXTRA_CASES[op]
    suite = one_layer_suite(op_name, shape, params, dtype)
    layer = suite.models[0].layers[0]
    result = run_one(suite)
    assert result.status == Status.OK, result.message
    corr = result.correctness
    assert corr is not None and corr.reference == "float64-cpu"
    assert corr.nonfinite == 0
    assert corr.tolerance == DEFAULT_TOLERANCE[dtype]
    assert corr.rel_l2 <= DTYPE_LIMIT[dtype], corr
    assert corr.passed and result.correct
    # Samples are kept, grouped by the 2 rounds asked for.
    assert len(result.samples_ms) == 2 and all(len(r) >= 1 for r in result.samples_ms)
    assert all(t > 0 for r in result.samples_ms for t in r)
    assert result.timer == "perf_counter" and not result.interpreted
    assert (result.input_shape, result.output_shape) == (layer.input_shape, layer.output_shape)
    assert result.flops == OPS[op_name].layer_flops(layer)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_built_layer_returns_the_layer_dtype_and_shape(dtype: str) -> None:
    for op, (shape, params) in CASES.items():
        suite = one_layer_suite(op, shape, params, dtype)
        model = suite.models[0]
        layer = model.layers[0]
        data = ModelData(suite, model, "cpu")
        built = get_backend("torch").build([layer], [data.weights(0)], "cpu")
        xs = data.inputs(0)
        ints = OPS[op].integer_inputs(layer.params)
        floats = [x for i, x in enumerate(xs) if i not in ints]
        assert all(x.dtype == torch_dtype(dtype) and x.abs().sum() > 0 for x in floats), (
            "inputs are random normal, never zeros"
        )
        assert all(xs[i].dtype == torch.int64 and xs[i].unique().numel() > 1 for i in ints)
        out = built.fn(*xs)
        assert out.dtype == torch_dtype(dtype), op
        assert tuple(out.shape) == layer.output_shape, op
        ref, kind = data.reference((0,))
        assert ref.dtype == torch.float64 and kind == "float64-cpu"
        assert compare_outputs(out, ref, layer.effective_tolerance, kind).passed, op


def test_reference_uses_the_rounded_inputs_and_weights() -> None:
    suite = one_layer_suite("linear", "[7]", "out_features: 5", "float16")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    w = data.weights(0)
    assert w["weight"].dtype == torch.float32  # weights are drawn in float32 ...
    x16 = data.input(0)
    expected = torch.nn.functional.linear(
        x16.double(), w["weight"].half().double(), w["bias"].half().double()
    )  # ... and rounded to the layer dtype before the float64 reference
    ref, _ = data.reference((0,))
    assert torch.equal(ref, expected)


def test_data_is_seeded_and_reproducible() -> None:
    suite = one_layer_suite("linear", "[7]", "out_features: 5", "float32")
    model = suite.models[0]
    a, b = ModelData(suite, model, "cpu"), ModelData(suite, model, "cpu")
    assert torch.equal(a.input(0), b.input(0))
    assert torch.equal(a.weights(0)["weight"], b.weights(0)["weight"])
    # Linear weights are scaled by 1/sqrt(K): outputs stay O(1).
    assert 0.1 < a.weights(0)["weight"].std().item() * 7**0.5 < 3


def test_int8_layer_runs_unquantized_on_torch_and_says_so() -> None:
    suite = one_layer_suite("linear", "[5, 7]", "out_features: 9, quant: int8", "float16")
    result = run_one(suite)
    assert result.status == Status.OK and result.quant == "int8"
    assert result.note is not None and "unquantized" in result.note and "float16" in result.note
    # Unquantized fp16 is far more accurate than int8 would be.
    assert result.correctness.rel_l2 < DEFAULT_TOLERANCE["float16"]
    assert result.correctness.tolerance == suite.models[0].layers[0].effective_tolerance


def test_channels_last_conv_converts_its_input_before_timing() -> None:
    suite = one_layer_suite(
        "conv2d", "[3, 7, 6]", "out_channels: 5, kernel_size: 3, channels_last: true", "float32"
    )
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    built = get_backend("torch").build([model.layers[0]], [data.weights(0)], "cpu")
    assert built.prepare_input is not None and "channels_last" in built.note
    x = built.prepare_input(data.input(0))
    assert x.is_contiguous(memory_format=torch.channels_last)
    result = run_one(suite)
    assert result.status == Status.OK and result.correct


def test_torch_compile_builds_checks_and_times_a_layer() -> None:
    """torch is a dependency and Inductor needs a C compiler on the CPU: the test environment
    has both, so a build failure here is a failure, never a skip."""
    backend = get_backend("torch-compile")
    assert backend.unavailable_reason("cpu") is None
    # One tiny layer; the first compile on a cold cache can take ~30 s on a 2-core machine.
    result = run_one(
        one_layer_suite("relu", "[3]", "", "float32", backend="torch-compile"), "torch-compile"
    )
    assert result.status == Status.OK, result.message
    assert result.correct
    assert result.tuning_s is not None and result.tuning_s > 0, "compile time is reported as tuning"
    assert len(result.samples_ms) == 2


def test_registry_names_every_backend() -> None:
    assert BACKEND_NAMES == (
        "torch",
        "torch-compile",
        "torch-compile-max-autotune",
        "torch-int8",
        "torch-fp8",
        "triton",
    )
    for name in BACKEND_NAMES:
        assert get_backend(name).name == name


def test_torch_compile_compiles_every_layer_of_a_long_suite_once(monkeypatch) -> None:
    """Dynamo's cache and its budget of 8 recompilations are per code object: with one code
    shared by every layer, the ninth layer of a suite ran eager. 12 layers, called with grad
    mode on and off, must give 12 compilations, and each the eager layer's numbers."""
    from opbench.backends.torch_compile import TorchCompile

    compiled: list[int] = []

    def counting_backend(graph_module, example_inputs):
        compiled.append(len(example_inputs))
        return graph_module.forward

    monkeypatch.setattr(TorchCompile, "compiler", staticmethod(counting_backend))
    ops = ["relu", "gelu", "silu", "softmax", "layernorm", "rmsnorm"]
    layers = "\n".join(
        f"      - {{name: l{i}, op: {ops[i % len(ops)]}, input: [5, {7 + i}]}}" for i in range(12)
    )
    suite = load_suite_text(
        f"name: t\ndefaults: {{dtype: float32, backends: [torch-compile], timing: {TIMING}}}\n"
        f"models:\n  - name: m\n    batch: 2\n    input: [5, 7]\n    layers:\n{layers}\n",
        "test.yaml",
    )
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    backend, eager = get_backend("torch-compile"), get_backend("torch")
    for index in range(12):
        built = backend.build([model.layers[index]], [data.weights(index)], "cpu")
        reference = eager.build([model.layers[index]], [data.weights(index)], "cpu").fn
        x = data.input(index)
        for grad in (True, False):
            with torch.set_grad_enabled(grad):
                torch.testing.assert_close(built.fn(x), reference(x))
    assert len(compiled) == 12


def test_max_autotune_backend_asks_inductor_for_max_autotune(monkeypatch) -> None:
    """The max-autotune peer must really pass mode="max-autotune" to torch.compile."""
    import opbench.backends.torch_compile as tc

    seen: dict = {}
    real_compile = torch.compile

    def spy(fn, **kwargs):
        seen.update(kwargs)
        return real_compile(fn, **{**kwargs, "mode": None, "backend": "eager"})

    monkeypatch.setattr(torch, "compile", spy)
    suite = one_layer_suite("relu", "[3]", "", "float32", backend="torch-compile-max-autotune")
    result = run_one(suite, "torch-compile-max-autotune")
    assert result.status == Status.OK, result.message
    assert seen["mode"] == "max-autotune" and seen["dynamic"] is False
    assert tc.TorchCompileMaxAutotune.name == "torch-compile-max-autotune"
