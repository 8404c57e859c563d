"""Bad reference files: each is one InputError (exit code 2) naming file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench.errors import ExitCode, InputError
from opbench.reference.interface import ReaderOptions
from opbench.reference.registry import read_reference


def write(tmp_path: Path, text: str, name: str = "ref.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# (file text, format, message pattern, line, column)
CSV_CASES = [
    ("Layer,Kernel Size\nconv1,3\n", "sas", "no time column .* 'Layer', 'Kernel Size'", 1, 1),
    ("Time (ms),FLOPS\n0.5,10\n", "sas", "no layer-name column", 1, 1),
    ("Layer,Time (ms)\nconv1,abc\n", "sas", r"not a number in column 'Time \(ms\)': 'abc'", 2, 7),
    ("Layer,Time (ms)\nconv1,-0.5\n", "sas", "negative time '-0.5'", 2, 7),
    ("Layer,Time (ms)\nconv1,NaN\n", "sas", "not a finite number", 2, 7),
    ("Layer,Time (ms)\nconv1,inf\n", "sas", "not a finite number", 2, 7),
    ("Layer,Time (ms)\nconv1,1_000\n", "sas", "not a number", 2, 7),
    ("Layer,Time (ms)\nconv1,0.5 parsecs\n", "sas", "unknown unit 'parsecs'", 2, 7),
    ("Layer,Time (ms)\nconv1,\n", "sas", r"missing time in column 'Time \(ms\)'", 2, 7),
    ("Layer,Time (ms)\nconv1\n", "sas", "missing time", 2, 6),
    (
        "Layer,Time (ms)\nconv1,1\nfc,2\nconv1,3\n",
        "sas",
        r"duplicate layer name 'conv1' \(first on line 2\)",
        4,
        1,
    ),
    ("Layer,Time (ms)\nconv1,1\nCONV1,3\n", "sas", "differ only in case", 3, 1),
    ("Layer,Elapsed\nconv1,1.5\n", "sas", "cannot tell the unit of column 'Elapsed'.*--unit", 1, 7),
    ("Layer,Time (ms)\n,1.5\n", "sas", "a time but no layer name", 2, 1),
    ("Layer,Time (ms),count\nconv1,1,2.5\n", "sas", "count '2.5' is not a whole number", 2, 9),
    ("Layer,run,Time (ms)\nconv1,,1\n", "sas", "missing run number", 2, 7),
    ("Layer Time\nconv1 1\n", "sas", "cannot find a column separator", 1, 1),
    ("# only a comment\n", "sas", "no header line", None, None),
    ("Layer,Time (ms)\n\n# nothing\n", "sas", "no layer rows after the header", 1, None),
    ('Layer,Time (ms)\n"conv1,1\n', "sas", "malformed CSV", 2, None),
    ("layer,Prefix (ms)\nconv,abc\n", "sas-prefix", "not a number", 2, 6),
    ("layer,Prefix (ms)\nconv,1\nconv,2\n", "sas-prefix", "duplicate layer name", 3, 1),
]


@pytest.mark.parametrize(("text", "fmt", "message", "line", "column"), CSV_CASES)
def test_bad_csv(tmp_path, text, fmt, message, line, column):
    path = write(tmp_path, text)
    with pytest.raises(InputError, match=message) as info:
        read_reference(path, fmt, ReaderOptions())
    error = info.value
    assert error.exit_code == ExitCode.BAD_INPUT
    assert (error.location.file, error.location.line, error.location.column) == (
        str(path),
        line,
        column,
    )


def test_message_is_one_line_with_location(tmp_path):
    path = write(tmp_path, "Layer,Time (ms)\nconv1,-1\n")
    with pytest.raises(InputError) as info:
        read_reference(path)
    text = str(info.value)
    assert text.startswith(f"{path}:2:7, layer 'conv1', field 'Time (ms)': negative time")
    assert "\n" not in text


def test_invalid_utf8_in_the_middle(tmp_path):
    path = tmp_path / "ref.csv"
    rows = b"".join(b"conv%d,1\n" % i for i in range(20000))
    path.write_bytes(b"Layer,Time (ms)\n" + rows + b"bad\xff\xfe,1\n")
    with pytest.raises(InputError, match="not valid utf-8 text"):
        read_reference(path, "sas")


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ('[\n{"cat": "Node",\n "name": }\n]', "invalid JSON: Expecting value", 3, 10),
        ('[{"cat": "Node"} {"cat": "Node"}]', "expected ',' or ']'", 1, 18),
        ('{"traceEvents": [], "x": }', "invalid JSON", 1, 26),
        ("[1, 2]", "an event that is not a JSON object", 1, 2),
    ],
)
def test_bad_json_names_line_and_column(tmp_path, text, message, line, column):
    path = write(tmp_path, text, "p.json")
    with pytest.raises(InputError, match=message) as info:
        read_reference(path, "onnxruntime")
    assert (info.value.location.line, info.value.location.column) == (line, column)


def test_bad_json_top_level(tmp_path):
    path = write(tmp_path, '"just a string"', "p.json")
    with pytest.raises(InputError, match="expected a JSON array or object"):
        read_reference(path, "onnxruntime")
    path = write(tmp_path, '{"other": []}', "q.json")
    with pytest.raises(InputError, match='without a "traceEvents" array'):
        read_reference(path, "torch-profiler")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unit": "minutes"}, "unknown time unit 'minutes'"),
        ({"skip_runs": -1}, "skip_runs must be 0 or more"),
        ({"skip_runs": 1.5}, "whole number"),
        ({"time_column": "  "}, "time column name is empty"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(InputError, match=message) as info:
        ReaderOptions(**options)  # type: ignore[arg-type]
    assert info.value.exit_code == ExitCode.BAD_INPUT


def test_unit_aliases_are_normalised():
    assert ReaderOptions(unit="µs").unit == "us"
    assert ReaderOptions(unit="Milliseconds").unit == "ms"
    assert ReaderOptions(unit="sec").unit == "s"
