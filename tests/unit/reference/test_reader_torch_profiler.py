"""The `torch-profiler` reader on Kineto traces: a real ROCm trace, a real CPU trace with
record_function per layer, and a CUDA-style trace with host and GPU annotations."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import RefStatus, TimeKind
from opbench.reference.torch_profiler import READER

DATA = Path(__file__).parents[2] / "data" / "reference"
GPU = DATA / "torch_kineto_gpu_layers_synthetic.trace.json"


def read(path: Path, **options: object):
    return READER.read(path, ReaderOptions(**options))  # type: ignore[arg-type]


def by_name(profile):
    return {layer.name: layer for layer in profile.layers}


def test_rocm_training_trace_prefers_gpu_annotations():
    profile = read(DATA / "pytorch_kineto_mi250_minitoy_train.trace.json")
    assert profile.format == "torch-profiler" and profile.engine == "pytorch"
    (layer,) = profile.layers  # ProfilerStep#1 and #2 are ignored
    assert layer.name == "Optimizer.step#SGD.step"
    assert layer.status == RefStatus.OVERHEAD  # torch's own range, not a model layer
    assert layer.time_kind == TimeKind.DEVICE
    assert layer.time_ms == pytest.approx(0.008483)


def test_cpu_trace_with_record_function_per_layer():
    profile = read(DATA / "pytorch_kineto_cpu_record_function.trace.json")
    assert [layer.name for layer in profile.layers] == [
        "conv1",
        "relu1",
        "pool1",
        "flatten",
        "fc",
        "softmax",
    ]
    conv = profile.layers[0]
    assert conv.time_kind == TimeKind.HOST and conv.count == 3
    assert conv.median_ms == pytest.approx(0.24031)  # of 2.701907, 0.24031, 0.191048 ms
    assert conv.max_ms == pytest.approx(2.701907)
    assert all(layer.status == RefStatus.TIMED for layer in profile.layers)
    assert all(layer.flags == () for layer in profile.layers)


def test_gpu_trace_device_times_nesting_and_host_fallback():
    profile = read(GPU)
    layers = by_name(profile)
    assert list(layers) == [
        "block1",
        "conv1",
        "relu1",
        "fc",
        "softmax",
        "Optimizer.zero_grad#SGD.zero_grad",
    ]
    conv = layers["conv1"]
    assert conv.time_kind == TimeKind.DEVICE and conv.count == 2
    assert conv.median_ms == pytest.approx((95.5 + 93.5) / 2 / 1000)
    assert Flag.NESTED in conv.flags and Flag.NESTED in layers["relu1"].flags
    assert layers["block1"].flags == () and layers["fc"].flags == ()
    assert layers["fc"].median_ms == pytest.approx(0.032)
    softmax = layers["softmax"]  # no GPU range: host time
    assert softmax.time_kind == TimeKind.HOST and softmax.time_ms == pytest.approx(0.0125)
    assert layers["Optimizer.zero_grad#SGD.zero_grad"].status == RefStatus.OVERHEAD
    assert any(
        "4 layer(s) timed on the GPU stream, 2 on the host" in note for note in profile.notes
    )


def test_time_column_host_forces_host_ranges():
    layers = by_name(read(GPU, time_column="host"))
    conv = layers["conv1"]
    assert conv.time_kind == TimeKind.HOST
    assert conv.median_ms == pytest.approx((151.5 + 152.5) / 2 / 1000)
    with pytest.raises(InputError, match="host or device"):
        read(GPU, time_column="wall")


def test_gzip_trace(tmp_path):
    path = tmp_path / "trace.pt.trace.json.gz"
    path.write_bytes(gzip.compress(GPU.read_bytes()))
    assert by_name(read(path))["conv1"].median_ms == pytest.approx(0.0945)


def test_trace_without_ranges(tmp_path):
    path = tmp_path / "t.json"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0, "pid": 1, "tid": 1}
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(InputError, match="no record_function ranges"):
        read(path)


def test_list_trace_is_refused(tmp_path):
    with pytest.raises(InputError, match='expected a JSON object with "traceEvents"'):
        read(DATA / "onnxruntime_profile_mlp_cpu.json")


def test_negative_duration_names_its_line(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(
        '{"traceEvents": [\n{"ph": "X", "cat": "user_annotation", "name": "a", "ts": 1.5, "dur": -2.0}\n]}'
    )
    with pytest.raises(InputError, match="negative duration") as info:
        read(path)
    assert info.value.location.line == 2


def test_sniff():
    assert READER.sniff(GPU.read_text()[:65536]) == 0.9
    assert READER.sniff('{"traceEvents": [{"ph": "X"}]}') == 0.6
    assert READER.sniff("[]") == 0.0
