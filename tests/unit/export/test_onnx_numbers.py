"""An imported suite computes what the ONNX file computes: the layers' float64 references, run
through the suite's graph with the file's own weights and constants, give ONNX Runtime's
output on the same input. This checks every part of the import at once (ops and parameters,
the views and where the batch is, attention's head split and mask, constants as inputs, the
weights' layouts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import onnx_models_module
from test_onnx_models import EXPECTED

from opbench.importers.onnx import import_onnx
from opbench.importers.onnx.file_data import FileData, ort_outputs
from opbench.importers.onnx.suite_yaml import suite_text, write_suite
from opbench.ops.registry import get_op

try:
    onnx_models_module()._import_torchvision()
except ImportError:
    pytest.skip("the vision models need torchvision (the test extras)", allow_module_level=True)


def reference_outputs(model, imported, data: FileData, inputs: dict) -> dict:
    """Each layer's float64 reference, in walk order, on its producers' outputs."""
    values = {k: torch.from_numpy(v).double() for k, v in inputs.items()}
    mine = {layer.name: layer for layer in imported.layers}
    for layer in model.layers:
        op = get_op(layer.op)
        shapes = op.weight_shapes(op.shape_arg(layer.input_shapes), layer.params)
        weights = {
            k: torch.from_numpy(v).double()
            for k, v in data.layer_weights(mine[layer.name], shapes).items()
        }
        xs = [values[name] for name in layer.inputs]
        values[layer.name] = op.reference(op.input_arg(xs), weights, layer)
    return values


# A float64 reference against ONNX Runtime in float32: the difference is float32 rounding,
# carried through the model.
LIMIT = 1e-4


@pytest.mark.parametrize(
    "name",
    ["encoder_seq_first", "encoder_batch_first", "mobilenet_v2", "resnet50", "vit_b_16",
     "resnet50_legacy", "llama_block", "llama_block_opset23", "llama_block_legacy"],
)  # fmt: skip
def test_the_suite_computes_the_files_output(name: str, onnx_models, tmp_path: Path):
    assert name in EXPECTED
    path = onnx_models[name]
    imported = import_onnx(path)
    suite = write_suite(
        imported, tmp_path / "s.yaml", suite_text(imported, "s", "m", name, "float32")
    )
    (model,) = suite.models
    data = FileData(imported, imported.read)
    rng = np.random.default_rng(3)
    inputs = {}
    for item in imported.inputs:
        if item.constant is not None:
            inputs[item.name] = data.constant_input(item)
        else:
            inputs[item.name] = rng.standard_normal(item.shape).astype(np.float32)
    expected = ort_outputs(str(path), data.feeds(inputs), imported.outputs)
    got = reference_outputs(model, imported, data, inputs)
    for layer, want in expected.items():
        out = got[layer].float().numpy()
        assert out.shape == want.shape, (layer, out.shape, want.shape)
        rel = np.linalg.norm(out - want) / np.linalg.norm(want)
        print(f"{name}: output of {layer}: relative L2 {rel:.2e}")
        assert rel < LIMIT, (name, layer, rel)
