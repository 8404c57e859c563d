"""Format registry: detection of every fixture, names and aliases, the read_reference entry."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from opbench.errors import ExitCode, InputError
from opbench.reference.interface import ReaderOptions
from opbench.reference.registry import (
    FORMATS,
    READERS,
    detect,
    format_names,
    read_reference,
    resolve_format,
    sniff_scores,
)

DATA = Path(__file__).parents[2] / "data" / "reference"
REPO = Path(__file__).parents[3]

FIXTURES = {
    "sas_dlpy_summary_times.csv": "sas",
    "sas_dlpy_semicolon_decimal_comma.csv": "sas",
    "sas_tab_us_counts.tsv": "sas",
    "sas_generic_runs.csv": "sas",
    "sas_generic_stats.csv": "sas",
    "sas_prefix_spread.csv": "sas-prefix",
    "sas_prefix_no_spread.csv": "sas-prefix",
    "onnxruntime_profile_mlp_cpu.json": "onnxruntime",
    "ort_profile_resnet50_gemmini_cpu_systolic.json": "onnxruntime",
    "ort_cnn_cpu_fusedconv.json": "onnxruntime",
    "ort_cnn_cpu_nchwc.json": "onnxruntime",
    "ort_cuda_kernels_synthetic.json": "onnxruntime",
    "trt_resnet_a100_fp32.profile.json": "tensorrt",
    "openvino_average_counters.csv": "openvino",
    "openvino_detailed_counters.csv": "openvino",
    "openvino_average_counters_python.csv": "openvino",
    "pytorch_kineto_mi250_minitoy_train.trace.json": "torch-profiler",
    "pytorch_kineto_cpu_record_function.trace.json": "torch-profiler",
    "torch_kineto_gpu_layers_synthetic.trace.json": "torch-profiler",
    "sas_fused_conv_relu.csv": "sas",
    "sas_prefix_fused_conv_relu.csv": "sas-prefix",
    "sas_prefix_within_noise.csv": "sas-prefix",
    "ort_directml_mobilenet.json": "onnxruntime",
    "sas_prefix_fell_below.csv": "sas-prefix",
    "sas_dense7.csv": "sas",
    "trt_googlenet_fp16.profile.json": "tensorrt",
    "trt_googlenet_dla.profile.json": "tensorrt",
    "trt_alexnet_caffe.profile.json": "tensorrt",
    "ort_fused_extended.json": "onnxruntime",
    "ort_fused_all.json": "onnxruntime",
    "sas_fc_relu_fused.csv": "sas",
    "sas_zero_time.csv": "sas",
    "sas_cut_mid_number.csv": "sas",
}
# Files of a known format that hold no layer to compare: reading them is bad input.
UNREADABLE = {"torch_profiler_no_annotations.trace.json": "torch-profiler"}


@pytest.mark.parametrize(("name", "expected"), sorted(FIXTURES.items()))
def test_every_fixture_is_detected_and_read(name, expected):
    path = DATA / name
    assert detect(path) == expected
    profile = read_reference(path, "auto", ReaderOptions(skip_runs=0))
    assert profile.format == expected  # auto-detection says which format it chose
    assert profile.source == str(path)
    assert profile.layers and all(layer.source == str(path) for layer in profile.layers)
    assert [layer.index for layer in profile.layers] == list(range(len(profile.layers)))


def test_every_data_file_is_covered():
    files = {p.name for p in DATA.iterdir() if p.suffix in (".csv", ".tsv", ".json")}
    assert files - set(FIXTURES) - set(UNREADABLE) == {
        "trt_resnet_a100_fp32.graph.json",
        "trt_googlenet_fp16.graph.json",
    }


@pytest.mark.parametrize(("name", "expected"), sorted(UNREADABLE.items()))
def test_files_without_layers_are_detected_and_refused(name, expected):
    assert detect(DATA / name) == expected
    with pytest.raises(InputError, match="no record_function ranges"):
        read_reference(DATA / name, "auto", ReaderOptions())


def test_gzip_fixture_is_detected(tmp_path):
    path = tmp_path / "profile.json.gz"
    path.write_bytes(gzip.compress((DATA / "onnxruntime_profile_mlp_cpu.json").read_bytes()))
    assert detect(path) == "onnxruntime"
    assert len(read_reference(path).layers) == 9


def test_explicit_format_and_aliases():
    path = DATA / "trt_resnet_a100_fp32.profile.json"
    assert read_reference(path, "tensorrt").format == "tensorrt"
    assert read_reference(path, "TRT").format == "tensorrt"
    assert resolve_format("ORT") == "onnxruntime"
    assert resolve_format("kineto") == "torch-profiler"
    assert resolve_format("sas_prefix") == "sas-prefix"
    assert resolve_format("auto") == "auto"
    assert format_names() == [
        "auto",
        "sas-prefix",
        "sas",
        "onnxruntime",
        "tensorrt",
        "openvino",
        "torch-profiler",
    ]
    assert set(FORMATS) == {reader.name for reader in READERS}


def test_unknown_format():
    with pytest.raises(InputError, match="unknown format 'caffe'; known: auto, sas-prefix") as info:
        read_reference(DATA / "sas_generic_stats.csv", "caffe")
    assert info.value.exit_code == ExitCode.BAD_INPUT


def test_undetectable_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("NOTE: Training from scratch.\nNOTE: The total time is 23.33 (s).\n")
    with pytest.raises(
        InputError, match="cannot tell the format .*NOTE: Training from scratch.*--format"
    ) as info:
        read_reference(path)
    assert info.value.location.file == str(path) and info.value.location.line == 1
    assert str(info.value).startswith(f"{path}:1: cannot tell the format")


def test_layer_info_file_gets_a_hint():
    with pytest.raises(InputError, match="layer-information file .* pass the --exportProfile file"):
        read_reference(DATA / "trt_resnet_a100_fp32.graph.json")


def test_wrong_explicit_format_explains(tmp_path):
    with pytest.raises(InputError, match="no node timings"):
        read_reference(DATA / "torch_kineto_gpu_layers_synthetic.trace.json", "onnxruntime")
    with pytest.raises(InputError, match="cannot find a column separator"):
        read_reference(DATA / "trt_resnet_a100_fp32.profile.json", "sas")
    with pytest.raises(InputError, match="expected the counters header"):
        read_reference(DATA / "sas_generic_stats.csv", "openvino")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b"   \n\n", "only whitespace"),
    ],
)
def test_empty_files(tmp_path, content, message):
    path = tmp_path / "empty.csv"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_reference(path)


def test_empty_file_with_explicit_format(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    for name in FORMATS:
        with pytest.raises(InputError, match="the file is empty"):
            read_reference(path, name)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_reference(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="not a file"):
        read_reference(tmp_path)


def test_scores_are_ordered():
    scores = sniff_scores((DATA / "sas_prefix_spread.csv").read_text())
    assert scores[0] == ("sas-prefix", 0.85)
    assert [score for _, score in scores] == sorted((score for _, score in scores), reverse=True)


def test_readers_import_neither_torch_nor_triton():
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from opbench.reference.registry import read_reference\n"
        "from opbench.reference.interface import ReaderOptions\n"
        f"for p in sorted(Path({str(DATA)!r}).glob('*.*')):\n"
        f"    if p.name in {sorted(UNREADABLE)!r}:\n"
        "        continue\n"
        "    if p.suffix in ('.csv', '.tsv') or (p.suffix == '.json' and 'graph' not in p.name):\n"
        "        read_reference(p, options=ReaderOptions(skip_runs=0))\n"
        "bad = [m for m in ('torch', 'triton') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
