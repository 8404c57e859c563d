"""Regenerate ort_cnn_cpu_fusedconv.json and ort_cnn_cpu_nchwc.json (needs onnx, onnxruntime).

A small CNN (Conv-Relu, Conv-BatchNorm-Relu, MaxPool, Flatten, MatMul+Add, Softmax) built with
onnx.helper, run 4 times on ONNX Runtime's CPU provider with profiling on:
- ORT_ENABLE_EXTENDED: Conv+Relu become FusedConv, MatMul+Add becomes Gemm;
- ORT_ENABLE_ALL: the NCHWc layout pass renames convolutions after their outputs
  (`r1_nchwc`) and inserts ReorderOutput.
Run from this folder: python make_ort_cnn_profiles.py
"""

import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


def init(name, shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def build_model() -> onnx.ModelProto:
    variance = numpy_helper.from_array(
        np.abs(rng.standard_normal(32)).astype(np.float32) + 0.5, "bn_v"
    )
    inits = [
        init("w1", (16, 3, 3, 3)), init("b1", (16,)), init("w2", (32, 16, 3, 3)), init("b2", (32,)),
        init("bn_s", (32,)), init("bn_b", (32,)), init("bn_m", (32,)), variance,
        init("fcw", (32 * 8 * 8, 10)), init("fcb", (10,)),
    ]  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], name="/conv1/Conv", pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"], name="/relu1/Relu"),
        node("Conv", ["r1", "w2", "b2"], ["c2"], name="/conv2/Conv", pads=[1, 1, 1, 1]),
        node(
            "BatchNormalization",
            ["c2", "bn_s", "bn_b", "bn_m", "bn_v"],
            ["bn"],
            name="/bn2/BatchNormalization",
        ),
        node("Relu", ["bn"], ["r2"], name="/relu2/Relu"),
        node("MaxPool", ["r2"], ["p"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
        node("Flatten", ["p"], ["f"], name="/flatten/Flatten", axis=1),
        node("MatMul", ["f", "fcw"], ["mm"], name="/fc/MatMul"),
        node("Add", ["mm", "fcb"], ["fc"], name="/fc/Add"),
        node("Softmax", ["fc"], ["y"], name="/softmax/Softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def profile(model: onnx.ModelProto, level: ort.GraphOptimizationLevel, out: str) -> None:
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.intra_op_num_threads = 1
    options.graph_optimization_level = level
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    for _ in range(4):
        session.run(None, {"x": x})
    shutil.move(session.end_profiling(), out)


if __name__ == "__main__":
    cnn = build_model()
    profile(cnn, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "ort_cnn_cpu_fusedconv.json")
    profile(cnn, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "ort_cnn_cpu_nchwc.json")
