"""The Hugging Face exports of issue 41 (tests/data/hf_models.py), made once per test session
into a temporary folder (seeded: every session makes the same files), with the same machinery
as the torchvision exports (tests/unit/export/conftest.py, loaded by path: both are named
`conftest`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_EXPORT_CONFTEST = Path(__file__).parents[1] / "export" / "conftest.py"


def _exports_machinery():
    name = "opbench_test_export_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _EXPORT_CONFTEST)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory):
    pytest.importorskip("onnxscript")
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf_models")
    return _exports_machinery().ExportedModels(folder, "hf_models.py")
