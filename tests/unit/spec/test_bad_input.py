"""Every kind of bad suite: the loader's one-line message names file, line, model, layer and
field; `opbench validate` and `opbench run` print that one line and exit 2, no traceback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import ExitCode, InputError
from opbench.spec.load import load_suite, load_suite_text
from opbench.spec.problems import SuiteErrors


def suite(input_shape: str, *layers: str, model_extra: str = "") -> str:
    """A one-model suite whose layers start on line 7 (one per line) unless model_extra adds lines."""
    head = f"name: bad\nmodels:\n  - name: m\n    batch: 2\n    input: {input_shape}\n{model_extra}    layers:\n"
    return head + "".join(f"      - {layer}\n" for layer in layers)


@dataclass(frozen=True)
class Where:
    """Where the one line must point: file line, model, layer and field (None: not named)."""

    line: int | None = None
    model: str | None = None
    layer: str | None = None
    field: str | None = None


at = Where


@dataclass(frozen=True)
class Case:
    """One row of the table: a bad suite, the message's parts, and where it points."""

    id: str
    text: str
    message: tuple[str, ...]  # substrings the message must contain
    where: Where


L = 7  # the first layer's line in suite()

CASES = [
    # ---- the file as a whole ---------------------------------------------------------------
    Case(
        "yaml-syntax",
        "name: bad\nmodels:\n  - name: m\n    input: [8\n    layers: []\n",
        ("YAML syntax error",),
        at(5),
    ),
    Case(
        "yaml-bad-indent",
        "name: bad\nmodels:\n  - name: m\n   input: [8]\n",
        ("YAML syntax error",),
        at(4),
    ),
    Case("yaml-tab", "name: bad\n\tmodels: []\n", ("YAML syntax error",), at(2)),
    Case("empty-file", "", ("empty",), at()),
    Case("only-comments", "# nothing here\n\n", ("empty",), at()),
    Case("a-list", "- name: m\n- name: n\n", ("mapping", "list"), at(1)),
    Case("a-scalar", "just some words\n", ("mapping", "str"), at(1)),
    Case("duplicate-yaml-key", "name: a\nname: b\nmodels: []\n", ("duplicate key 'name'",), at(2)),
    Case(
        "unknown-top-level-field",
        "name: bad\nmodle: 1\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        ("unknown field 'modle'", "did you mean 'models'"),
        at(2, field="modle"),
    ),
    Case(
        "missing-models",
        "name: bad\n",
        ("missing required field 'models'",),
        at(1, field="models"),
    ),
    Case("no-models", "name: bad\nmodels: []\n", ("at least 1",), at(2, field="models")),
    Case(
        "bad-suite-name",
        "name: my suite\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        ("my suite",),
        at(1, field="name"),
    ),
    # ---- defaults and models ---------------------------------------------------------------
    Case(
        "unknown-defaults-field",
        "name: bad\ndefaults: {dtyp: float16}\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        ("unknown field 'dtyp'", "did you mean 'dtype'"),
        at(2, field="dtyp"),
    ),
    Case(
        "unknown-dtype-defaults",
        "name: bad\ndefaults: {dtype: float8}\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        ("float8", "float16"),
        at(2, field="dtype"),
    ),
    Case(
        "unknown-backend-defaults",
        "name: bad\ndefaults: {backends: [cuda]}\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        (
            "unknown backend 'cuda'",
            "torch, torch-compile, torch-compile-max-autotune, torch-int8, torch-fp8, triton",
        ),
        at(2, field="backends"),
    ),
    Case(
        "unknown-timing-field",
        "name: bad\ndefaults: {timing: {round: 3}}\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        ("unknown field 'round'", "did you mean 'rounds'"),
        at(2, field="round"),
    ),
    Case(
        "bad-timing-rounds",
        suite("[8]", "{name: a, op: relu, timing: {rounds: 0}}"),
        ("greater than or equal to 1",),
        at(L, "m", "a", "rounds"),
    ),
    Case(
        "unknown-model-field",
        suite("[8]", "{name: a, op: relu}", model_extra="    layrs: 3\n"),
        ("unknown field 'layrs'", "did you mean 'layers'"),
        at(6, "m", None, "layrs"),
    ),
    Case(
        "unknown-dtype-model",
        suite("[8]", "{name: a, op: relu}", model_extra="    dtype: fp16\n"),
        ("'fp16'",),
        at(6, "m", None, "dtype"),
    ),
    Case(
        "unknown-backend-model",
        suite("[8]", "{name: a, op: relu}", model_extra="    backends: [torch, tirton]\n"),
        ("unknown backend 'tirton'", "did you mean 'triton'"),
        at(6, "m", None, "backends"),
    ),
    Case(
        "missing-input",
        "name: bad\nmodels:\n  - name: m\n    layers: [{name: a, op: relu}]\n",
        ("missing required field 'input'",),
        at(3, "m", None, "input"),
    ),
    Case(
        "zero-input-dim",
        suite("[0, 8]", "{name: a, op: relu}"),
        ("at least 1",),
        at(5, "m", None, "input"),
    ),
    Case(
        "batch-zero",
        suite("[8]", "{name: a, op: relu}").replace("batch: 2", "batch: 0"),
        ("batch must be at least 1", "got 0"),
        at(4, "m", None, "batch"),
    ),
    Case(
        "batch-negative",
        suite("[8]", "{name: a, op: relu}").replace("batch: 2", "batch: -3"),
        ("batch must be at least 1",),
        at(4, "m", None, "batch"),
    ),
    Case(
        "batch-sweep-negative",
        suite("[8]", "{name: a, op: relu}").replace("batch: 2", "batch: [1, -1]"),
        ("batch must be at least 1",),
        at(4, "m", None, "batch"),
    ),
    Case(
        "batch-sweep-empty",
        suite("[8]", "{name: a, op: relu}").replace("batch: 2", "batch: []"),
        ("at least one value",),
        at(4, "m", None, "batch"),
    ),
    Case(
        "batch-sweep-repeated",
        suite("[8]", "{name: a, op: relu}").replace("batch: 2", "batch: [2, 2]"),
        ("distinct",),
        at(4, "m", None, "batch"),
    ),
    Case(
        "batch-bool",
        suite("[8]", "{name: a, op: relu}").replace("batch: 2", "batch: true"),
        ("integer", "True"),
        at(4, "m", None, "batch"),
    ),
    Case(
        "batch-string",
        suite("[8]", "{name: a, op: relu}").replace("batch: 2", "batch: eight"),
        ("integer", "'eight'"),
        at(4, "m", None, "batch"),
    ),
    Case(
        "duplicate-model",
        "name: bad\nmodels:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n"
        "  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        ("duplicate model name 'm'",),
        at(4, "m", None, "name"),
    ),
    Case(
        "no-layers",
        suite("[8]").replace("    layers:\n", "    layers: []\n"),
        ("at least 1",),
        at(6, "m", None, "layers"),
    ),
    # ---- layers ----------------------------------------------------------------------------
    Case(
        "layer-not-a-mapping",
        suite("[8]", "relu"),
        ("mapping", "'relu'"),
        at(L, "m", None, "layers"),
    ),
    Case(
        "missing-op",
        suite("[8]", "{name: a}"),
        ("missing required field 'op'",),
        at(L, "m", "a", "op"),
    ),
    Case(
        "duplicate-layer",
        suite("[8]", "{name: a, op: relu}", "{name: a, op: gelu}"),
        ("duplicate layer name 'a'",),
        at(L + 1, "m", "a", "name"),
    ),
    Case(
        "unknown-op",
        suite("[8]", "{name: a, op: lineer, out_features: 4}"),
        ("unknown op 'lineer'", "did you mean 'linear'"),
        at(L, "m", "a", "op"),
    ),
    Case(
        "unknown-backend-layer",
        suite("[8]", "{name: a, op: relu, backends: [trition]}"),
        ("unknown backend 'trition'", "did you mean 'triton'"),
        at(L, "m", "a", "backends"),
    ),
    Case(
        "unknown-dtype-layer",
        suite("[8]", "{name: a, op: relu, dtype: half}"),
        ("'half'", "float32"),
        at(L, "m", "a", "dtype"),
    ),
    Case(
        "missing-parameter",
        suite("[8]", "{name: a, op: linear}"),
        ("needs parameter 'out_features'",),
        at(L, "m", "a", "out_features"),
    ),
    Case(
        "missing-conv-kernel",
        suite("[3, 8, 8]", "{name: a, op: conv2d, out_channels: 4}"),
        ("needs parameter 'kernel_size'",),
        at(L, "m", "a", "kernel_size"),
    ),
    Case(
        "ill-typed-int",
        suite("[8]", "{name: a, op: linear, out_features: four}"),
        ("out_features must be an integer", "'four'"),
        at(L, "m", "a", "out_features"),
    ),
    Case(
        "ill-typed-float-for-int",
        suite("[8]", "{name: a, op: linear, out_features: 4.0}"),
        ("must be an integer",),
        at(L, "m", "a", "out_features"),
    ),
    Case(
        "ill-typed-bool",
        suite("[8]", "{name: a, op: linear, out_features: 4, bias: 3}"),
        ("bias must be true or false",),
        at(L, "m", "a", "bias"),
    ),
    Case(
        "ill-typed-choice",
        suite("[8]", "{name: a, op: linear, out_features: 4, activation: softplus}"),
        ("activation must be one of", "'softplus'"),
        at(L, "m", "a", "activation"),
    ),
    Case(
        "ill-typed-pair",
        suite("[3, 8, 8]", "{name: a, op: conv2d, out_channels: 4, kernel_size: [3, 3, 3]}"),
        ("kernel_size must be an integer or a pair",),
        at(L, "m", "a", "kernel_size"),
    ),
    Case(
        "negative-padding",
        suite("[3, 8, 8]", "{name: a, op: conv2d, out_channels: 4, kernel_size: 3, padding: -1}"),
        ("padding must not be negative",),
        at(L, "m", "a", "padding"),
    ),
    Case(
        "zero-heads",
        suite("[4, 8]", "{name: a, op: attention, heads: 0}"),
        ("heads must be at least 1",),
        at(L, "m", "a", "heads"),
    ),
    Case(
        "unknown-parameter",
        suite("[8]", "{name: a, op: linear, out_featurs: 4}"),
        ("unknown parameter 'out_featurs'", "did you mean 'out_features'"),
        at(L, "m", "a", "out_featurs"),
    ),
    Case(
        "misspelt-layer-setting",
        suite("[8]", "{name: a, op: relu, tolerence: 0.1}"),
        ("unknown parameter 'tolerence'", "did you mean 'tolerance'"),
        at(L, "m", "a", "tolerence"),
    ),
    Case(
        "unknown-parameter-lists-choices",
        suite("[8]", "{name: a, op: softmax, axis: 1}"),
        ("unknown parameter 'axis'", "softmax takes: dim"),
        at(L, "m", "a", "axis"),
    ),
    Case(
        "zero-layer-input-dim",
        suite("[8]", "{name: a, op: relu, input: [3, 0]}"),
        ("at least 1",),
        at(L, "m", "a", "input"),
    ),
    # ---- impossible shapes -----------------------------------------------------------------
    Case(
        "conv-on-2d-input",
        suite("[8]", "{name: a, op: conv2d, out_channels: 4, kernel_size: 3}"),
        ("conv2d needs input [C, H, W]", "[2, 8]"),
        at(L, "m", "a"),
    ),
    Case(
        "kernel-larger-than-padded-input",
        suite("[3, 4, 4]", "{name: a, op: conv2d, out_channels: 4, kernel_size: 7, padding: 1}"),
        ("larger than the padded input 6x6",),
        at(L, "m", "a", "kernel_size"),
    ),
    Case(
        "dilated-kernel-larger-than-input",
        suite("[3, 5, 5]", "{name: a, op: conv2d, out_channels: 4, kernel_size: 3, dilation: 3}"),
        ("larger than the padded input",),
        at(L, "m", "a", "kernel_size"),
    ),
    Case(
        "groups-not-dividing-channels",
        suite("[6, 4, 4]", "{name: a, op: conv2d, out_channels: 4, kernel_size: 1, groups: 4}"),
        ("groups=4 must divide in_channels=6",),
        at(L, "m", "a", "groups"),
    ),
    Case(
        "zero-stride",
        suite("[3, 8, 8]", "{name: a, op: conv2d, out_channels: 4, kernel_size: 3, stride: 0}"),
        ("stride must be at least 1",),
        at(L, "m", "a", "stride"),
    ),
    Case(
        "pool-on-2d-input",
        suite("[8]", "{name: a, op: maxpool2d, kernel_size: 2}"),
        ("maxpool2d needs input [C, H, W]",),
        at(L, "m", "a"),
    ),
    Case(
        "pool-kernel-too-large",
        suite("[3, 4, 4]", "{name: a, op: avgpool2d, kernel_size: 5}"),
        ("larger than the padded input 4x4",),
        at(L, "m", "a", "kernel_size"),
    ),
    Case(
        "pool-padding-over-half",
        suite("[3, 4, 4]", "{name: a, op: maxpool2d, kernel_size: 2, padding: 2}"),
        ("at most half the kernel",),
        at(L, "m", "a", "padding"),
    ),
    Case(
        "pool-zero-stride",
        suite("[3, 4, 4]", "{name: a, op: maxpool2d, kernel_size: 2, stride: 0}"),
        ("stride must be at least 1",),
        at(L, "m", "a", "stride"),
    ),
    Case(
        "batchnorm-on-2d-input",
        suite("[8]", "{name: a, op: batchnorm2d}"),
        ("batchnorm2d needs input [C, H, W]",),
        at(L, "m", "a"),
    ),
    Case(
        "heads-not-dividing-e",
        suite("[5, 10]", "{name: a, op: attention, heads: 3}"),
        ("heads=3 does not divide the embedding size 10",),
        at(L, "m", "a", "heads"),
    ),
    Case(
        "packed-heads-not-dividing-e",
        suite("[5, 12]", "{name: a, op: attention, heads: 3, packed_qkv: true}"),
        ("heads=3 does not divide the embedding size 4",),
        at(L, "m", "a", "heads"),
    ),
    Case(
        "packed-not-divisible-by-3",
        suite("[5, 8]", "{name: a, op: attention, heads: 2, packed_qkv: true}"),
        ("divisible by 3",),
        at(L, "m", "a", "packed_qkv"),
    ),
    Case(
        "attention-on-1d-input",
        suite("[8]", "{name: a, op: attention, heads: 2}"),
        ("attention needs input [S, E]",),
        at(L, "m", "a"),
    ),
    Case(
        "not-a-permutation",
        suite("[3, 4]", "{name: a, op: permute, dims: [0, 1, 1]}"),
        ("not a permutation",),
        at(L, "m", "a", "dims"),
    ),
    Case(
        "permutation-too-short",
        suite("[3, 4]", "{name: a, op: permute, dims: [0, 2]}"),
        ("not a permutation",),
        at(L, "m", "a", "dims"),
    ),
    Case(
        "transpose-three-dims",
        suite("[3, 4]", "{name: a, op: transpose, dims: [0, 1, 2]}"),
        ("transpose takes two dims",),
        at(L, "m", "a", "dims"),
    ),
    Case(
        "transpose-dim-out-of-range",
        suite("[3, 4]", "{name: a, op: transpose, dims: [1, 3]}"),
        ("dim 3 is out of range for a 3-d tensor",),
        at(L, "m", "a", "dims"),
    ),
    Case(
        "softmax-dim-out-of-range",
        suite("[3, 4]", "{name: a, op: softmax, dim: 3}"),
        ("dim 3 is out of range for a 3-d tensor",),
        at(L, "m", "a", "dim"),
    ),
    Case(
        "softmax-negative-dim-out-of-range",
        suite("[3, 4]", "{name: a, op: softmax, dim: -4}"),
        ("dim -4 is out of range",),
        at(L, "m", "a", "dim"),
    ),
    Case(
        "flatten-start-dim-out-of-range",
        suite("[3, 4]", "{name: a, op: flatten, start_dim: 3}"),
        ("out of range",),
        at(L, "m", "a", "start_dim"),
    ),
    Case(
        "shape-error-deep-in-a-chain",
        suite(
            "[3, 8, 8]",
            "{name: c, op: conv2d, out_channels: 4, kernel_size: 3}",
            "{name: f, op: flatten}",
            "{name: bad_conv, op: conv2d, out_channels: 2, kernel_size: 1}",
        ),
        ("conv2d needs input [C, H, W]", "[2, 144]"),
        at(L + 2, "m", "bad_conv"),
    ),
    # ---- tolerance: above 0.1 only with allow_loose_tolerance on the layer -------------------
    Case(
        "loose-tolerance-without-allow",
        suite("[8]", "{name: a, op: relu}", "{name: b, op: gelu, tolerance: 0.2}"),
        ("tolerance 0.2 is above 0.1", "allow_loose_tolerance: true", "layer 'b'"),
        at(L + 1, "m", "b", "tolerance"),
    ),
    Case(
        "loose-tolerance-from-the-model",
        suite("[8]", "{name: a, op: relu}", model_extra="    tolerance: 0.25\n"),
        ("tolerance 0.25 is above 0.1", "layer 'a'"),
        at(L + 1, "m", "a", "tolerance"),
    ),
    Case(
        "allow-loose-tolerance-is-per-layer",
        "name: bad\ndefaults: {allow_loose_tolerance: true}\n"
        "models:\n  - {name: m, input: [4], layers: [{name: a, op: relu}]}\n",
        ("unknown field 'allow_loose_tolerance'",),
        at(2, field="allow_loose_tolerance"),
    ),
]


