"""Ops the 38-architecture zoo of issue 52 lacked, each imported from the ONNX form a user's
export writes, run on torch with the whole output checked against ONNX Runtime, and exported
back: MaxPool with ceil_mode (SqueezeNet, GoogLeNet)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
nn = torch.nn

from tests.unit.importers.onnx_checks import imported_layers, round_trips, run_checked  # noqa: E402


def _export(module: nn.Module, shape: tuple[int, ...], path: Path) -> Path:
    """The legacy exporter (fast); the node forms are the same as the dynamo one's here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(shape),), str(path), dynamo=False)
    return path


def test_a_ceil_mode_max_pool_imports_and_runs(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(3, 2, ceil_mode=True))
    path = _export(model, (2, 3, 12, 12), tmp_path / "pool.onnx")
    pool = next(layer for layer in imported_layers(path).values() if layer.op == "maxpool2d")
    assert pool.params == {"kernel_size": [3, 3], "stride": [2, 2], "ceil_mode": True}
    assert pool.output_shape == (2, 4, 5, 5)  # floor mode: 4 x 4
    run_checked(path, tmp_path)


def test_a_ceil_mode_max_pool_round_trips(tmp_path: Path) -> None:
    params = {"kernel_size": [3, 3], "stride": [2, 2], "ceil_mode": True}
    round_trips(tmp_path, "maxpool2d", [3, 8, 11], params)
