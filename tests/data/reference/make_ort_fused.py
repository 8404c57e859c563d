"""Writes ort_fused_extended.json and ort_fused_all.json: ONNX Runtime (CPU, one thread) profiles
of a small graph holding each fusion ORT makes on the CPU, at two optimisation levels.

    python tests/data/reference/make_ort_fused.py OUT_DIR

The graph (model "b", 24 channels, values named as torch's exporter names them):
conv1 (no bias) → relu1 → conv2 (no bias) → add (+ relu1) → relu2 → conv3 (bias) → clip (ReLU6)
→ pool → flat → fc (Gemm) → fc_relu. ORT_ENABLE_EXTENDED fuses Conv+Relu, Conv+Clip and
Gemm+Relu (FusedConv, FusedGemm); ORT_ENABLE_ALL on an AVX-512 CPU also runs the convs as NCHWc
kernels with channels padded to 32, conv2 + add + relu2 as one Conv with the residual as its
third input, each node named after the value it writes ("/b/relu1/Relu_output_0_nchwc").
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh


def graph() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return nh.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def node(op: str, layer: str, inputs: list[str], **attrs) -> onnx.NodeProto:
        out = f"/b/{layer}/{op}_output_0"
        return h.make_node(op, inputs, [out], name=f"/b/{layer}/{op}", **attrs)

    nodes = [
        node("Conv", "conv1", ["x", "w1"], pads=[1, 1, 1, 1]),
        node("Relu", "relu1", ["/b/conv1/Conv_output_0"]),
        node("Conv", "conv2", ["/b/relu1/Relu_output_0", "w2"], pads=[1, 1, 1, 1]),
        node("Add", "add", ["/b/conv2/Conv_output_0", "/b/relu1/Relu_output_0"]),
        node("Relu", "relu2", ["/b/add/Add_output_0"]),
        node("Conv", "conv3", ["/b/relu2/Relu_output_0", "w3", "b3"]),
        node("Clip", "clip", ["/b/conv3/Conv_output_0", "lo", "hi"]),
        node("GlobalAveragePool", "pool", ["/b/clip/Clip_output_0"]),
        node("Flatten", "flat", ["/b/pool/GlobalAveragePool_output_0"]),
        node("Gemm", "fc", ["/b/flat/Flatten_output_0", "wg", "bg"], transB=1),
        h.make_node("Relu", ["/b/fc/Gemm_output_0"], ["y"], name="/b/fc_relu/Relu"),
    ]
    weights = [
        weight("w1", 24, 24, 3, 3),
        weight("w2", 24, 24, 3, 3),
        weight("w3", 24, 24, 1, 1),
        weight("b3", 24),
        nh.from_array(np.array(0, np.float32), "lo"),
        nh.from_array(np.array(6, np.float32), "hi"),
        weight("wg", 10, 24),
        weight("bg", 10),
    ]
    x = h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 8, 8])
    y = h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])
    model = h.make_graph(nodes, "b", [x], [y], weights)
    return h.make_model(model, opset_imports=[h.make_opsetid("", 17)])


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = graph().SerializeToString()
    feed = {"x": np.random.default_rng(1).standard_normal((1, 24, 8, 8)).astype(np.float32)}
    levels = {
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    for tag, level in levels.items():
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(out / f"ort_fused_{tag}")
        options.graph_optimization_level = level
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        for _ in range(3):
            session.run(None, feed)
        shutil.move(session.end_profiling(), out / f"ort_fused_{tag}.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
