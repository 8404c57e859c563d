"""Bencher Metric Format: shape, units, what is left out."""

from __future__ import annotations

import json

import pytest

from opbench.report.bmf import MEASURE_MS, MEASURE_NS, bmf_from_run, write_bmf
from opbench.results.model import Correctness, EndToEnd, LayerResult, RunResult, Status

SAMPLES = tuple(tuple(0.5 + 0.001 * (i + 7 * r) for i in range(7)) for r in range(3))


def layer(name, **kw) -> LayerResult:
    values = dict(
        model="mlp",
        layer=name,
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(1,),
        output_shape=(1,),
        samples_ms=SAMPLES,
        correctness=Correctness(rel_l2=0.0, max_abs=0.0, nonfinite=0, tolerance=1e-3),
    )
    values.update(kw)
    return LayerResult(**values)


def make_run():
    bad = Correctness(rel_l2=1.0, max_abs=1.0, nonfinite=0, tolerance=1e-3)
    return RunResult(
        suite="enc",
        started_at="t",
        device="cuda",
        layers=(
            layer("fc1"),
            layer("fc2", status=Status.ERROR, samples_ms=()),
            layer("fc3", correctness=bad),
        ),
        end_to_end=(
            EndToEnd("mlp", "triton", "ok", samples_ms=SAMPLES),
            EndToEnd("mlp", "torch", "unsupported"),
        ),
    )


def test_shape_and_values_in_ms():
    data = bmf_from_run(make_run())
    assert set(data) == {"enc/mlp/fc1/triton", "enc/mlp/end-to-end/triton"}
    metric = data["enc/mlp/fc1/triton"][MEASURE_MS]
    stats = layer("x").stats
    assert metric["value"] == pytest.approx(stats.median)
    assert metric["lower_value"] == pytest.approx(stats.ci95[0]) and metric[
        "upper_value"
    ] == pytest.approx(stats.ci95[1])
    assert metric["lower_value"] <= metric["value"] <= metric["upper_value"]
    for measures in data.values():  # BMF: benchmark -> measure -> {value, lower_value, upper_value}
        for values in measures.values():
            assert set(values) == {"value", "lower_value", "upper_value"}
            assert all(isinstance(v, float) for v in values.values())


def test_nanoseconds_use_bencher_builtin_latency():
    data = bmf_from_run(make_run(), unit="ns")
    metric = data["enc/mlp/fc1/triton"][MEASURE_NS]
    assert MEASURE_NS == "latency" and metric["value"] == pytest.approx(
        layer("x").stats.median * 1e6
    )
    with pytest.raises(ValueError):
        bmf_from_run(make_run(), unit="s")


def test_write_bmf_is_plain_json(tmp_path):
    path = tmp_path / "bmf.json"
    written = write_bmf(path, make_run())
    assert json.loads(path.read_text()) == written


def test_both_end_to_end_modes_are_kept_and_interpreter_times_left_out():
    run = RunResult(
        suite="s",
        started_at="t",
        device="cuda",
        layers=(layer("fc1"), layer("fc2", interpreted=True)),
        end_to_end=(
            EndToEnd("mlp", "triton", "ok", samples_ms=SAMPLES, mode="eager"),
            EndToEnd("mlp", "triton", "ok", samples_ms=SAMPLES, mode="cuda_graph"),
            EndToEnd("mlp", "torch", "ok", samples_ms=SAMPLES, interpreted=True),
        ),
    )
    assert sorted(bmf_from_run(run)) == [
        "s/mlp/end-to-end-cuda_graph/triton",
        "s/mlp/end-to-end/triton",
        "s/mlp/fc1/triton",
    ]
