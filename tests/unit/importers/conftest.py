"""The Hugging Face exports of issue 41 (tests/data/hf_models.py), made once per test session
into a temporary folder (seeded: every session makes the same files)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).parents[2] / "data" / "hf_models.py"


def hf_models_module():
    """tests/data/hf_models.py as a module (tests/data is not a package)."""
    name = "opbench_test_hf_models"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class HFExports:
    """NAME.onnx files, each exported on first use and kept for the session."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __getitem__(self, name: str) -> Path:
        path = self.folder / f"{name}.onnx"
        if not path.exists():
            started = time.perf_counter()
            hf_models_module().export(name, self.folder)
            print(f"exported {name} in {time.perf_counter() - started:.1f} s")
        return path


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory) -> HFExports:
    pytest.importorskip("onnxscript")
    pytest.importorskip("transformers")
    return HFExports(tmp_path_factory.mktemp("hf_models"))
