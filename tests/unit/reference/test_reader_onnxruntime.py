"""The `onnxruntime` reader on real ORT profiles (1.31/1.32 CPU, an old fork) and a CUDA one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opbench.errors import ExitCode, InputError
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import RefStatus, TimeKind
from opbench.reference.onnxruntime import READER, is_overhead, node_members

DATA = Path(__file__).parents[2] / "data" / "reference"


def read(path: Path, **options: object):
    return READER.read(path, ReaderOptions(**options))  # type: ignore[arg-type]


def by_name(profile):
    return {layer.name: layer for layer in profile.layers}


def test_mlp_cpu_profile_skips_warm_up_run_and_aggregates():
    profile = read(DATA / "onnxruntime_profile_mlp_cpu.json")
    assert profile.format == "onnxruntime" and profile.engine == "onnxruntime"
    assert [layer.name for layer in profile.layers] == [
        "/ln/LayerNormalization",
        "gemm_input_reshape",
        "/fc1/MatMul/MatMulAddFusion",
        "gemm_output_reshape",
        "/act/Gelu",
        "gemm_input_reshape_token_2",
        "/fc2/MatMul/MatMulAddFusion",
        "gemm_output_reshape_token_5",
        "/sm/Softmax",
    ]
    layers = by_name(profile)
    norm = layers["/ln/LayerNormalization"]
    assert norm.count == 2  # 3 runs, the first is warm-up
    assert norm.median_ms == pytest.approx((463 + 35) / 2 / 1000)
    assert (norm.min_ms, norm.max_ms) == pytest.approx((0.035, 0.463))
    assert norm.raw_type == "LayerNormalization"
    assert norm.output_shape == (4, 64, 256)
    assert norm.time_kind == TimeKind.DEVICE  # synchronous CPU kernel
    fc1 = layers["/fc1/MatMul/MatMulAddFusion"]
    assert fc1.raw_type == "Gemm" and fc1.members == ("MatMul", "Add")
    assert fc1.time_ms == pytest.approx((2754 + 360) / 2 / 1000)
    reshapes = [layer.name for layer in profile.layers if layer.status == RefStatus.OVERHEAD]
    assert reshapes == [
        "gemm_input_reshape",
        "gemm_output_reshape",
        "gemm_input_reshape_token_2",
        "gemm_output_reshape_token_5",
    ]
    assert profile.total_ms == pytest.approx((5824 + 995) / 2 / 1000)  # median model_run
    assert norm.line == 15  # first kernel_time event of the first kept run


def test_skip_runs_zero_keeps_every_run():
    layers = by_name(read(DATA / "onnxruntime_profile_mlp_cpu.json", skip_runs=0))
    assert layers["/act/Gelu"].count == 3
    assert layers["/act/Gelu"].median_ms == pytest.approx(1.745)


def test_old_ort_fork_with_string_args_and_one_run():
    path = DATA / "ort_profile_resnet50_gemmini_cpu_systolic.json"
    with pytest.raises(InputError, match=r"1 model_run\(s\).*--skip-runs 0") as info:
        read(path)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    profile = read(path, skip_runs=0)
    assert len(profile.layers) == 77
    layers = by_name(profile)
    assert layers["gpu_0/data_0_QuantizeLinear"].time_ms == pytest.approx(4.068)
    assert layers["ReorderToNHWC"].status == RefStatus.OVERHEAD
    assert layers["ReorderToNHWC"].raw_type == "Transpose"
    assert layers["ReorderToNCHW"].status == RefStatus.OVERHEAD
    renamed = layers["_nhwc_token_0"]  # a real convolution, renamed by the layout pass
    assert renamed.status == RefStatus.TIMED and renamed.raw_type == "QLinearConv_nhwc"
    assert layers["Gemm_123"].time_ms == pytest.approx(8.032)
    assert layers["Reshape_122"].status == RefStatus.TIMED  # a model node, not inserted
    assert profile.total_ms == pytest.approx(35.225)
    assert sum(layer.status == RefStatus.OVERHEAD for layer in profile.layers) == 2


def test_fused_conv_profile():
    layers = by_name(read(DATA / "ort_cnn_cpu_fusedconv.json"))
    assert list(layers) == [
        "/conv1/Conv",
        "/conv2/Conv",
        "/pool/MaxPool",
        "/flatten/Flatten",
        "/fc/MatMul/MatMulAddFusion",
        "/softmax/Softmax",
    ]
    conv = layers["/conv1/Conv"]
    assert conv.raw_type == "FusedConv"
    assert conv.members == ("Conv", "Activation")  # the activation's kind is not in the profile
    assert conv.count == 3 and conv.output_shape == (4, 16, 16, 16)
    assert layers["/flatten/Flatten"].status == RefStatus.TIMED


def test_nchwc_profile_renamed_nodes_and_reorder():
    layers = by_name(read(DATA / "ort_cnn_cpu_nchwc.json"))
    assert Flag.RENAMED_BY_ENGINE in layers["r1_nchwc"].flags  # named after the Relu's output
    assert layers["r1_nchwc"].raw_type == "Conv"
    assert layers["ReorderOutput"].status == RefStatus.OVERHEAD
    assert layers["/softmax/Softmax"].flags == ()


def test_cuda_profile_with_kernel_events():
    profile = read(DATA / "ort_cuda_kernels_synthetic.json")
    layers = by_name(profile)
    conv = layers["Relu_1"]  # old ORT: Conv+Relu fused under the Relu's name
    assert conv.members == ("Conv", "Relu") and Flag.RENAMED_BY_ENGINE in conv.flags
    assert conv.time_kind == TimeKind.DEVICE
    assert conv.median_ms == pytest.approx(0.048)  # kernels 44+5, 40+5, 42+6 µs
    assert layers["Gemm_4"].median_ms == pytest.approx(0.020)
    flatten = layers["Flatten_3"]  # no kernel: only the host's view of an async launch
    assert flatten.time_kind == TimeKind.HOST and Flag.ASYNC_HOST_TIME in flatten.flags
    assert layers["Shape_2"].time_kind == TimeKind.DEVICE  # CPU provider
    assert layers["MemcpyFromHost_token_0"].status == RefStatus.OVERHEAD
    assert layers["MemcpyToHost_token_1"].status == RefStatus.OVERHEAD
    assert any("1 node event(s) outside" in note for note in profile.notes)


def test_truncated_profile_is_read_up_to_its_last_event(tmp_path):
    text = (DATA / "onnxruntime_profile_mlp_cpu.json").read_text()
    cut = text[: text.rindex('{"cat" : "Session"')].rstrip().rstrip(",")
    path = tmp_path / "cut.json"
    path.write_text(cut)
    profile = read(path, skip_runs=0)
    assert any("ends early" in note for note in profile.notes)
    assert len(profile.layers) == 9


def test_string_args_and_output_shape_as_string(tmp_path):
    events = [
        {"cat": "Node", "name": "Relu_1_kernel_time", "ts": "10", "dur": "7", "ph": "X",
         "args": {"op_name": "FusedConv", "output_type_shape": '[{"float":[1,8]}]'}},
        {"cat": "Session", "name": "model_run", "ts": "5", "dur": "20", "ph": "X", "args": {}},
    ]  # fmt: skip
    path = tmp_path / "old.json"
    path.write_text(json.dumps(events))
    (layer,) = read(path, skip_runs=0).layers
    assert layer.time_ms == pytest.approx(0.007) and layer.output_shape == (1, 8)


def test_no_model_run_means_one_run(tmp_path):
    events = [{"cat": "Node", "name": "a_kernel_time", "ts": 1, "dur": 5, "args": {}}]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(events))
    profile = read(path, skip_runs=0)
    assert profile.layers[0].time_ms == pytest.approx(0.005)
    assert any("no model_run" in note for note in profile.notes)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"cat": "Node", "name": "a_kernel_time", "ts": 1, "dur": -3}, "negative 'dur'"),
        ({"cat": "Node", "name": "a_kernel_time", "ts": 1, "dur": "x"}, "no numeric 'dur'"),
        ({"cat": "Node", "name": "a_kernel_time", "dur": 3}, "no numeric 'ts'"),
    ],
)
def test_bad_events_name_their_line(tmp_path, event, message):
    path = tmp_path / "bad.json"
    path.write_text(
        '[\n{"cat": "Session", "name": "x", "ts": 0, "dur": 1},\n' + json.dumps(event) + "\n]"
    )
    with pytest.raises(InputError, match=message) as info:
        read(path, skip_runs=0)
    assert (info.value.location.line, info.value.location.column) == (3, 1)


def test_nan_duration_refused(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text('[{"cat": "Node", "name": "a_kernel_time", "ts": 1, "dur": NaN}]')
    with pytest.raises(InputError, match="no numeric 'dur'"):
        read(path, skip_runs=0)


def test_no_node_events(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('[{"cat": "Session", "name": "model_run", "ts": 1, "dur": 5}]')
    with pytest.raises(InputError, match="no node timings"):
        read(path)


def test_options_that_do_not_apply():
    with pytest.raises(InputError, match="--time-column does not apply"):
        read(DATA / "onnxruntime_profile_mlp_cpu.json", time_column="dur")
    with pytest.raises(InputError, match="µs; --unit ms contradicts"):
        read(DATA / "onnxruntime_profile_mlp_cpu.json", unit="ms")
    assert read(DATA / "onnxruntime_profile_mlp_cpu.json", unit="us").layers


@pytest.mark.parametrize(
    ("name", "op", "overhead"),
    [
        ("ReorderInput", "ReorderInput", True),
        ("ReorderOutput_token_3", "ReorderOutput", True),
        ("Memcpy_token_1", "MemcpyToHost", True),
        ("gemm_input_reshape", "Reshape", True),
        ("Transpose_token_4", "Transpose", True),
        ("Squeeze", "Squeeze", True),  # the first Squeeze of a GatherSliceToSplitFusion
        ("Squeeze_5", "Squeeze", False),  # a model's own node, numbered by the exporter
        ("/flatten/Reshape", "Reshape", False),
        ("Reshape_122", "Reshape", False),
        ("_nhwc_token_0", "QLinearConv_nhwc", False),
        ("/conv1/Conv", "FusedConv", False),
    ],
)
def test_overhead_rules(name, op, overhead):
    assert is_overhead(name, op) is overhead


def test_member_rules():
    # a FusedConv/FusedGemm holds an activation whether or not its name says which
    assert node_members("/layer1/conv/Conv", "FusedConv") == (("Conv", "Activation"), ())
    assert node_members("Relu_3", "FusedConv") == (("Conv", "Relu"), (Flag.RENAMED_BY_ENGINE,))
    assert node_members("/fc/Gemm", "FusedGemm") == (("Gemm", "Activation"), ())
    assert node_members("fused /fc/Clip_2", "FusedGemm")[0] == ("Gemm", "Clip")
    assert node_members("/fc/MatMul/MatMulAddFusion", "Gemm") == (("MatMul", "Add"), ())
    assert node_members("/sm/Softmax", "Softmax") == ((), ())
    blocked = (Flag.RENAMED_BY_ENGINE, Flag.BLOCKED_LAYOUT)
    # ResNet's conv3 + residual Add + Relu as one NCHWc Conv: X, W, B and the residual Z (of
    # the output's shape) as inputs, named after the conv's own output: whether an activation
    # follows the add, the profile does not say
    shape = (1, 256, 56, 56)
    inputs = ((1, 64, 56, 56), (256, 64, 1, 1), (256,), shape)
    assert node_members("/m/l1.conv3/Conv_output_0_nchwc", "Conv", inputs, shape) == (
        ("Conv", "Add", "Activation?"),
        blocked,
    )
    # a conv without bias: Z is the third input (found by shape, not position)
    no_bias = (inputs[0], inputs[1], shape)
    assert node_members("c2_nchwc", "Conv", no_bias, shape)[0] == ("Conv", "Add", "Activation?")
    assert node_members("/b/c/Conv", "FusedConv", no_bias, shape)[0] == (
        "Conv",
        "Add",
        "Activation",
    )
    # an NCHWc conv named after the activation output it fused (dynamo's lower-case names too)
    assert node_members("relu_2_nchwc", "Conv", inputs[:3], shape) == (("Conv", "Relu"), blocked)
    assert node_members("/m/f.0/Clip_output_0_nchwc", "Conv", inputs[:3], shape)[0] == (
        "Conv",
        "Clip",
    )
    # three inputs with a bias, or a fourth of another shape: no residual was added
    assert node_members("/m/c/Conv_output_0_nchwc", "Conv", inputs[:3], shape)[0] == ()
    assert node_members("/m/c/Conv", "Conv", (*inputs[:3], (256,)), shape)[0] == ()


def test_sniff():
    assert READER.sniff((DATA / "onnxruntime_profile_mlp_cpu.json").read_text()[:65536]) == 0.95
    assert READER.sniff((DATA / "trt_resnet_a100_fp32.profile.json").read_text()) == 0.0
    assert READER.sniff("layer,time\n") == 0.0


def test_no_model_run_and_default_skip_explains(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([{"cat": "Node", "name": "a_kernel_time", "ts": 1, "dur": 5}]))
    with pytest.raises(
        InputError, match="no model_run events, so all its nodes count as one run.*--skip-runs 0"
    ):
        read(path)
