"""The ONNX exports of issue 27 (tests/data/onnx_models.py), made once per test session into a
temporary folder: they are too large to keep in the repository, and seeded, so every session
makes the same files. Under pytest-xdist the workers of one session share that folder, each
file written once, under a lock."""

from __future__ import annotations

import fcntl
import importlib.util
import os
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
        # Another worker may be writing the file: its lock is held until the file is whole.
        with open(self.folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                started = time.perf_counter()
                script_module(self.script).export(name, self.folder)
                self.seconds[name] = time.perf_counter() - started
                print(f"exported {name} in {self.seconds[name]:.1f} s")
        return path


def session_folder(tmp_path_factory, name: str) -> Path:
    """A folder for this test session: one for all its pytest-xdist workers (the parent of a
    worker's base temporary folder is the session's, xdist's own recipe), else a fresh one."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return tmp_path_factory.mktemp(name)
    folder = tmp_path_factory.getbasetemp().parent / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def onnx_models(tmp_path_factory) -> ExportedModels:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    return ExportedModels(session_folder(tmp_path_factory, "onnx_models"))
