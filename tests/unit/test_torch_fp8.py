"""The torch-fp8 backend (torch._scaled_mm with row-wise e4m3 scales) on the CPU, where torch
runs _scaled_mm with its reference kernel: against the float64 reference on odd shapes, the
output is the row-wise formula on the codes kernels/quant.py makes (the Triton kernel's codes),
and what it refuses and why."""

from __future__ import annotations

import pytest
import torch

from opbench.backends.registry import get_backend
from opbench.kernels.quant import dequantize_rows, fp8_rows
from opbench.pipeline import ModelData, RunOptions, WorkItem, measure_item
from opbench.results.model import Status
from opbench.spec.load import load_suite_text
from opbench.spec.model import QUANT_TOLERANCE

TIMING = "{warmup_ms: 0, rep_ms: 1, rounds: 2}"


def suite_of(shape: str, params: str, dtype: str):
    text = (
        f"name: t\ndefaults: {{dtype: {dtype}, backends: [torch-fp8], timing: {TIMING}}}\n"
        f"models:\n  - name: m\n    batch: 2\n    input: {shape}\n"
        f"    layers:\n      - {{name: layer, op: linear, {params}}}\n"
    )
    return load_suite_text(text, "test.yaml")


def run_fp8(suite):
    model = suite.models[0]
    return measure_item(
        WorkItem(model, (0,), "torch-fp8"),
        ModelData(suite, model, "cpu"),
        get_backend("torch-fp8"),
        RunOptions(),
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("shape", "params"),
    [
        ("[5, 7]", "out_features: 9, activation: gelu"),
        ("[3]", "out_features: 5, bias: false"),
        ("[1, 37]", "out_features: 23, activation: silu"),
    ],  # fmt: skip
)
def test_matches_the_float64_reference(shape: str, params: str, dtype: str) -> None:
    result = run_fp8(suite_of(shape, f"{params}, quant: fp8", dtype))
    assert result.status == Status.OK, result.message
    corr = result.correctness
    assert corr.reference == "float64-cpu" and corr.tolerance == QUANT_TOLERANCE["fp8"]
    assert corr.passed and 1e-3 < corr.rel_l2 < QUANT_TOLERANCE["fp8"], corr
    assert "torch._scaled_mm fp8 row-wise" in result.note
    assert result.quant == "fp8"


def test_output_is_the_row_wise_formula(monkeypatch) -> None:
    """y = act(sx·sw·(xq @ Wqᵀ) + b) from the e4m3 codes, with one _scaled_mm per call that
    gets the row-wise scales and fast accumulation."""
    suite = suite_of("[4, 32]", "out_features: 16, quant: fp8, activation: gelu", "bfloat16")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    calls = []
    real = torch._scaled_mm

    def spy(a, b, **kwargs):
        calls.append((a.dtype, tuple(kwargs["scale_a"].shape), tuple(kwargs["scale_b"].shape),
                      kwargs["use_fast_accum"]))  # fmt: skip
        return real(a, b, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    built = get_backend("torch-fp8").build([model.layers[0]], [data.weights(0)], "cpu")
    calls.clear()
    x = data.input(0)
    y = built.fn(x)
    assert calls == [(torch.float8_e4m3fn, (8, 1), (1, 16), True)]
    w = data.weights(0)
    wq = dequantize_rows(*fp8_rows(w["weight"].bfloat16()))
    xq = dequantize_rows(*fp8_rows(x.reshape(-1, 32)))
    exact = torch.nn.functional.gelu(xq @ wq.T + w["bias"].bfloat16().double())
    torch.testing.assert_close(y.reshape(-1, 16).double(), exact, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    ("params", "dtype", "reason"),
    [
        ("out_features: 5", "float16", "an unquantized linear"),
        ("out_features: 5, quant: int8", "float16", "a quant=int8 linear"),
        ("out_features: 5, quant: fp8", "float32", "float32 layer"),
    ],  # fmt: skip
)
def test_other_layers_are_unsupported_with_a_reason(params, dtype, reason) -> None:
    result = run_fp8(suite_of("[7]", params, dtype))
    assert result.status == Status.UNSUPPORTED
    assert result.message and reason in result.message
