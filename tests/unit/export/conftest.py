"""The ONNX exports of issue 27 (tests/data/onnx_models.py), made once per test session into a
temporary folder: they are too large to keep in the repository, and seeded, so every session
makes the same files."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).parents[2] / "data" / "onnx_models.py"


def script_module(filename: str = "onnx_models.py"):
    """A script of tests/data as a module (tests/data is not a package)."""
    name = f"opbench_test_{Path(filename).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _SCRIPT.parent / filename)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def onnx_models_module():
    """tests/data/onnx_models.py as a module."""
    return script_module("onnx_models.py")


class ExportedModels:
    """NAME.onnx files of a tests/data script, each written on first use and kept for the
    session."""

    def __init__(self, folder: Path, script: str = "onnx_models.py") -> None:
        self.folder = folder
        self.script = script
        self.seconds: dict[str, float] = {}

    def __getitem__(self, name: str) -> Path:
        path = self.folder / f"{name}.onnx"
        if not path.exists():
            started = time.perf_counter()
            script_module(self.script).export(name, self.folder)
            self.seconds[name] = time.perf_counter() - started
            print(f"exported {name} in {self.seconds[name]:.1f} s")
        return path


@pytest.fixture(scope="session")
def onnx_models(tmp_path_factory) -> ExportedModels:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    return ExportedModels(tmp_path_factory.mktemp("onnx_models"))
