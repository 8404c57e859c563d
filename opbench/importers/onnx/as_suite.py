"""An ONNX file as the suite of `opbench run model.onnx`: imported, written as suite text,
loaded like any suite (so it is validated the same way), with the run's batch and dtype."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from opbench.errors import InputError
from opbench.importers.onnx import import_onnx
from opbench.importers.onnx.model import Imported
from opbench.importers.onnx.suite_yaml import check_shapes, portable_name, suite_text


def onnx_suite(
    path: Path,
    *,
    batch: int | None = None,
    dtype: str = "float32",
    backends: Sequence[str] = (),
    dims: Mapping[str, int] | None = None,
):
    """(SuiteSpec, Imported) of the file; unsupported nodes are bad input (exit 2), as in
    `suite from-onnx` without --skip-unsupported (a run cannot measure them)."""
    from opbench.spec.load import load_suite

    imported: Imported = import_onnx(path, batch=batch, dims=dims or {})
    if imported.unsupported:
        kinds = ", ".join(f"{op} ×{n}" for op, n, _ in imported.unsupported_by_type())
        raise InputError(
            f"{path}: {len(imported.unsupported)} node(s) opbench has no op for ({kinds}): "
            f"`opbench suite from-onnx {path.name} --out suite.yaml` lists them"
        )
    if batch is not None:
        imported.batch = batch
    name = portable_name(path.stem, "onnx_model")
    text = suite_text(imported, name, name, path.name, dtype)
    if backends:
        data = yaml.safe_load(text)
        data["defaults"]["backends"] = list(backends)
        text = yaml.safe_dump(data, sort_keys=False)
    with tempfile.TemporaryDirectory(prefix="opbench-onnx-") as folder:
        suite_path = Path(folder) / f"{name}.yaml"
        suite_path.write_text(text, encoding="utf-8")
        suite = replace(load_suite(suite_path), source=str(path))
    check_shapes(imported, suite)
    return suite, imported
