"""Failures stay contained: a plugin that cannot load is one line and exit 2 naming it; one
that misbehaves on a layer makes that layer's result `error` with the reason, and the run and
every other backend's results go on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from plugin_helpers import CLAMP_BACKEND, invoke, suite_text, write

from opbench import vocabulary
from opbench.errors import InputError
from opbench.results.io import read_run
from opbench.results.model import Status
from opbench.spec.load import load_suite_text


def one_line_error(done, exit_code: int = 2) -> str:
    assert done.exit_code == exit_code, done.output
    assert "Traceback" not in done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1, done.output
    return lines[0]


@pytest.mark.parametrize("command", ["run", "validate", "list", "compare"])
def test_a_plugin_that_fails_to_import_exits_2_naming_it(tmp_path: Path, command: str) -> None:
    plugin = write(tmp_path / "broken.py", "import numpy\nimport not_a_module_xyz\n")
    suite = write(tmp_path / "s.yaml", suite_text("[torch]"))
    first = {"run": suite, "validate": suite, "list": "backends", "compare": tmp_path}[command]
    line = one_line_error(invoke(command, first, "--plugin", plugin))
    assert line == (
        f"error: plugin '{plugin}' failed to import: "
        "ModuleNotFoundError: No module named 'not_a_module_xyz'"
    )


def test_a_plugin_with_a_syntax_error_says_where(tmp_path: Path) -> None:
    plugin = write(tmp_path / "typo.py", "x = 1\ndef f(:\n    pass\n")
    line = one_line_error(invoke("validate", tmp_path / "none.yaml", "--plugin", plugin))
    assert "failed to import: SyntaxError: " in line and line.endswith(f"({plugin}:2)")


def test_a_plugin_that_raises_at_import_names_the_errors_last_line(tmp_path: Path) -> None:
    plugin = write(
        tmp_path / "raises.py", "def f():\n    raise ValueError('bad config\\nsecond')\nf()\n"
    )
    line = one_line_error(invoke("list", "ops", "--plugin", plugin))
    assert line.endswith("failed to import: ValueError: bad config")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_plugin_mod", "plugin 'no_such_plugin_mod' failed to import: ModuleNotFoundError"),
        ("missing/kernels.py", "plugin 'missing/kernels.py': no such file"),
    ],
)
def test_a_plugin_that_is_not_there_exits_2(spec: str, message: str) -> None:
    assert message in one_line_error(invoke("list", "backends", "--plugin", spec))


def test_a_plugin_that_defines_nothing_exits_2(tmp_path: Path) -> None:
    plugin = write(tmp_path / "empty.py", "from opbench.api import Backend\nX = 1\n")
    line = one_line_error(invoke("list", "backends", "--plugin", plugin))
    assert "defines no subclass of opbench.api.Backend or opbench.api.Op" in line


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            CLAMP_BACKEND.replace('name = "clamp"', 'name = "triton"'),
            "backend 'triton' from {path} would shadow the built-in backend",
        ),
        (
            "from opbench.api import Op\nclass MyRelu(Op):\n    name = 'relu'\n",
            "op 'relu' from {path} would shadow the built-in op",
        ),
        (
            CLAMP_BACKEND.replace('name = "clamp"', 'name = "bad name"'),
            "backend name 'bad name' is not a valid name (letters, digits, _ . -)",
        ),
    ],
)
def test_a_plugin_may_not_shadow_a_builtin(tmp_path: Path, source: str, message: str) -> None:
    plugin = write(tmp_path / "shadow.py", source)
    line = one_line_error(invoke("list", "backends", "--plugin", plugin))
    assert line == "error: " + message.format(path=plugin.resolve())


def test_two_plugins_may_not_take_the_same_name(tmp_path: Path) -> None:
    first = write(tmp_path / "a.py", CLAMP_BACKEND)
    second = write(tmp_path / "b.py", CLAMP_BACKEND)
    line = one_line_error(invoke("list", "backends", "--plugin", first, "--plugin", second))
    assert line == (
        f"error: backend 'clamp' from {second.resolve()} is already registered by {first.resolve()}"
    )


def test_the_same_plugin_named_twice_loads_once(tmp_path: Path) -> None:
    plugin = write(tmp_path / "clamp.py", CLAMP_BACKEND)
    suite = write(tmp_path / "s.yaml", suite_text(plugins="plugins: [clamp.py]"))
    done = invoke("validate", suite, "--plugin", plugin)
    assert done.exit_code == 0, done.output


def test_an_entry_point_that_names_something_else_exits_2(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    write(site / "notplug" / "__init__.py", "class Thing:\n    name = 'thing'\n")
    info = site / "notplug-1.0.dist-info"
    write(info / "METADATA", "Metadata-Version: 2.1\nName: notplug\nVersion: 1.0\n")
    write(info / "entry_points.txt", "[opbench.backends]\nthing = notplug:Thing\n")
    monkeypatch.syspath_prepend(str(site))
    line = one_line_error(invoke("list", "backends"))
    assert line.startswith("error: plugin notplug 1.0 (entry point thing = notplug:Thing)")
    assert "name a subclass of opbench.api.Backend" in line
    sys.modules.pop("notplug", None)


def test_an_entry_point_that_fails_to_import_exits_2(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    write(site / "brokenplug" / "__init__.py", "raise RuntimeError('needs CUDA 13')\n")
    info = site / "brokenplug-0.3.dist-info"
    write(info / "METADATA", "Metadata-Version: 2.1\nName: brokenplug\nVersion: 0.3\n")
    write(info / "entry_points.txt", "[opbench.ops]\nx = brokenplug:X\n")
    monkeypatch.syspath_prepend(str(site))
    line = one_line_error(invoke("list", "ops"))
    assert line == (
        "error: plugin brokenplug 0.3 (entry point x = brokenplug:X) failed to import: "
        "RuntimeError: needs CUDA 13"
    )


BAD_OP = """
    from opbench.api import Op

    class Halve(Op):
        name = "halve"

        def output_shape(self, input_shape, params):
            return (*input_shape[:-1], input_shape[-1] // 0)
"""


def test_an_op_whose_shape_function_raises_fails_validation_naming_the_layer(
    tmp_path: Path,
) -> None:
    plugin = write(tmp_path / "halve.py", BAD_OP)
    suite = write(
        tmp_path / "s.yaml",
        "name: s\nmodels:\n  - name: m\n    input: [8]\n    layers:\n      - {name: h, op: halve}\n",
    )
    line = one_line_error(invoke("validate", suite, "--plugin", plugin))
    assert f"{suite}:6" in line and "model 'm', layer 'h'" in line
    assert (
        "op 'halve': output_shape raised ZeroDivisionError: integer division or modulo by zero"
        in line
    )


def test_a_suite_naming_plugins_needs_a_command_that_loads_them() -> None:
    saved = vocabulary.snapshot()
    vocabulary.set_plugin_loader(None)
    try:
        with pytest.raises(InputError, match="this command does not load plugins"):
            load_suite_text(
                "name: s\nplugins: [k.py]\nmodels:\n  - name: m\n    input: [8]\n"
                "    layers:\n      - {name: a, op: relu}\n",
                "s.yaml",
            )
    finally:
        vocabulary.restore(saved)


# Backends for relu that each go wrong in their own way.
MISBEHAVING = """
    import torch
    from opbench.api import Backend


    class Raises(Backend):
        name = "raises"

        def build(self, layer, weights, device):
            raise RuntimeError("kernel did not compile")


    class WrongShape(Backend):
        name = "wrong-shape"

        def build(self, layer, weights, device):
            return lambda x: x.reshape(-1)


    class WrongDtype(Backend):
        name = "wrong-dtype"

        def build(self, layer, weights, device):
            return lambda x: torch.relu(x).double()


    class WrongDevice(Backend):
        name = "wrong-device"

        def build(self, layer, weights, device):
            return lambda x: torch.empty(x.shape, dtype=x.dtype, device="meta")


    class NotATensor(Backend):
        name = "not-a-tensor"

        def build(self, layer, weights, device):
            return lambda x: [torch.relu(x)]


    class NotCallable(Backend):
        name = "not-callable"

        def build(self, layer, weights, device):
            return 42


    class BrokenInit(Backend):
        name = "broken-init"

        def __init__(self):
            raise OSError("no license file")

        def build(self, layer, weights, device):
            raise AssertionError("never built")
"""

EXPECTED = {
    "raises": "build failed: RuntimeError: kernel did not compile",
    "wrong-shape": "wrong output: shape [256], expected [1, 8, 32]",
    "wrong-dtype": "wrong output: dtype float64, expected float32",
    "wrong-device": "wrong output: on device meta, expected cpu",
    "not-a-tensor": "wrong output: returned list, not a tensor",
    "not-callable": "build failed: TypeError: backend 'not-callable': build() returned int, "
    "not a callable or opbench.api.Built",
}


def test_misbehaving_backends_give_error_results_and_the_run_goes_on(tmp_path: Path) -> None:
    plugin = write(tmp_path / "misbehave.py", MISBEHAVING)
    names = ", ".join(["torch", *EXPECTED, "broken-init", "triton"])
    suite = write(tmp_path / "s.yaml", suite_text(f"[{names}]"))
    done = invoke(
        "run",
        suite,
        "--plugin",
        plugin,
        "--device",
        "cpu",
        "--quick",
        "--out",
        tmp_path,
        "-l",
        "act",
    )
    assert done.exit_code == 3, done.output
    assert "errored or failed correctness" in done.output
    run = read_run(tmp_path / "plug" / "latest" / "run.json")
    assert run.complete
    by = {r.backend: r for r in run.layers}
    for backend, message in EXPECTED.items():
        assert by[backend].status == Status.ERROR, backend
        assert by[backend].message == message
    assert by["broken-init"].status == Status.UNSUPPORTED
    assert (
        by["broken-init"].message == "plugin backend 'broken-init' failed: OSError: no license file"
    )
    for backend in ("torch", "triton"):
        assert by[backend].status == Status.OK and by[backend].correctness.passed
