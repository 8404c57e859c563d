"""Bad input that names its place and its cure (issue 29, case 7): a YAML syntax error found
at the end of the file points at what was left open, never past the last line; an unknown
backend says how a plugin's backend is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import InputError
from opbench.spec.load import load_suite, load_suite_text

# 7 lines; the `{` on line 7, column 9 is never closed.
UNCLOSED = """name: s
models:
  - name: m
    input: [4]
    layers:
      - {name: a, op: relu}
      - {name: b, op: relu
"""


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        (UNCLOSED, 7, 9, "a flow mapping that starts here is not closed before the file ends"),
        (
            "name: s\nmodels: [\n  {name: m}\n",
            2,
            9,
            "a flow sequence that starts here is not closed",
        ),
        ('name: s\ndescription: "never ends\n', 2, 14, "a quoted scalar that starts here"),
    ],
)
def test_an_unclosed_bracket_or_quote_is_located_where_it_opens(text, line, column, words):
    with pytest.raises(InputError) as info:
        load_suite_text(text, "suite.yaml")
    location = info.value.location
    assert (location.line, location.column) == (line, column)
    assert location.line <= len(text.splitlines())
    assert words in info.value.message


def test_a_syntax_error_inside_the_file_keeps_its_own_place():
    with pytest.raises(InputError) as info:
        load_suite_text("name: s\n  bad: indent\nmodels: []\n", "suite.yaml")
    assert (info.value.location.line, info.value.location.column) == (2, 6)


def test_the_command_line_prints_the_place_of_the_unclosed_bracket(tmp_path: Path):
    path = tmp_path / "suite.yaml"
    path.write_text(UNCLOSED)
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 2
    assert f"{path}:7:9: YAML syntax error" in done.output
    with pytest.raises(InputError, match=r"not closed before the file ends"):
        load_suite(path)


def test_an_unknown_backend_says_how_to_load_a_plugin(tmp_path: Path):
    text = "name: s\ndefaults: {backends: [mykernels]}\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n"
    with pytest.raises(InputError) as info:
        load_suite_text(text, "suite.yaml")
    message = info.value.message
    assert "unknown backend 'mykernels'" in message and "--plugin PATH_OR_MODULE" in message
    suite = tmp_path / "ok.yaml"
    suite.write_text("name: s\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n")
    done = CliRunner().invoke(app, ["run", str(suite), "--backend", "mykernels", "--device", "cpu"])
    assert done.exit_code == 2
    assert "unknown backend 'mykernels'" in done.output and "--plugin" in done.output