@pytest.fixture(params=CASES, ids=lambda case: case.id)
def case(request) -> Case:
    return request.param


def _write(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / f"{case.id}.yaml"
    path.write_text(case.text, encoding="utf-8")
    return path


def test_load_suite_reports_where(case: Case, tmp_path: Path) -> None:
    path = _write(tmp_path, case)
    with pytest.raises(InputError) as info:
        load_suite(path)
    err = info.value
    assert err.exit_code == ExitCode.BAD_INPUT
    text = str(err)
    for part in case.message:
        assert part in err.message, f"{part!r} not in {err.message!r}"
    loc, where = err.location, case.where
    assert loc.file == str(path)
    assert (loc.line, loc.model, loc.layer, loc.field) == (
        where.line,
        where.model,
        where.layer,
        where.field,
    )
    # The one line a user sees carries all of it.
    assert "\n" not in text
    assert text.startswith(f"{path}:{where.line}" if where.line else str(path))
    for label, value in (("model", where.model), ("layer", where.layer), ("field", where.field)):
        if value:
            assert f"{label} {value!r}" in text


def test_load_suite_text_names_the_given_file(case: Case) -> None:
    with pytest.raises(InputError) as info:
        load_suite_text(case.text, "given-name.yaml")
    assert info.value.location.file == "given-name.yaml"


@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_prints_one_line_and_exits_2(case: Case, command: str, tmp_path: Path) -> None:
    path = _write(tmp_path, case)
    out = tmp_path / "reports"
    args = [command, str(path)] + (
        ["--out", str(out), "--device", "cpu"] if command == "run" else []
    )
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}")
    assert case.message[0] in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert not out.exists(), "nothing may be written for a suite that does not load"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as info:
        load_suite(path)
    assert info.value.location.file == str(path)
    assert "no such suite file" in str(info.value)
    for command in ("validate", "run"):
        result = CliRunner().invoke(app, [command, str(path)])
        assert result.exit_code == 2
        assert result.stderr.strip() == f"error: {path}: no such suite file"


