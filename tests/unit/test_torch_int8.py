"""The torch-int8 backend (torch._int_mm W8A8) on the CPU: against the float64 reference on odd
shapes, the Triton quantizer's exact rounding, what it refuses and why, and its build-time
choice between eager and torch.compile."""

from __future__ import annotations

import time

import pytest
import torch

from opbench.backends.base import Unsupported
from opbench.backends.registry import get_backend
from opbench.backends.torch_int8 import TorchInt8, choose_faster, int_mm_refusal, quantize_per_row
from opbench.pipeline import ModelData, RunOptions, WorkItem, measure_item
from opbench.results.model import Status
from opbench.spec.load import load_suite_text
from opbench.spec.model import INT8_TOLERANCE

TIMING = "{warmup_ms: 0, rep_ms: 1, rounds: 2}"


def suite_of(op: str, shape: str, params: str, dtype: str):
    text = (
        f"name: t\ndefaults: {{dtype: {dtype}, backends: [torch-int8], timing: {TIMING}}}\n"
        f"models:\n  - name: m\n    batch: 2\n    input: {shape}\n"
        f"    layers:\n      - {{name: layer, op: {op}, {params}}}\n"
    )
    return load_suite_text(text, "test.yaml")


def run_int8(suite):
    model = suite.models[0]
    return measure_item(
        WorkItem(model, (0,), "torch-int8"),
        ModelData(suite, model, "cpu"),
        get_backend("torch-int8"),
        RunOptions(),
    )


ODD_SHAPES = {
    "gelu-bias": ("[5, 7]", "out_features: 9, activation: gelu"),
    "k3-no-bias": ("[3]", "out_features: 5, bias: false"),
    "3d-silu": ("[3, 13]", "out_features: 11, activation: silu"),
    "relu-wide": ("[1, 37]", "out_features: 23, activation: relu"),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(ODD_SHAPES))
def test_matches_the_float64_reference_on_odd_shapes(case: str, dtype: str) -> None:
    shape, params = ODD_SHAPES[case]
    suite = suite_of("linear", shape, f"{params}, quant: int8", dtype)
    result = run_int8(suite)
    assert result.status == Status.OK, result.message
    corr = result.correctness
    assert corr.reference == "float64-cpu" and corr.nonfinite == 0
    assert corr.tolerance == INT8_TOLERANCE and corr.passed, corr
    # Quantized: measurably off the exact result, yet well inside the int8 limit.
    assert 0 < corr.rel_l2 < INT8_TOLERANCE / 2, corr
    assert result.output_shape == suite.models[0].layers[0].output_shape
    assert "torch._int_mm" in result.note and "eager" in result.note
    assert result.plan == {"variant": "eager"}


def test_output_is_the_w8a8_formula(monkeypatch) -> None:
    """y = act(sx·sw·(xq @ Wqᵀ) + b), computed here from the quantized integers in float64."""
    suite = suite_of(
        "linear", "[4, 19]", "out_features: 13, quant: int8, activation: gelu", "float16"
    )
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    calls = []
    real = torch._int_mm

    def spy(a, b):
        calls.append((a.dtype, b.dtype, tuple(a.shape), tuple(b.shape)))
        return real(a, b)

    monkeypatch.setattr(torch, "_int_mm", spy)
    built = get_backend("torch-int8").build([model.layers[0]], [data.weights(0)], "cpu")
    calls.clear()
    x = data.input(0)
    y = built.fn(x)
    assert calls == [(torch.int8, torch.int8, (8, 19), (19, 13))], "one _int_mm per call"
    w = data.weights(0)
    wq, sw = quantize_per_row(w["weight"].half())
    xq, sx = quantize_per_row(x.reshape(-1, 19))
    exact = (xq.double() @ wq.double().T) * sx.double() * sw.double().T
    exact = torch.nn.functional.gelu(exact + w["bias"].half().double())
    torch.testing.assert_close(y.reshape(-1, 13).double(), exact, rtol=2e-3, atol=2e-3)


