"""One reader for the JSON files opbench writes (run.json, comparison.json, a baseline): every
way a read fails is one line naming the file, with the exit code of its kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench.compare.baseline import BaselineError, load_baseline
from opbench.errors import ExitCode, InputError
from opbench.report.csvjson import read_comparison
from opbench.results.io import read_run
from opbench.results.jsonfile import read_json_object

READERS = (read_run, read_comparison, load_baseline)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not UTF-8"),
        (b'{"a": [1,\n 2', "not valid JSON"),
        (b"[1, 2]", "holds a JSON object"),
    ],
)
@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__)
def test_a_file_that_is_there_and_wrong_is_bad_input(tmp_path: Path, reader, content, message):
    path = tmp_path / "file.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        reader(path)
    assert message in info.value.message and info.value.location.file == str(path)
    assert info.value.exit_code == ExitCode.BAD_INPUT


def test_bad_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(InputError) as info:
        read_json_object(path, "run file")
    assert (info.value.location.line, info.value.location.column) == (2, 7)


def test_a_missing_file_says_so_with_its_own_exit_code(tmp_path: Path) -> None:
    gone = tmp_path / "gone.json"
    with pytest.raises(InputError, match="no such run file"):
        read_run(gone)
    with pytest.raises(InputError, match="run `opbench compare` first"):
        read_comparison(gone)
    with pytest.raises(BaselineError, match="--update-baseline") as info:
        load_baseline(gone)  # a baseline not there yet: exit 4, not bad input
    assert info.value.exit_code == ExitCode.BASELINE