def test_a_folder_is_not_a_suite(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="folder"):
        load_suite(tmp_path)


def test_binary_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(InputError) as info:
        load_suite(path)
    assert info.value.location.file == str(path)


def test_merge_key_of_a_scalar_is_reported(tmp_path: Path) -> None:
    text = suite("[8]", "{<<: 3, name: a, op: relu}")
    with pytest.raises(InputError, match="merges a mapping") as info:
        load_suite_text(text, "f.yaml")
    assert info.value.location.line == L


def test_error_in_a_merged_layer_points_at_the_layer() -> None:
    text = suite(
        "[8]", "&fc {name: a, op: linear, out_features: 4}", "{<<: *fc, name: b, out_features: 0}"
    )
    with pytest.raises(InputError) as info:
        load_suite_text(text, "f.yaml")
    loc = info.value.location
    assert (loc.line, loc.layer, loc.field) == (L + 1, "b", "out_features")


# ---- every mistake at once -----------------------------------------------------------------

FOUR_MISTAKES = """name: four
defaults: {backends: [torch, cuda]}
models:
  - name: a
    input: [16]
    dtype: float8
    layers:
      - {name: fc, op: linear, out_features: 8}
  - name: b
    input: [16]
    layers:
      - {name: fc, op: lineer, out_features: 8}
      - {name: act, op: relu, slope: 2}
      - {name: fc2, op: linear, input: [3, 4], out_features: 0}
"""

