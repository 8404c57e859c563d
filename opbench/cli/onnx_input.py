"""An ONNX model wherever a suite is accepted: `validate`, `export onnx|sas` and `reference
onnxruntime` take MODEL.onnx as `opbench run` does, imported as its own suite (docs/onnx.md)."""

from __future__ import annotations

from pathlib import Path

from opbench.errors import InputError
from opbench.spec.model import SuiteSpec


def require_onnx(*modules: str) -> None:
    """InputError naming the first module that is missing."""
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            raise InputError(f"{module} is not installed: pip install 'opbench[onnx]'") from None


def is_onnx(path: Path) -> bool:
    return path.suffix.lower() == ".onnx"


def suite_or_onnx(path: Path, batch: int | None = None) -> SuiteSpec:
    """The suite of a YAML file, or of an ONNX model as `opbench run MODEL.onnx` imports it
    (unsupported nodes are bad input, listed by op type)."""
    if not is_onnx(path):
        from opbench.spec.load import load_suite

        return load_suite(path)
    require_onnx("onnx", "onnxscript")
    from opbench.importers.onnx.as_suite import onnx_suite

    return onnx_suite(path, batch=batch)[0]
