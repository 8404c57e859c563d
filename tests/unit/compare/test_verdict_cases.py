"""The verdicts a reviewer signs, on real and fixture reference files (tests/data/reference):
fused rows grouped, never picked; a profile of another model is bad input; interpreter
times are NOT-MEASURED; prefix differences inside their noise are UNCERTAIN.

Each case checks the exact grouping and verdict, and the exit code `opbench compare` gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from verdict_helpers import CNN, DATA, cli_compare, compare_file, rows_of, run_of

from opbench.compare.model import Verdict
from opbench.errors import ExitCode, InputError
from opbench.reference.interface import ReaderOptions
from opbench.reference.registry import read_reference

# ---- 1. a fused row is compared with every layer it covers -----------------------------------


@pytest.mark.parametrize("fixture", ["sas_fused_conv_relu.csv", "sas_prefix_fused_conv_relu.csv"])
def test_sas_fused_conv_relu_row_covers_the_conv_and_the_relu(fixture: str, tmp_path: Path):
    c = compare_file(run_of(CNN), fixture)
    rows = rows_of(c)
    fused = rows[("Conv2d_1", "relu_a")]
    assert fused.reference_names == ("conv2d_1",)
    assert set(fused.sources) == {"name", "reference_name"}
    # 0.310 ms against conv 0.100 + relu 0.035 = 0.135 ms: 2.30x, not the ReLU alone
    assert fused.primary.time.value == pytest.approx(0.135)
    assert fused.primary.speedup.value == pytest.approx(0.310 / 0.135)
    assert f"{fused.primary.speedup.value:.2f}" == "2.30"
    assert fused.primary.verdict == Verdict.PASS
    assert ("relu_a",) not in rows and ("Conv2d_1",) not in rows
    # the layer that moves no data is exempt; relu_b has no row: MISSING
    assert [(u.name, u.detail) for u in c.unmatched if u.side == "suite"] == [
        ("flat", "moves no data: exempt")
    ]
    assert rows[("relu_b",)].primary.verdict == Verdict.MISSING
    model = c.models[0]
    assert model.missing == ("relu_b",) and model.verdict != Verdict.PASS
    allowed = compare_file(run_of(CNN), fixture, allow_missing=True).models[0]
    assert allowed.verdict == Verdict.PASS and allowed.basis == "sum of layers"
    done = cli_compare(tmp_path, run_of(CNN), fixture)
    assert done.exit_code == ExitCode.OK, done.output
    data = json.loads((tmp_path / "out" / "comparison.json").read_text())
    verdicts = {"+".join(r["layers"]): r["timings"][0]["verdict"] for r in data["rows"]}
    assert verdicts == {
        "Conv2d_1+relu_a": "PASS",
        "pool1": "PASS",
        "fc1": "PASS",
        "relu_b": "MISSING",
    }


def test_tensorrt_fused_row_covers_the_conv_and_the_relu():
    # the real TensorRT profile (ResNet on an A100): its first row is "Conv_0 + Relu_1"
    layers = (
        ("Conv_0", "conv2d", (1, 64, 112, 112), None, 0.20),
        ("relu1", "relu", (1, 64, 112, 112), "Conv_0 + Relu_1", 0.05),
        ("MaxPool_2", "maxpool2d", (1, 64, 56, 56), None, 0.05),
    )
    # three layers of the profiled ResNet: --partial (else most rows match nothing: exit 2)
    c = compare_file(
        run_of(layers, model="resnet"), "trt_resnet_a100_fp32.profile.json", partial=True
    )
    assert c.reference.format == "tensorrt" and c.reference.device == "gpu"
    rows = rows_of(c)
    fused = rows[("Conv_0", "relu1")]
    assert fused.reference_names == ("Conv_0 + Relu_1",)
    assert fused.primary.speedup.value == pytest.approx(0.52224 / 0.25)
    assert fused.primary.verdict == Verdict.PASS
    assert rows[("MaxPool_2",)].reference_names == ("MaxPool_2",)


def test_an_ambiguous_cover_is_uncertain_never_pass(tmp_path: Path):
    # conv -> batchnorm -> relu under one Conv+Relu row: one layer or three
    layers = (
        ("conv2d_1", "conv2d", (1, 8, 32, 32), None, 0.05),
        ("bn", "batchnorm2d", (1, 8, 32, 32), None, 0.01),
        ("act", "relu", (1, 8, 32, 32), None, 0.01),
    )
    c = compare_file(run_of(layers), "sas_fused_conv_relu.csv", allow_missing=True, partial=True)
    row = rows_of(c)[("conv2d_1", "bn", "act")]
    assert row.primary.speedup.lo >= 1.5  # fast enough either way, and still not PASS
    assert row.primary.verdict == Verdict.UNCERTAIN
    assert "it may cover conv2d_1 alone or conv2d_1 to act" in row.primary.reason


# ---- 2. a reference that matches nothing is bad input ------------------------------------------

MLP = (
    ("fc1", "linear", (4, 64), None, 0.1),
    ("act", "gelu", (4, 64), None, 0.1),
    ("fc2", "linear", (4, 16), None, 0.1),
)


@pytest.mark.parametrize(
    "fixture",
    [
        "trt_resnet_a100_fp32.profile.json",  # TensorRT, another model
        "ort_directml_mobilenet.json",  # ONNX Runtime on DirectML, another model, no shapes
        "torch_profiler_no_annotations.trace.json",  # no record_function ranges at all
    ],
)
def test_a_profile_of_another_model_exits_2(fixture: str, tmp_path: Path):
    done = cli_compare(tmp_path, run_of(MLP, model="mlp"), fixture)
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Traceback" not in done.output and not (tmp_path / "out").exists()
    if fixture != "torch_profiler_no_annotations.trace.json":
        assert "no reference row matches a layer of the run" in lines[0]
        assert "the run's layers are fc1, act, fc2" in lines[0] and "closest pairs" in lines[0]


def test_nothing_matched_names_both_sides_and_the_closest_pairs():
    with pytest.raises(InputError) as info:
        compare_file(run_of(MLP, model="mlp"), "trt_resnet_a100_fp32.profile.json")
    text = str(info.value)
    assert "the file's rows are Conv_0 + Relu_1, MaxPool_2" in text
    assert "closest pairs:" in text and "~" in text


def test_a_directml_profile_is_a_gpu_reference():
    profile = read_reference(DATA / "ort_directml_mobilenet.json", "auto", ReaderOptions())
    assert profile.device == "gpu"


# ---- 3. interpreter times and CPU times are never judged ---------------------------------------


def test_interpreted_results_are_not_measured_and_exit_0(tmp_path: Path):
    run = run_of(CNN, device="cpu", interpreted=True)
    c = compare_file(run, "sas_fused_conv_relu.csv")
    assert {row.primary.verdict for row in c.rows} == {Verdict.NOT_MEASURED, Verdict.MISSING}
    fused = rows_of(c)[("Conv2d_1", "relu_a")]
    assert fused.primary.verdict == Verdict.NOT_MEASURED
    assert "interpreter" in fused.primary.reason
    assert c.models[0].verdict == Verdict.NOT_MEASURED
    # slower than the target: still never a FAIL, never exit 1
    slow = run_of(tuple((*spec[:4], 10.0) for spec in CNN), device="cpu", interpreted=True)
    done = cli_compare(
        tmp_path, slow, "sas_fused_conv_relu.csv", "--junit", str(tmp_path / "j.xml")
    )
    assert done.exit_code == ExitCode.OK, done.output
    assert "NOT-MEASURED" in done.stdout
    out = tmp_path / "out"
    for name in ("report.md", "report.html", "comparison.csv"):
        assert "NOT-MEASURED" in (out / name).read_text(), name
    assert 'class="not-measured"' in (out / "report.html").read_text()
    junit = (tmp_path / "j.xml").read_text()
    assert 'value="NOT-MEASURED"' in junit and "<failure" not in junit


def test_cpu_times_against_a_gpu_engine_are_not_measured_unless_allowed():
    layers = (
        ("Conv_0", "conv2d", (1, 64, 112, 112), None, 0.20),
        ("relu1", "relu", (1, 64, 112, 112), "Conv_0 + Relu_1", 0.05),
    )
    run = run_of(layers, model="resnet", device="cpu")
    c = compare_file(run, "trt_resnet_a100_fp32.profile.json", partial=True)
    row = rows_of(c)[("Conv_0", "relu1")]
    assert row.primary.verdict == Verdict.NOT_MEASURED
    assert "CPU against a GPU engine" in row.primary.reason
    allowed = compare_file(
        run, "trt_resnet_a100_fp32.profile.json", allow_cpu_times=True, partial=True
    )
    assert rows_of(allowed)[("Conv_0", "relu1")].primary.verdict == Verdict.PASS


# ---- 4. prefix differences inside their noise --------------------------------------------------


def test_prefix_difference_inside_the_noise_is_uncertain(tmp_path: Path):
    c = compare_file(run_of(CNN), "sas_prefix_within_noise.csv")
    rows = rows_of(c)
    source = str(DATA / "sas_prefix_within_noise.csv")
    for layer, previous, line in (("pool1", "conv2d_1", 6), ("relu_b", "fc1", 8)):
        row = rows[(layer,)]
        ref = row.reference
        assert ref.lo <= ref.value <= ref.hi and ref.lo < 0 < ref.hi  # never inverted
        assert row.primary.verdict == Verdict.UNCERTAIN
        assert row.primary.reason == (
            f"within the noise of the cut timings it combines: {source} "
            f"{layer!r} (line {line}) = −T({previous}) + T({layer})"
        )
    assert rows[("relu_b",)].reference.value == pytest.approx(-0.002)
    assert rows[("fc1",)].primary.verdict == Verdict.PASS  # 0.117 ms, well above its noise
    done = cli_compare(tmp_path, run_of(CNN), "sas_prefix_within_noise.csv")
    assert done.exit_code == ExitCode.OK, done.output


def test_a_prefix_file_without_spread_says_no_interval_was_available(tmp_path: Path):
    layers = (
        ("conv1", "conv2d", (1, 8, 8, 8), None, 0.2),
        ("conv2", "conv2d", (1, 8, 8, 8), None, 0.2),
        ("relu2", "relu", (1, 8, 8, 8), None, 0.002),
        ("fc", "linear", (1, 10), None, 0.2),
    )
    done = cli_compare(tmp_path, run_of(layers), "sas_prefix_no_spread.csv")
    assert done.exit_code in (ExitCode.OK, ExitCode.FAILED_GATE), done.output
    for name in ("report.md", "report.html"):
        assert "no interval was available" in (tmp_path / "out" / name).read_text()