FOUR_WHERE = [
    (2, None, None, "backends", "unknown backend 'cuda'"),
    (6, "a", None, "dtype", "float8"),
    (12, "b", "fc", "op", "unknown op 'lineer'"),
    (13, "b", "act", "slope", "unknown parameter 'slope'"),
    (14, "b", "fc2", "out_features", "out_features"),
]


def test_every_mistake_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "four.yaml"
    path.write_text(FOUR_MISTAKES)
    with pytest.raises(SuiteErrors) as info:
        load_suite(path)
    found = [
        (e.location.line, e.location.model, e.location.layer, e.location.field, e.message)
        for e in info.value.errors
    ]
    assert [f[:4] for f in found] == [w[:4] for w in FOUR_WHERE]
    for (*_, message), (*_, part) in zip(found, FOUR_WHERE, strict=True):
        assert part in message
    for command in ("validate", "run"):
        args = [command, str(path)] + (
            ["--device", "cpu", "--out", str(tmp_path)] if command == "run" else []
        )
        result = CliRunner().invoke(app, args)
        assert result.exit_code == ExitCode.BAD_INPUT, result.output
        lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(lines) == len(FOUR_WHERE), result.stderr
        for line, (number, model, layer, field, part) in zip(lines, FOUR_WHERE, strict=True):
            assert line.startswith(f"error: {path}:{number}:")
            assert f"field {field!r}" in line and part in line
            assert (model is None) or f"model {model!r}" in line
            assert (layer is None) or f"layer {layer!r}" in line
        assert "Traceback" not in result.output


