"""A model's data from its ONNX file (`opbench run model.onnx`): the file's weights and
constants instead of seeded ones, and ONNX Runtime's output as the whole model's reference.

Layers are still checked one by one against float64 on seeded inputs, as in any run (their
weights are the file's). The whole model (pipeline/end_to_end.py checks every backend's forward
against `model_reference`) is checked against what ONNX Runtime computes from the file on the
same input: the seeded model input, moved to the file's layout. ONNX Runtime computes in
float32; for a float16/bfloat16 run the reference stays the float64 model rounded as the run
rounds (a correct half-precision model is not within its tolerance of a float32 one), and
the kind says how far ONNX Runtime's output is from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbench.importers.onnx.file_data import FileData, ort_outputs
from opbench.importers.onnx.model import Imported
from opbench.ops.registry import get_op
from opbench.pipeline.data import ModelData
from opbench.spec.model import ModelSpec, SuiteSpec


class FileModelData(ModelData):
    def __init__(
        self, suite: SuiteSpec, model: ModelSpec, device: str, imported: Imported, path: str
    ) -> None:
        super().__init__(suite, model, device)
        self.imported = imported
        self.path = path
        self.file = FileData(imported, imported.read)
        self._mine = {layer.name: layer for layer in imported.layers}
        self._constants = {i.name: i for i in imported.inputs if i.constant is not None}

    def weights(self, index: int) -> dict[str, Any]:
        if index not in self._weights:
            import torch

            layer = self.model.layers[index]
            op = get_op(layer.op)
            shapes = op.weight_shapes(op.shape_arg(layer.input_shapes), layer.params)
            arrays = self.file.layer_weights(self._mine[layer.name], shapes)
            self._weights[index] = {
                k: torch.from_numpy(v).to(self.device) for k, v in arrays.items()
            }
        return self._weights[index]

    def value(self, name: str, dtype: str, check: str | None = None):
        item = self._constants.get(name)
        if item is None or check is not None:  # a check's second draw stays random data
            return super().value(name, dtype, check)
        key = (name, dtype)
        if key not in self._values:
            import torch

            from opbench.backends.base import torch_dtype

            array = self.file.constant_input(item)
            self._values[key] = torch.from_numpy(array).to(self.device, torch_dtype(dtype))
        return self._values[key]

    def model_reference(self):
        if self._model_ref is not None:
            return self._model_ref
        ours, kind = super().model_reference()
        if self.imported.static_batch and self.imported.file_batch != self.model.batch:
            self._model_ref = (ours, f"{kind} (ONNX Runtime not run: the file's batch is fixed at "
                                     f"{self.imported.file_batch})")  # fmt: skip
            return self._model_ref
        theirs = self.ort_reference()
        if all(layer.dtype == "float32" for layer in self.model.layers):
            # (an output the file does not export, a layer other layers also read, keeps ours)
            self._model_ref = ({**ours, **theirs}, "onnxruntime-cpu-float32")
            return self._model_ref
        gap = max(_rel_l2(ours[i], theirs[i]) for i in theirs)
        self._model_ref = (ours, f"{kind} (ONNX Runtime's float32 output within {gap:.1e} of it)")
        return self._model_ref

    def ort_reference(self) -> dict[int, Any]:
        """ONNX Runtime's outputs of the file on the seeded model inputs, by layer index."""
        import numpy as np
        import torch

        inputs = {name: x.detach().float().cpu().numpy() for name, x in self.model_inputs().items()}
        outs = ort_outputs(self.path, self.file.feeds(inputs), self.imported.outputs)
        graph = self.graph
        return {
            graph.index(layer): torch.from_numpy(np.ascontiguousarray(out)).double()
            for layer, out in outs.items()
        }


def _rel_l2(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def file_model_data(imported: Imported, path: str) -> Callable[..., ModelData]:
    """RunOptions.model_data for an imported file."""

    def make(suite: SuiteSpec, model: ModelSpec, device: str) -> ModelData:
        return FileModelData(suite, model, device, imported, path)

    return make