def test_quantization_rounds_exactly_as_the_triton_kernels() -> None:
    from opbench.kernels.memory.quantize import quantize_per_row as quantize_weights
    from opbench.kernels.memory.quantize import quantize_rows

    ties = torch.tensor(
        [[127.0, 0.5, -0.5, 1.5, -2.5, 63.5, -126.5, 0.0], [0.0] * 8], dtype=torch.float32
    )
    q, s = quantize_per_row(ties)
    # Half away from zero (torch.round would give 0, -0, 2, -2, 64, -126).
    assert q[0].tolist() == [127, 1, -1, 2, -3, 64, -127, 0]
    assert q[1].tolist() == [0] * 8 and s[1].item() == 0.0, "a zero row: scale 0, codes 0"
    gen = torch.Generator().manual_seed(3)
    rows = torch.cat([ties, torch.randn(6, 8, generator=gen) * 3]).half()
    q, s = quantize_per_row(rows)
    q_weight, s_weight = quantize_weights(rows)  # the Triton backend's build-time rule
    assert torch.equal(q, q_weight) and torch.equal(s.reshape(-1), s_weight)
    q_act, s_act = quantize_rows(rows)  # the Triton kernel, in the interpreter
    assert torch.equal(q, q_act) and torch.equal(s.reshape(-1), s_act)


@pytest.mark.parametrize(
    ("op", "shape", "params", "dtype", "reason"),
    [
        ("linear", "[7]", "out_features: 5", "float16", "an unquantized linear"),
        (
            "conv2d",
            "[3, 5, 5]",
            "out_channels: 4, kernel_size: 3, quant: int8",
            "float16",
            "conv2d",
        ),
        ("relu", "[7]", "tolerance: null", "float16", "a relu layer"),
        ("linear", "[7]", "out_features: 5, quant: int8", "float32", "float32 layer"),
    ],
)
def test_other_layers_are_unsupported_with_a_reason(op, shape, params, dtype, reason) -> None:
    result = run_int8(suite_of(op, shape, params, dtype))
    assert result.status == Status.UNSUPPORTED
    assert result.message and reason in result.message


def test_cuda_shape_rules_of_int_mm() -> None:
    assert "more than 16" in int_mm_refusal(16, 4096, 4096, "cuda")
    assert "M = 1" in int_mm_refusal(1, 4096, 4096, "cuda:0")
    assert int_mm_refusal(17, 4096, 4096, "cuda") is None
    assert "K (in_features)" in int_mm_refusal(32, 4100, 4096, "cuda")
    assert "N (out_features)" in int_mm_refusal(32, 4096, 4100, "cuda")
    assert int_mm_refusal(1, 7, 9, "cpu") is None, "the CPU kernel takes any shape"


def test_a_refused_shape_is_unsupported_before_anything_runs() -> None:
    """A decode-sized layer on a GPU: refused at build, with torch's rule as the reason."""
    suite = suite_of("linear", "[4096]", "out_features: 4096, quant: int8", "float16")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    with pytest.raises(Unsupported, match="more than 16 rows"):
        get_backend("torch-int8").build([model.layers[0]], [data.weights(0)], "cuda")


def test_compiled_variant_is_compiled_and_gives_the_eager_numbers(monkeypatch) -> None:
    graphs = []

    def counting_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    suite = suite_of("linear", "[5, 24]", "out_features: 16, quant: int8", "bfloat16")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    eager = get_backend("torch-int8").build([model.layers[0]], [data.weights(0)], "cpu")
    monkeypatch.setattr(TorchInt8, "variant", "compile")
    monkeypatch.setattr(TorchInt8, "compiler", staticmethod(counting_backend))
    compiled = get_backend("torch-int8").build([model.layers[0]], [data.weights(0)], "cpu")
    assert len(graphs) == 1 and "torch.compile" in compiled.note
    assert compiled.plan == {"variant": "compile"}
    x = data.input(0)
    assert torch.equal(compiled.fn(x), eager.fn(x))


def test_the_faster_variant_is_kept_and_both_times_are_noted() -> None:
    def slow(x):
        time.sleep(0.002)
        return x

    def fast(x):
        return x

    x = torch.zeros(3)
    fn, note = choose_faster(slow, fast, x, "cpu")
    assert fn is fast and "torch.compile" in note and "eager" in note
    fn, note = choose_faster(fast, slow, x, "cpu")
    assert fn is fast and "eager, the faster" in note