def test_shapes_are_checked_again_after_a_broken_layer() -> None:
    # the conv's unknown parameter hides its output shape; the layer with its own input after
    # it is checked again, and its own mistake is reported too
    text = suite(
        "[3, 8, 8]",
        "{name: c, op: conv2d, out_channels: 4, kernel_size: 3, strid: 2}",
        "{name: r, op: relu}",
        "{name: f, op: linear, input: [5], out_features: 0}",
    )
    with pytest.raises(SuiteErrors) as info:
        load_suite_text(text, "f.yaml")
    assert [(e.location.layer, e.location.field) for e in info.value.errors] == [
        ("c", "strid"),
        ("f", "out_features"),
    ]


def test_validate_accepts_several_files(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(suite("[8]", "{name: a, op: relu}"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(suite("[8]", "{name: a, op: relu, slope: 1}"))
    result = CliRunner().invoke(app, ["validate", str(good), str(bad), str(tmp_path / "nope.yaml")])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert f"{good} is valid" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors[0].startswith(f"error: {bad}:{L}:") and "slope" in errors[0]
    assert errors[1] == f"error: {tmp_path / 'nope.yaml'}: no such suite file"
    assert "2 problem(s) in 2 of 3 file(s)" in result.stderr
    both_good = CliRunner().invoke(app, ["validate", str(good), str(good)])
    assert both_good.exit_code == 0 and both_good.stdout.count("is valid") == 2


def test_version() -> None:
    from opbench import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"opbench {__version__}"
