"""The `sas` reader: DLPy layer summaries with a time column, and generic layer/time CSVs."""

from __future__ import annotations

import codecs
import gzip
from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import RefStatus, TimeKind
from opbench.reference.sas import READER, fused_members

DATA = Path(__file__).parents[2] / "data" / "reference"


def read(path: Path, **options: object):
    return READER.read(path, ReaderOptions(**options))  # type: ignore[arg-type]


def by_name(profile):
    return {layer.name: layer for layer in profile.layers}


def write(tmp_path: Path, text: str, name: str = "t.csv", encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def test_dlpy_summary_layout_with_time_column():
    profile = read(DATA / "sas_dlpy_summary_times.csv")
    assert profile.format == "sas" and profile.engine == "sas"
    assert [layer.name for layer in profile.layers] == [
        "InputLayer_1", "conv0", "conv1", "conv2", "InputLayer_2", "conv3", "Concat_1",
        "OutputLayer_2", "OutputLayer_1",
    ]  # fmt: skip
    layers = by_name(profile)
    assert layers["InputLayer_1"].status == RefStatus.INPUT
    assert layers["InputLayer_2"].status == RefStatus.INPUT
    assert layers["conv0"].status == RefStatus.TIMED
    assert layers["conv0"].raw_type == "convo"
    assert layers["conv0"].members == ("conv", "relu")
    assert layers["OutputLayer_2"].members == ("fc", "softmax")
    assert layers["Concat_1"].members == ()  # concat fuses nothing; act=Auto means identity
    assert layers["conv1"].time_ms == pytest.approx(0.061)
    assert layers["conv1"].count == 1 and layers["conv1"].mean_ms == pytest.approx(0.061)
    assert layers["conv3"].output_shape == (28, 28, 2)
    assert layers["OutputLayer_1"].output_shape == (2,)
    assert layers["conv0"].line == 3 and layers["OutputLayer_1"].line == 10
    assert all(layer.time_kind == TimeKind.HOST for layer in profile.layers)
    # the "Summary" footer is not a layer; its time is the model total
    assert "Summary" not in layers
    assert profile.total_ms == pytest.approx(0.316)
    assert [layer.index for layer in profile.layers] == list(range(9))


def test_semicolon_decimal_comma_bom_crlf_seconds():
    raw = (DATA / "sas_dlpy_semicolon_decimal_comma.csv").read_bytes()
    assert raw.startswith(codecs.BOM_UTF8) and b"\r\n" in raw and b"0,0000734" in raw
    profile = read(DATA / "sas_dlpy_semicolon_decimal_comma.csv")
    layers = by_name(profile)
    assert list(layers) == ["data", "conv1", "bn1", "pool1", "fc1", "outputlayer"]
    assert layers["data"].status == RefStatus.INPUT  # lower-case SAS names kept as written
    assert layers["conv1"].time_ms == pytest.approx(0.0734)  # seconds -> ms
    assert layers["conv1"].members == ()  # Activation Identity: nothing fused
    assert layers["bn1"].members == ("batchnorm", "relu")
    assert layers["fc1"].members == ("fc", "relu")
    assert layers["outputlayer"].members == ("fc", "softmax")
    assert layers["fc1"].output_shape == (256,)
    assert layers["pool1"].output_shape == (16, 16, 64)
    assert profile.total_ms == pytest.approx(0.2846)


def test_tab_separated_microseconds_with_count_and_std():
    profile = read(DATA / "sas_tab_us_counts.tsv")
    layers = by_name(profile)
    assert list(layers) == ["conv1", "bn1", "pool1", "fc1"]
    conv = layers["conv1"]
    assert conv.count == 100
    assert conv.mean_ms == pytest.approx(0.0734)  # one number for 100 samples is a mean
    assert conv.median_ms is None and conv.time_ms == pytest.approx(0.0734)
    assert conv.noise_ms == pytest.approx(0.0021)
    assert conv.raw_type == "CONVO"


def test_statistics_columns():
    layers = by_name(read(DATA / "sas_generic_stats.csv"))
    fc = layers["fc1"]
    assert (fc.median_ms, fc.mean_ms, fc.min_ms, fc.max_ms) == pytest.approx(
        (0.156, 0.1571, 0.1502, 0.1703)
    )
    assert fc.noise_ms == pytest.approx(0.0042) and fc.count == 50
    assert fc.time_ms == pytest.approx(0.156)  # the median is the representative time


def test_run_column_aggregates_samples_and_skips_warm_up():
    profile = read(DATA / "sas_generic_runs.csv")
    layers = by_name(profile)
    conv = layers["conv1"]
    assert conv.count == 3  # iteration 0 dropped
    assert conv.median_ms == pytest.approx(0.075)
    assert (conv.min_ms, conv.max_ms) == pytest.approx((0.071, 0.079))
    assert conv.total_ms == pytest.approx(0.225)
    assert layers["relu1"].count == 2 and Flag.MISSING_IN_SOME_RUNS in layers["relu1"].flags
    assert any("dropped the first 1 of 4" in note for note in profile.notes)
    everything = by_name(read(DATA / "sas_generic_runs.csv", skip_runs=0))
    assert everything["conv1"].count == 4 and everything["conv1"].max_ms == pytest.approx(0.41)


def test_run_column_all_runs_skipped_is_an_error():
    with pytest.raises(InputError, match=r"4 run\(s\) and the first 4 are skipped.*--skip-runs 3"):
        read(DATA / "sas_generic_runs.csv", skip_runs=4)


def test_duplicate_in_one_run_is_an_error(tmp_path):
    path = write(tmp_path, "layer,run,time_ms\nconv1,0,1\nconv1,1,1\nconv1,1,2\n")
    with pytest.raises(InputError, match="duplicate layer name 'conv1' in run 1") as info:
        read(path, skip_runs=0)
    assert info.value.location.line == 4


@pytest.mark.parametrize(
    ("header", "value", "expected_ms"),
    [
        ("Time(s)", "0.5", 500.0),
        ("Time (ms)", "0.5", 0.5),
        ("time_ms", "0.5", 0.5),
        ("Time (us)", "500", 0.5),
        ("Time [µs]", "500", 0.5),
        ("elapsed_ns", "500000", 0.5),
        ("Latency(msec)", "0.5", 0.5),
        ("Duration", "0.5 ms", 0.5),  # no unit in the header: the cell names it
        ("Elapsed", "1.5e-4s", 0.15),
        ("ms", "0.5", 0.5),
    ],
)
def test_time_column_and_unit_from_header(tmp_path, header, value, expected_ms):
    path = write(tmp_path, f"Layer,{header}\nconv1,{value}\n")
    (layer,) = read(path).layers
    assert layer.time_ms == pytest.approx(expected_ms)


def test_unit_from_options(tmp_path):
    path = write(tmp_path, "Layer,Duration\nconv1,2\n")
    assert read(path, unit="us").layers[0].time_ms == pytest.approx(0.002)
    header_unit = write(tmp_path, "Layer,Time (ms)\nconv1,2\n", "h.csv")
    profile = read(header_unit, unit="s")  # the option overrides the header, and says so
    assert profile.layers[0].time_ms == pytest.approx(2000.0)
    assert any("overrides 'ms'" in note for note in profile.notes)


def test_time_column_option_picks_a_column(tmp_path):
    path = write(tmp_path, "name,wall (ms),gpu (ms)\nconv1,2.0,1.5\n")
    assert read(path).layers[0].time_ms == pytest.approx(2.0)
    assert read(path, time_column="GPU (ms)").layers[0].time_ms == pytest.approx(1.5)


def test_median_column_preferred_over_plain_time(tmp_path):
    path = write(tmp_path, "layer,mean_ms,median_ms\nconv1,2.0,1.5\n")
    layer = read(path).layers[0]
    assert layer.median_ms == pytest.approx(1.5) and layer.mean_ms == pytest.approx(2.0)


def test_quoted_fields_thousands_and_comments(tmp_path):
    text = (
        "# exported by hand from SAS Studio\n"
        'layer;"Time (us)"\n'
        '"conv;1";"1.234,5"\n'
        "# a comment between rows\n"
        "conv2;2 000\n"
    )
    layers = by_name(read(write(tmp_path, text)))
    assert layers["conv;1"].time_ms == pytest.approx(1.2345)
    assert layers["conv;1"].line == 3
    assert layers["conv2"].time_ms == pytest.approx(2.0)
    assert layers["conv2"].line == 5


def test_comma_separated_quoted_thousands(tmp_path):
    path = write(tmp_path, 'layer,time_us\nfc1,"1,234.5"\nfc2,"2,000"\n')
    layers = by_name(read(path))
    assert layers["fc1"].time_ms == pytest.approx(1.2345)
    assert layers["fc2"].time_ms == pytest.approx(2.0)


def test_utf16_tab_export_from_excel(tmp_path):
    path = write(tmp_path, "Layer\tTime (ms)\r\nconv1\t0,25\r\n", "x.txt", "utf-16")
    assert read(path).layers[0].time_ms == pytest.approx(0.25)


def test_windows_1252_micro_sign(tmp_path):
    path = write(tmp_path, "Layer;Time (µs)\nconv1;250\n", encoding="cp1252")
    assert read(path).layers[0].time_ms == pytest.approx(0.25)


def test_gzip_compressed_csv(tmp_path):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(b"Layer,Time (ms)\nconv1,0.5\n"))
    assert read(path).layers[0].time_ms == pytest.approx(0.5)


