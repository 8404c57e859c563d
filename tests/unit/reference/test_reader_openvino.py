"""The `openvino` reader: benchmark_app average/detailed counters CSVs (C++ and Python writers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.reference.interface import ReaderOptions
from opbench.reference.model import RefStatus, TimeKind
from opbench.reference.openvino import READER

DATA = Path(__file__).parents[2] / "data" / "reference"
HEADER = "layerName;execStatus;layerType;execType;realTime (ms);cpuTime (ms);\n"


def read(path: Path, **options: object):
    return READER.read(path, ReaderOptions(**options))  # type: ignore[arg-type]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "benchmark_average_counters_report.csv"
    path.write_text(text)
    return path


def test_average_counters():
    profile = read(DATA / "openvino_average_counters.csv")
    assert profile.format == "openvino" and profile.engine == "openvino"
    layers = {layer.name: layer for layer in profile.layers}
    assert len(layers) == 11
    conv = layers["conv1/WithoutBiases"]
    assert conv.status == RefStatus.TIMED and conv.raw_type == "Convolution"
    assert conv.time_ms == pytest.approx(0.061) and conv.count == 1
    assert conv.time_kind == TimeKind.DEVICE and conv.line == 3
    for fused in ("conv1", "relu1", "fc/Add"):  # NOT_RUN / OPTIMIZED_OUT: no time
        assert layers[fused].status == RefStatus.NOT_RUN and layers[fused].time_ms is None
    assert layers["pool1_nChw16c_abcd_flatten"].status == RefStatus.OVERHEAD
    assert layers["input"].status == RefStatus.INPUT and layers["output"].status == RefStatus.INPUT
    assert layers["flatten"].status == RefStatus.TIMED and layers["flatten"].time_ms == 0.0
    assert "Total" not in layers
    assert profile.total_ms == pytest.approx(0.097)


def test_detailed_counters_aggregate_requests():
    profile = read(DATA / "openvino_detailed_counters.csv")
    layers = {layer.name: layer for layer in profile.layers}
    assert list(layers) == [
        "input",
        "conv1/WithoutBiases",
        "relu1",
        "pool1",
        "fc/MatMul",
        "softmax",
        "output",
    ]
    conv = layers["conv1/WithoutBiases"]
    assert conv.count == 3
    assert conv.median_ms == pytest.approx(0.060)
    assert (conv.min_ms, conv.max_ms) == pytest.approx((0.058, 0.064))
    assert conv.line == 3  # first block
    assert layers["relu1"].status == RefStatus.NOT_RUN and layers["relu1"].count == 0
    assert profile.total_ms == pytest.approx(0.092)  # median of the three block totals
    assert any("3 counters block(s)" in note for note in profile.notes)


def test_python_writer_variant():
    layers = {
        layer.name: layer for layer in read(DATA / "openvino_average_counters_python.csv").layers
    }
    assert layers["conv1/WithoutBiases"].time_ms == pytest.approx(0.061)
    assert layers["relu1"].status == RefStatus.NOT_RUN


def test_cpu_time_column():
    layers = {
        layer.name: layer
        for layer in read(DATA / "openvino_average_counters.csv", time_column="cpuTime").layers
    }
    assert layers["conv1/WithoutBiases"].time_ms == pytest.approx(0.060)
    with pytest.raises(InputError, match="realTime or cpuTime"):
        read(DATA / "openvino_average_counters.csv", time_column="layerType")


def test_sorted_counters_are_noted(tmp_path):
    text = "layerName;execStatus;layerType;execType;realTime (ms);cpuTime (ms); %;\n"
    text += "fc;EXECUTED;FullyConnected;brgemm;0.020000;0.020000;66.7;\nconv;EXECUTED;Convolution;jit;0.010000;0.010000;33.3;\n"
    profile = read(write(tmp_path, text))
    assert [layer.name for layer in profile.layers] == ["fc", "conv"]
    assert any("not execution order" in note for note in profile.notes)


def test_crlf_and_decimal_comma(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(
        (HEADER + "conv;EXECUTED;Convolution;jit;0,250000;0,250000;\n")
        .replace("\n", "\r\n")
        .encode()
    )
    assert read(path).layers[0].time_ms == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("row", "message", "column"),
    [
        ("conv;RUNNING;Convolution;jit;0.1;0.1;", "unknown execStatus 'RUNNING'", 6),
        ("conv;EXECUTED;Convolution;jit;-0.1;0.1;", "negative time", 31),
        ("conv;EXECUTED;Convolution;jit;abc;0.1;", "not a number", 31),
        ("conv;EXECUTED;Convolution;jit;nan;0.1;", "not a finite number", 31),
        ("conv;EXECUTED;Convolution;jit;;0.1;", "missing realTime", 31),
    ],
)
def test_bad_rows_name_line_and_column(tmp_path, row, message, column):
    with pytest.raises(InputError, match=message) as info:
        read(write(tmp_path, HEADER + row + "\n"))
    assert (info.value.location.line, info.value.location.column) == (2, column)


def test_duplicate_in_one_block(tmp_path):
    text = (
        HEADER + "conv;EXECUTED;Convolution;jit;0.1;0.1;\nconv;EXECUTED;Convolution;jit;0.1;0.1;\n"
    )
    with pytest.raises(InputError, match="appears twice in one block") as info:
        read(write(tmp_path, text))
    assert info.value.location.line == 3


def test_rows_before_a_header(tmp_path):
    with pytest.raises(InputError, match="expected the counters header"):
        read(write(tmp_path, "conv;EXECUTED;Convolution;jit;0.1;0.1;\n"))


def test_unit_option_must_agree():
    with pytest.raises(InputError, match="in ms; --unit s contradicts"):
        read(DATA / "openvino_average_counters.csv", unit="s")


def test_sniff():
    assert READER.sniff(HEADER) == 0.95
    assert READER.sniff("\ufefflayerName;execStatus;layerType\n") == 0.95
    assert READER.sniff("layer;time_ms\n") == 0.0
