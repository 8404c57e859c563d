"""`opbench suite from-onnx`: ONNX files written by opbench and by torch.onnx.export become
suites that validate, with the same layers and shapes; unsupported nodes are listed."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.spec.load import load_suite

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
nn = torch.nn

SUITES = Path(__file__).parents[3] / "suites"
DATA = Path(__file__).parents[2] / "data" / "suites"
runner = CliRunner()


def _from_onnx(model: Path, out: Path, *extra: str):
    return runner.invoke(app, ["suite", "from-onnx", str(model), "--out", str(out), *extra])


def _layers(model) -> list[tuple]:
    return [(lay.name, lay.op, lay.input_shape, lay.output_shape) for lay in model.layers]


# cnn_chain.yaml: the chain suites/cnn.yaml was before it became ResNet-50's graph (joins do
# not round-trip through the ONNX export yet).
@pytest.mark.parametrize("suite_path", [SUITES / "quickstart.yaml", DATA / "cnn_chain.yaml"],
                         ids=lambda p: p.name)  # fmt: skip
def test_opbench_export_round_trips(tmp_path: Path, suite_path: Path):
    source = tmp_path / suite_path.name
    raw = yaml.safe_load(suite_path.read_text())
    for model in raw["models"]:
        batch = model["batch"]  # the shapes matter here, not the size
        model["batch"] = min(min(batch) if isinstance(batch, list) else batch, 2)
    source.write_text(yaml.safe_dump(raw, sort_keys=False))
    done = runner.invoke(app, ["export", "onnx", str(source), "--out", str(tmp_path / "x")])
    assert done.exit_code == 0, done.output
    original = load_suite(source)
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    for model, entry in zip(original.models, manifest["models"], strict=True):
        out = tmp_path / f"{model.name}.yaml"
        done = _from_onnx(tmp_path / "x" / entry["file"], out)
        assert done.exit_code == 0, done.output
        (back,) = load_suite(out).models
        assert back.name == model.name and back.batch == model.batch
        assert _layers(back) == _layers(model)
        assert back.graph.producers == model.graph.producers
        for a, b in zip(back.layers, model.layers, strict=True):
            for key in ("activation", "heads", "causal", "packed_qkv", "dims", "kernel_size"):
                assert a.params.get(key) == b.params.get(key), (a.name, key)


class SmallCNN(nn.Module):
    """A torchvision-style stem and head: conv-bn-relu, max pool, conv, SiLU, global pool, fc."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.act2 = nn.SiLU()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16, 10)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.act2(self.conv2(x))
        return self.softmax(self.fc(self.flatten(self.avgpool(x))))


def _module_shapes(model: nn.Module, x) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for name, module in model.named_children():
        module.register_forward_hook(
            lambda _m, _i, out, name=name: shapes.__setitem__(name, tuple(out.shape))
        )
    model(x)
    return shapes


def _quiet_export(model, x, path: Path, **kwargs) -> None:
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model, (x,), None if kwargs.get("dynamo") else str(path), **kwargs
        )
        if program is not None:
            program.save(str(path))


def test_torch_legacy_export_gives_the_module_layers(tmp_path: Path):
    model, x = SmallCNN().eval(), torch.randn(2, 3, 32, 32)
    path = tmp_path / "small_cnn.onnx"
    _quiet_export(model, x, path, dynamo=False, training=torch.onnx.TrainingMode.PRESERVE)
    done = _from_onnx(path, tmp_path / "s.yaml")
    assert done.exit_code == 0, done.output
    (suite_model,) = load_suite(tmp_path / "s.yaml").models
    shapes = _module_shapes(model, x)
    # SiLU (Sigmoid · Mul) folds into conv2 as its activation; every other module is a layer.
    assert [lay.name for lay in suite_model.layers] == [k for k in shapes if k != "act2"]
    assert [lay.op for lay in suite_model.layers] == [
        "conv2d", "batchnorm2d", "relu", "maxpool2d", "conv2d", "avgpool2d", "flatten",
        "linear", "softmax",
    ]  # fmt: skip
    assert suite_model.layer("conv2").params["activation"] == "silu"
    assert {lay.name: lay.output_shape for lay in suite_model.layers} == {
        k: v for k, v in shapes.items() if k != "act2"
    }
    assert suite_model.layers[0].reference_name == "/conv1/Conv"  # what a profile calls it


