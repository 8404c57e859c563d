"""The file's own numbers, for `opbench run model.onnx`: weights, constant inputs, and what
ONNX Runtime computes from the same input.

Suite layers hold their tensors batch first; the ONNX graph holds them where the exporter put
them. `to_onnx` / `from_onnx` move a model input or output between the two (the batch dim
moved, nothing else: `Imported.inputs` and `.outputs` record where it is).

numpy and onnxruntime only (no torch): the pipeline turns the arrays into tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from opbench.importers.onnx.model import Imported, Layer, ModelInput, Output

ABSENT = -1  # views.ABSENT: a batch of 1 with no dim of its own


def canonical_constant(array: np.ndarray, rank: int, pos: int) -> np.ndarray:
    """A constant operand (as ONNX broadcasts it against a tensor of `rank` dims whose batch
    is dim `pos`) as the suite holds it: batch first, size 1 there. ValueError if the constant
    differs along the batch."""
    array = np.asarray(array)
    array = array.reshape((1,) * (rank - array.ndim) + array.shape)
    if pos == ABSENT:
        return array[None]
    if array.shape[pos] != 1:
        first = np.take(array, [0], axis=pos)
        if not np.array_equal(np.broadcast_to(first, array.shape), array):
            raise ValueError("a constant operand that differs along the batch")
        array = first
    return np.moveaxis(array, pos, 0)


def to_onnx(x: np.ndarray, batch_axis: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """A batch-first array in the ONNX layout: the batch moved to `batch_axis`."""
    if batch_axis == ABSENT:
        return x.reshape(shape if shape is not None else x.shape[1:])
    return np.moveaxis(x, 0, batch_axis)


def from_onnx(x: np.ndarray, batch_axis: int) -> np.ndarray:
    if batch_axis == ABSENT:
        return x[None]
    return np.moveaxis(x, batch_axis, 0)


def _writable(array: np.ndarray) -> np.ndarray:
    """A contiguous array torch may own: the file's tensors are read-only views of its bytes
    (torch.from_numpy warns on those), and a broadcast is a read-only view too."""
    array = np.ascontiguousarray(array)
    return array if array.flags.writeable else array.copy()


@dataclass
class FileData:
    """Reads the import's constants (by value name) as float32 numpy arrays."""

    imported: Imported
    read: Callable[[str], np.ndarray]

    def layer_weights(self, layer: Layer, shapes: Mapping[str, tuple[int, ...]]) -> dict:
        """The op's weights (`shapes`: the op's weight_shapes) from the file; a weight the
        file leaves out (a layer norm without bias) is zero, as ONNX defines it."""
        out: dict[str, np.ndarray] = {}
        for key, shape in shapes.items():
            source = layer.weights.get(key)
            if source is None:
                out[key] = np.zeros(shape, dtype=np.float32)
                continue
            name, how = source
            array = np.asarray(self.read(name), dtype=np.float32)
            if how == "transpose":
                array = array.T
            out[key] = _writable(array.reshape(shape))
        return out

    def constant_input(self, item: ModelInput) -> np.ndarray:
        """A constant model input, broadcast over the batch: [B, ...]."""
        assert item.constant is not None
        canon = canonical_constant(self.read(item.constant), item.rank, item.batch_axis)
        return _writable(np.broadcast_to(canon, item.shape).astype(np.float32, copy=False))

    def feeds(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX Runtime's feeds from the suite's model inputs (batch first), by input name."""
        feeds = {}
        for item in self.imported.inputs:
            if item.constant is None:
                array = np.asarray(inputs[item.name])
                array = array.astype(np.int64 if item.dtype else np.float32)
                feeds[item.source] = to_onnx(array, item.batch_axis)
        return feeds


def ort_outputs(model_path: str, feeds: Mapping[str, np.ndarray], outputs: list[Output]) -> dict:
    """ONNX Runtime's outputs of the file itself (CPU, default optimisations), batch first,
    by the name of the layer that makes each."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model_path, sess_options=options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in outputs]
    values = session.run(names, dict(feeds))
    return {
        o.layer: from_onnx(np.asarray(v), o.batch_axis)
        for o, v in zip(outputs, values, strict=True)
    }


def constant_reader(model: Any) -> Callable[[str], np.ndarray]:
    """Reads any constant of the (folded) onnx_ir model by value name."""
    values: dict[str, Any] = {}
    for value in model.graph.initializers.values():
        values[value.name] = value
    for node in model.graph:
        for value in node.outputs:
            if value.const_value is not None:
                values[value.name] = value

    def read(name: str) -> np.ndarray:
        value = values.get(name)
        if value is None or value.const_value is None:
            raise KeyError(f"no constant {name!r} in the model")
        return value.const_value.numpy()

    return read
