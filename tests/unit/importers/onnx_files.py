"""Small ONNX files built with onnx.helper for the import's error tests: a conv and a ReLU,
broken one way each (external data, opsets, the graph's wiring)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def conv_relu(
    nodes: list[Any] | None = None,
    *,
    opset: int | None = 18,
    input_shape: tuple[int | str, ...] = (1, 3, 8, 8),
) -> Any:
    """x → Conv 'conv' → c → Relu 'relu' → y, or the given nodes between x and y."""
    weight = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    if nodes is None:
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w")],
    )
    imports = [] if opset is None else [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return model


def save_external(model: Any, path: Path, location: str = "weights.bin") -> Path:
    """The model with its weights in `location` beside it (ONNX external data)."""
    import onnx

    onnx.save(model, str(path), save_as_external_data=True, location=location, size_threshold=0)
    return path
