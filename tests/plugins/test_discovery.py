"""Discovery: --plugin with a file, a package folder and a module; a suite's `plugins:`;
installed entry points; `opbench list` naming where each backend and op came from."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from plugin_helpers import CLAMP_BACKEND, invoke, suite_text, write

from opbench import vocabulary
from opbench.results.io import read_run
from opbench.results.model import Status

# A new op and a backend for it, in one module.
CUBE_PLUGIN = """
    from opbench.api import Backend, Op, Param


    class Cube(Op):
        name = "cube"
        summary = "x**3 times a scale"
        params = (Param("scale", "float", 1.0),)

        def flops(self, input_shape, output_shape, params):
            n = 1
            for d in output_shape:
                n *= d
            return 3 * n

        def forward(self, x, weights, layer):
            return x * x * x * layer.params["scale"]


    class CubeBackend(Backend):
        name = "cube-kernels"

        def supports(self, layer):
            return None if layer.op == "cube" else "cube only"

        def build(self, layer, weights, device):
            scale = layer.params["scale"]
            return lambda x: x.pow(3).mul(scale)
"""

CUBE_SUITE = """
    name: cubes
    models:
      - name: m
        input: [16]
        backends: [torch, cube-kernels]
        layers:
          - {name: c, op: cube, scale: 0.5}
"""


def run_json(out: Path, suite: str):
    return read_run(out / suite / "latest" / "run.json")


def test_plugin_file_backend_runs_beside_torch_and_triton(tmp_path: Path) -> None:
    plugin = write(tmp_path / "clamp.py", CLAMP_BACKEND)
    suite = write(tmp_path / "s.yaml", suite_text())
    done = invoke("run", suite, "--plugin", plugin, "--device", "cpu", "--quick", "--out", tmp_path)
    assert done.exit_code == 0, done.output
    run = run_json(tmp_path, "plug")
    by = {(r.layer, r.backend): r for r in run.layers}
    assert by[("act", "clamp")].status == Status.OK and by[("act", "clamp")].correctness.passed
    assert by[("act", "torch")].status == Status.OK and by[("act", "triton")].status == Status.OK
    assert by[("soft", "clamp")].status == Status.UNSUPPORTED
    assert by[("soft", "clamp")].message == "clamp runs relu only, not softmax"
    assert "clamp" in done.stdout
    sha = hashlib.sha256(plugin.read_bytes()).hexdigest()
    assert run.env["plugins"] == [{"path": str(plugin.resolve()), "sha256": sha}]


def test_a_run_without_plugins_records_an_empty_list(tmp_path: Path) -> None:
    suite = write(tmp_path / "s.yaml", suite_text("[torch]"))
    done = invoke("run", suite, "--device", "cpu", "--quick", "--out", tmp_path, "-l", "act")
    assert done.exit_code == 0, done.output
    assert run_json(tmp_path, "plug").env["plugins"] == []


def test_unknown_backend_without_its_plugin_is_bad_input(tmp_path: Path) -> None:
    suite = write(tmp_path / "s.yaml", suite_text())
    done = invoke("validate", suite)
    assert done.exit_code == 2
    assert "unknown backend 'clamp'" in done.output


def test_suite_plugins_field_loads_a_file_relative_to_the_suite(tmp_path: Path) -> None:
    write(tmp_path / "kernels" / "clamp.py", CLAMP_BACKEND)
    suite = write(tmp_path / "s.yaml", suite_text(plugins="plugins: [kernels/clamp.py]"))
    done = invoke("validate", suite)
    assert done.exit_code == 0, done.output
    assert "clamp" in done.stdout and "is valid" in done.stdout


def test_plugin_module_adds_an_op_and_its_backend(tmp_path: Path, monkeypatch) -> None:
    write(tmp_path / "mods" / "cubeplug" / "__init__.py", CUBE_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    suite = write(tmp_path / "cubes.yaml", CUBE_SUITE)
    done = invoke(
        "run", suite, "--plugin", "cubeplug", "--device", "cpu", "--quick", "--out", tmp_path
    )
    assert done.exit_code == 0, done.output
    run = run_json(tmp_path, "cubes")
    assert {r.backend: r.status for r in run.layers} == {
        "torch": Status.OK,
        "cube-kernels": Status.OK,
    }
    assert all(r.correctness.passed and r.flops == 3 * 16 for r in run.layers)
    (record,) = run.env["plugins"]
    assert record["path"] == str(tmp_path / "mods" / "cubeplug") and len(record["sha256"]) == 64
    sys.modules.pop("cubeplug", None)


def test_plugin_package_folder_by_path(tmp_path: Path) -> None:
    write(tmp_path / "cubeplug" / "__init__.py", CUBE_PLUGIN)
    suite = write(tmp_path / "cubes.yaml", CUBE_SUITE)
    done = invoke("validate", suite, "--plugin", tmp_path / "cubeplug")
    assert done.exit_code == 0, done.output
    assert "cube" in done.stdout


def test_list_shows_where_each_backend_and_op_came_from(tmp_path: Path) -> None:
    plugin = write(tmp_path / "cube.py", CUBE_PLUGIN)
    done = invoke("list", "backends", "--plugin", plugin)
    assert done.exit_code == 0, done.output
    rows = table_rows(done.stdout)
    assert "built-in" in rows["torch"] and "built-in" in rows["triton"]
    assert str(plugin.resolve()) in rows["cube-kernels"] and "available" in rows["cube-kernels"]
    done = invoke("list", "ops", "--plugin", plugin)
    assert done.exit_code == 0, done.output
    rows = table_rows(done.stdout)
    assert "built-in" in rows["linear"]
    assert str(plugin.resolve()) in rows["cube"] and "scale=1.0" in rows["cube"]


def table_rows(text: str) -> dict[str, str]:
    """A rich table's rows by first cell; a cell folded over several lines is joined back,
    and the row's cells are separated by " | "."""
    rows: dict[str, list[str]] = {}
    key = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if not cells:
            continue
        key = cells[0] or key
        joined = rows.setdefault(key, [""] * len(cells))
        rows[key] = [a + b for a, b in zip(joined, cells, strict=True)]
    return {k: " | ".join(v) for k, v in rows.items()}