def test_input_row_without_time_and_short_rows(tmp_path):
    path = write(tmp_path, "Layer Id,Layer,Type,Time (ms)\n0,data,input\n1,conv1,convo,0.2\n")
    layers = by_name(read(path))
    assert layers["data"].status == RefStatus.INPUT and layers["data"].time_ms is None
    assert layers["data"].count == 0
    assert layers["conv1"].time_ms == pytest.approx(0.2)


def test_input_recognised_by_name_without_type_column(tmp_path):
    path = write(tmp_path, "Layer,Time (ms)\nInputLayer_1,0.01\ninput_proj,0.3\n")
    layers = by_name(read(path))
    assert layers["InputLayer_1"].status == RefStatus.INPUT
    assert layers["input_proj"].status == RefStatus.TIMED


@pytest.mark.parametrize("footer", ["Total", "TOTAL (model)", "Summary", "total time"])
def test_footer_rows_are_not_layers(tmp_path, footer):
    path = write(tmp_path, f"Layer,Time (ms)\nconv1,0.2\nfc,0.3\n{footer},0.5\n")
    profile = read(path)
    assert [layer.name for layer in profile.layers] == ["conv1", "fc"]
    assert profile.total_ms == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("raw_type", "activation", "members", "flags"),
    [
        ("convo", "Relu", ("conv", "relu"), ()),
        ("CONVO", "ReLU", ("conv", "relu"), ()),
        ("convo", "Identity", (), ()),
        ("convo", "Auto", ("conv", "relu"), (Flag.ACTIVATION_AUTO,)),
        ("batchnorm", "Relu", ("batchnorm", "relu"), ()),
        ("batchnorm", "Auto", (), (Flag.ACTIVATION_AUTO,)),
        ("fc", "Tanh", ("fc", "tanh"), ()),
        ("output", "Softmax", ("fc", "softmax"), ()),
        ("output", None, ("fc", "softmax"), ()),
        ("output", "Identity", (), ()),
        ("pool", "Max", (), ()),
        ("input", "None", (), ()),
        (None, "Relu", (), ()),
    ],
)
def test_fused_members(raw_type, activation, members, flags):
    assert fused_members(raw_type, activation) == (members, flags)


def test_sniff():
    assert READER.sniff((DATA / "sas_dlpy_summary_times.csv").read_text()) == pytest.approx(0.8)
    assert READER.sniff("layer,time_ms\nconv1,1\n") == pytest.approx(0.7)
    assert READER.sniff('[{"cat": "Node"}]') == 0.0
    assert READER.sniff("just some text\n") == 0.0
