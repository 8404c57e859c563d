"""The `tensorrt` reader on a real trtexec --exportProfile file (ResNet, A100, fp32)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from opbench.errors import InputError
from opbench.reference.interface import ReaderOptions
from opbench.reference.model import RefStatus, TimeKind
from opbench.reference.tensorrt import READER, split_members

DATA = Path(__file__).parents[2] / "data" / "reference"
PROFILE = DATA / "trt_resnet_a100_fp32.profile.json"


def read(path: Path, **options: object):
    return READER.read(path, ReaderOptions(**options))  # type: ignore[arg-type]


def write(tmp_path: Path, entries: list, name: str = "x.profile.json") -> Path:
    path = tmp_path / name
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n")
    return path


def test_resnet_profile_with_its_graph_file():
    profile = read(PROFILE)
    assert profile.format == "tensorrt" and profile.engine == "tensorrt"
    assert len(profile.layers) == 32
    first = profile.layers[0]
    assert first.name == "Conv_0 + Relu_1"
    assert first.members == ("Conv_0", "Relu_1")
    assert first.time_ms == pytest.approx(0.52224)
    assert first.count == 1 and first.total_ms == pytest.approx(0.52224)
    assert first.time_kind == TimeKind.DEVICE
    assert first.raw_type == "CaskConvolution"  # from the .graph.json beside it
    assert first.output_shape == (32, 64, 112, 112)
    assert first.line == 3
    layers = {layer.name: layer for layer in profile.layers}
    assert layers["Conv_5 + Add_6 + Relu_7"].members == ("Conv_5", "Add_6", "Relu_7")
    assert layers["Conv_15"].members == ()
    overhead = [layer for layer in profile.layers if layer.status == RefStatus.OVERHEAD]
    assert len(overhead) == 9  # 8 reformatting copies and reshape_after_Gemm_48
    assert layers["reshape_after_Gemm_48"].status == RefStatus.OVERHEAD
    reformat = layers["Reformatting CopyNode for Output Tensor 0 to Conv_10 + Add_11 + Relu_12"]
    assert reformat.status == RefStatus.OVERHEAD and reformat.members == ()
    assert layers["Gemm_48"].status == RefStatus.TIMED
    assert profile.total_ms == pytest.approx(sum(layer.time_ms for layer in profile.layers))
    assert any("graph.json" in note for note in profile.notes)


def test_profile_alone_has_no_types(tmp_path):
    alone = tmp_path / "resnet.profile.json"
    shutil.copy(PROFILE, alone)
    profile = read(alone)
    assert profile.layers[0].raw_type is None and profile.layers[0].output_shape is None
    assert profile.layers[2].status == RefStatus.OVERHEAD  # recognised by name alone


def test_several_inferences_and_old_keys(tmp_path):
    path = write(
        tmp_path,
        [{"count": 10}, {"name": "Conv_0", "timeMs": 5.0, "averageMs": 0.5, "percentage": 100}],
    )
    (layer,) = read(path).layers
    assert layer.count == 10 and layer.mean_ms == pytest.approx(0.5) and layer.median_ms is None
    assert layer.total_ms == pytest.approx(5.0)
    only_total = write(tmp_path, [{"count": 4}, {"name": "Conv_0", "timeMs": 2.0}], "y.json")
    assert read(only_total).layers[0].mean_ms == pytest.approx(0.5)


def test_time_column_average_forces_the_mean(tmp_path):
    path = write(
        tmp_path, [{"count": 3}, {"name": "a", "timeMs": 3, "averageMs": 1.0, "medianMs": 0.9}]
    )
    assert read(path).layers[0].time_ms == pytest.approx(0.9)
    assert read(path, time_column="averageMs").layers[0].time_ms == pytest.approx(1.0)
    with pytest.raises(InputError, match="must be one of medianMs, averageMs"):
        read(path, time_column="percentage")


@pytest.mark.parametrize(
    ("entries", "message", "line"),
    [
        ([{"name": "a", "averageMs": 1}], r'first entry must be \{"count": N\}', 2),
        ([{"count": 1}, {"name": "a", "averageMs": -1}], "averageMs of layer 'a' is negative", 3),
        ([{"count": 1}, {"name": "a", "averageMs": "1"}], "not a finite number", 3),
        ([{"count": 1}, {"name": "a"}], "none of timeMs, averageMs, medianMs", 3),
        ([{"count": 1}, {"averageMs": 1}], "without a 'name'", 3),
        (
            [{"count": 1}, {"name": "a", "averageMs": 1}, {"name": "a", "averageMs": 1}],
            "appears twice",
            4,
        ),
        ([{"count": 1}], "no layer entries", None),
    ],
)
def test_bad_profiles(tmp_path, entries, message, line):
    with pytest.raises(InputError, match=message) as info:
        read(write(tmp_path, entries))
    assert info.value.location.line == line


def test_nan_refused(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text('[{"count": 1}, {"name": "a", "averageMs": NaN}]')
    with pytest.raises(InputError, match="not a finite number"):
        read(path)


def test_unit_option_must_agree():
    with pytest.raises(InputError, match="in ms; --unit us contradicts"):
        read(PROFILE, unit="us")


def test_split_members():
    assert split_members("Conv_0") == ()
    assert split_members("Conv_0 + Relu_1") == ("Conv_0", "Relu_1")
    assert split_members("PWN(Add_6, Relu_7)") == ("Add_6", "Relu_7")
    assert split_members("Conv_5 + PWN(PWN(Add_6), Relu_7)") == ("Conv_5", "Add_6", "Relu_7")


def test_sniff():
    assert READER.sniff(PROFILE.read_text()) == 0.95
    assert READER.sniff((DATA / "onnxruntime_profile_mlp_cpu.json").read_text()[:4096]) == 0.0