def _fake_distribution(site: Path, module: str, entry_points: str, name="cubedist") -> None:
    """An installed distribution as importlib.metadata sees one: a dist-info folder."""
    info = site / f"{name}-2.5.dist-info"
    write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 2.5\n")
    write(info / "entry_points.txt", entry_points)
    write(info / "top_level.txt", module + "\n")
    write(info / "RECORD", f"{module}/__init__.py,,\n")


def test_entry_points_register_installed_backends_and_ops(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    write(site / "cubepkg" / "__init__.py", CUBE_PLUGIN)
    _fake_distribution(
        site,
        "cubepkg",
        """
        [opbench.backends]
        cube = cubepkg:CubeBackend

        [opbench.ops]
        cube = cubepkg:Cube
        """,
    )
    monkeypatch.syspath_prepend(str(site))
    suite = write(tmp_path / "cubes.yaml", CUBE_SUITE)
    done = invoke("run", suite, "--device", "cpu", "--quick", "--out", tmp_path)
    assert done.exit_code == 0, done.output
    run = run_json(tmp_path, "cubes")
    assert [r.status for r in run.layers] == [Status.OK, Status.OK]
    assert run.env["plugins"] == [{"name": "cubedist", "version": "2.5"}]
    assert vocabulary.backend_origin("cube-kernels") == "cubedist 2.5"
    assert vocabulary.op_origin("cube") == "cubedist 2.5"
    sys.modules.pop("cubepkg", None)


@pytest.mark.parametrize("command", ["run", "compare", "validate", "list"])
def test_every_command_takes_plugin(command: str) -> None:
    done = invoke(command, "--help")
    assert done.exit_code == 0
    assert "--plugin" in done.stdout