def test_torch_dynamo_export_names_layers_by_module(tmp_path: Path):
    """The dynamo exporter folds bn1 into conv1 and names nodes `node_*`; the layers take the
    module paths, and reference_name keeps the node names an ONNX Runtime profile shows."""
    model, x = SmallCNN().eval(), torch.randn(2, 3, 32, 32)
    path = tmp_path / "small_cnn_dynamo.onnx"
    _quiet_export(model, x, path, dynamo=True, external_data=False)
    nodes = {n.name for n in onnx.load(str(path)).graph.node}
    done = _from_onnx(path, tmp_path / "s.yaml")
    assert done.exit_code == 0, done.output
    (suite_model,) = load_suite(tmp_path / "s.yaml").models
    names = [lay.name for lay in suite_model.layers]
    assert names == ["conv1", "maxpool", "conv2", "avgpool", "flatten", "fc", "softmax"]
    assert {lay.reference_name for lay in suite_model.layers} <= nodes
    assert suite_model.layer("conv1").params["activation"] == "relu"
    shapes = _module_shapes(model, x)
    assert suite_model.layer("fc").output_shape == shapes["fc"]


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.softplus = nn.Softplus()  # no op of opbench's (Tanh is one now)
        self.floor = nn.Hardtanh()

    def forward(self, x):
        y = self.softplus(self.conv2(self.relu(self.conv1(x))) + x)
        return self.floor(nn.functional.softplus(y) * 2) + y


def test_unsupported_nodes_are_listed_or_placeheld(tmp_path: Path):
    path = tmp_path / "residual.onnx"
    _quiet_export(Residual().eval(), torch.randn(1, 4, 8, 8), path, dynamo=False)
    out = tmp_path / "s.yaml"
    done = _from_onnx(path, out)
    assert done.exit_code == 2
    lines = done.output.splitlines()
    # grouped by op type with counts, one line per node with its module
    assert "  Softplus ×2" in lines and "  Clip ×1" in lines
    assert "    /softplus/Softplus in softplus: not a supported op" in lines
    # Short lines, the file's name aside (its folder's length is the test runner's).
    assert all(len(line.replace(str(path), "")) < 200 for line in lines)
    assert not out.exists()

    done = _from_onnx(path, out, "--skip-unsupported")
    assert done.exit_code == 0, done.output
    text = out.read_text()
    assert (
        "# placeholder for /softplus/Softplus (Softplus): not a supported op; not measured" in text
    )
    (suite_model,) = load_suite(out).models
    ops = [lay.op for lay in suite_model.layers]
    assert ops.count("placeholder") == 3 and ops.count("add") == 2
    assert len(suite_model.graph.pieces) == 1  # connected: no layer restarts on fresh data
    softplus = suite_model.layer("softplus")
    assert softplus.inputs == ("add",) and softplus.output_shape == (1, 4, 8, 8)
    assert suite_model.layer("add").inputs == ("conv2", "input")


def test_symbolic_batch_needs_batch_option(tmp_path: Path):
    path = tmp_path / "dyn.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            nn.Sequential(nn.Linear(8, 4)), (torch.randn(2, 8),), str(path), dynamo=False,
            input_names=["x"], dynamic_axes={"x": {0: "N"}},
        )  # fmt: skip
    done = _from_onnx(path, tmp_path / "s.yaml")
    assert done.exit_code == 2 and "symbolic batch dimension 'N'" in done.output
    done = _from_onnx(path, tmp_path / "s.yaml", "--batch", "16")
    assert done.exit_code == 0, done.output
    (suite_model,) = load_suite(tmp_path / "s.yaml").models
    assert suite_model.layers[0].output_shape == (16, 4)


def test_weights_kept_beside_the_model_are_read(tmp_path: Path):
    """Large exports keep their weights in a file beside the model (ONNX external data), as the
    dynamo exporter does by default above 2 GB and `opbench export` always does."""
    model, x = SmallCNN().eval(), torch.randn(2, 3, 32, 32)
    path = tmp_path / "external.onnx"
    _quiet_export(model, x, tmp_path / "inline.onnx", dynamo=True, external_data=False)
    onnx.save_model(
        onnx.load(str(tmp_path / "inline.onnx")), str(path), save_as_external_data=True,
        location="external.weights", size_threshold=0,
    )  # fmt: skip
    assert (tmp_path / "external.weights").stat().st_size > 5_000
    done = _from_onnx(path, tmp_path / "s.yaml")
    assert done.exit_code == 0, done.output
    (suite_model,) = load_suite(tmp_path / "s.yaml").models
    assert suite_model.layer("conv1").params["out_channels"] == 8


def test_not_an_onnx_file(tmp_path: Path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not onnx")
    done = _from_onnx(bad, tmp_path / "s.yaml")
    assert done.exit_code == 2 and "not an ONNX model" in done.output
