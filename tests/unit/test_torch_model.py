"""The torch peers' whole model as one nn.Module (backends/torch_model.py), its layout choice
(backends/torch_layout.py, pipeline/torch_forward.py) and the per-layer conv layout."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import opbench.backends.torch_eager as torch_eager
import opbench.pipeline.torch_forward as torch_forward
from opbench.backends.base import cast_weights, torch_dtype
from opbench.backends.registry import get_backend
from opbench.backends.torch_layout import faster_of
from opbench.backends.torch_model import leaf_layers, model_module, module_inputs
from opbench.ops.registry import get_op
from opbench.pipeline import ModelData
from opbench.spec.load import load_suite, load_suite_text

ROOT = Path(__file__).resolve().parents[2]


def layer_by_layer(model, data) -> dict[str, torch.Tensor]:
    """Every layer's output from its op's forward, walked in order: what the module must give."""
    env = dict(data.model_inputs())
    for i, layer in enumerate(model.layers):
        op = get_op(layer.op)
        xs = [env[v].to(torch_dtype(layer.dtype)) for v in model.graph.reads[i]]
        w = cast_weights(data.weights(i), layer.dtype)
        with torch.no_grad():
            env[layer.name] = op.forward(xs[0] if op.arity == 1 else tuple(xs), w, layer)
    return env


@pytest.mark.parametrize(
    "path", [ROOT / "suites/quickstart.yaml", ROOT / "tests/data/suites/joins.yaml"]
)
def test_the_module_computes_what_the_layers_compute(path) -> None:
    """Bit for bit: the same torch calls on the same weights, dtype casts where the suite
    changes dtype (quickstart's mlp: an fp16 layer in an fp32 model), joins, several inputs."""
    suite = load_suite(path)
    for model in suite.models:
        data = ModelData(suite, model, "cpu")
        module = model_module(model, data.weights)
        given = data.model_inputs()
        with torch.no_grad():
            outs = module(*(given[n] for n in module_inputs(model)))
        expected = layer_by_layer(model, data)
        assert len(outs) == len(model.graph.outputs), model.name
        for out, index in zip(outs, model.graph.outputs, strict=True):
            torch.testing.assert_close(out, expected[model.graph.names[index]], rtol=0, atol=0)


def test_weights_are_parameters_and_the_forward_is_straight_line_code() -> None:
    suite = load_suite(ROOT / "suites/quickstart.yaml")
    model = suite.model("cnn")
    data = ModelData(suite, model, "cpu")
    module = model_module(model, data.weights)
    names = dict(module.named_parameters())
    assert names["conv1.weight"].shape == (8, 3, 3, 3) and "bn1.running_var" in names
    assert not any(p.requires_grad for p in names.values())
    code = module.code
    assert "torch.conv2d(" in code and "self.conv1.weight" in code and "for " not in code
    assert ".permute((0, 2, 3, 1))" in code, "x.dim() read from the static shape while tracing"
    assert leaf_layers(module) == ()


LLAMA_BLOCK = """
name: block
defaults: {dtype: float32}
models:
  - name: llama
    batch: 1
    input: [7, 32]
    layers:
      - {name: attn_norm, op: rmsnorm, eps: 1.0e-06}
      - {name: qkv, op: linear, out_features: 64, bias: false}
      - {name: rope, op: rope, layout: packed, heads: 4, kv_heads: 2, theta: 5.0e+05}
      - {name: attn, op: attention, heads: 4, kv_heads: 2, causal: true, packed_qkv: true}
      - {name: o_proj, op: linear, out_features: 32, bias: false}
      - {name: attn_res, op: add, inputs: [o_proj, input]}
"""


def test_a_llama_block_traces_whole_rope_included() -> None:
    """RoPE on packed q | k | v (v passed through) is straight-line code, not a leaf module:
    a leaf costs the eager forward host time and hides the rotation from Inductor's view."""
    suite = load_suite_text(LLAMA_BLOCK)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    module = model_module(model, data.weights)
    assert leaf_layers(module) == ()
    with torch.no_grad():
        (out,) = module(data.model_inputs()["input"])
    expected = layer_by_layer(model, data)["attn_res"]
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_a_forward_that_cannot_be_traced_runs_as_a_leaf_module(monkeypatch) -> None:
    """A branch on a tensor's values cannot be traced: that layer runs its forward as a leaf
    module, and the layers after it still trace (its output's shape is known)."""
    suite = load_suite(ROOT / "suites/quickstart.yaml")
    model = suite.model("cnn")
    data = ModelData(suite, model, "cpu")
    relu = type(get_op("relu"))
    plain = relu.forward

    def data_dependent(self, x, weights, layer):
        return plain(self, x, weights, layer) if x.sum() > -1e30 else x

    monkeypatch.setattr(relu, "forward", data_dependent)
    module = model_module(model, data.weights)
    assert leaf_layers(module) == ("relu1",)
    assert ".permute((0, 2, 3, 1))" in module.code
    (out,) = module(data.model_inputs()["input"])
    torch.testing.assert_close(out, layer_by_layer(model, data)["gelu"], rtol=0, atol=0)


def test_a_layer_named_like_a_module_method_gets_an_attribute_of_its_own() -> None:
    text = """\
name: s
models:
  - name: m
    batch: 2
    input: [6]
    layers:
      - {name: half, op: linear, out_features: 5}
      - {name: eval, op: relu}
"""
    suite = load_suite_text(text)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    module = model_module(model, data.weights)
    (out,) = module(data.model_inputs()["input"])
    torch.testing.assert_close(out, layer_by_layer(model, data)["eval"], rtol=0, atol=0)
    assert callable(module.half) and callable(module.eval), "nn.Module's methods kept"


def test_the_faster_layout_is_kept_and_the_note_gives_both_times() -> None:
    assert faster_of({"channels_last": 0.25, "NCHW": 0.2}) == (
        "NCHW",
        "NCHW, the faster at build (channels_last 0.2500 ms, NCHW 0.2000 ms)",
    )


def test_on_cuda_cudnn_benchmarks_in_true_float32(monkeypatch) -> None:
    """TF32 (PyTorch's default for cuDNN) would time a float32 peer below float32's precision."""
    import torch

    from opbench.backends.torch_layout import use_cudnn_benchmark

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    use_cudnn_benchmark("cpu")
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32) == (False, True)
    use_cudnn_benchmark("cuda:0")
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32) == (True, False)


@pytest.mark.parametrize("faster", ["channels_last", "NCHW"])
def test_on_cuda_the_module_runs_in_the_faster_layout(monkeypatch, faster) -> None:
    """Each layout timed with the weights in it (here a stand-in timer that reads the conv
    weight's layout), and the forward left in the faster one."""
    suite = load_suite(ROOT / "suites/quickstart.yaml")
    model = suite.model("cnn")
    data = ModelData(suite, model, "cpu")  # on the CPU: only the choice is tested
    seen = []

    def fake_ms(fn, device):
        fn()
        weight = module_of["m"].conv1.weight
        layout = "channels_last" if weight.stride()[1] == 1 else "NCHW"
        seen.append(layout)
        return 1.0 if layout == faster else 2.0

    module_of = {}
    real = torch_forward.model_module

    def capture(*args):
        module_of["m"] = real(*args)
        return module_of["m"]

    monkeypatch.setattr(torch_forward, "median_ms", fake_ms)
    monkeypatch.setattr(torch_forward, "model_module", capture)
    forward = torch_forward.module_forward(model, data, "cuda")
    assert sorted(seen) == ["NCHW", "channels_last"]
    assert forward.note.startswith(f"the model as one nn.Module; layout: {faster}, the faster")
    weight = module_of["m"].conv1.weight
    assert weight.is_contiguous(memory_format=torch.channels_last) == (faster == "channels_last")
    (out,) = forward.call()
    torch.testing.assert_close(out, layer_by_layer(model, data)["gelu"], rtol=1e-5, atol=1e-5)


def test_on_the_cpu_a_conv_layer_runs_nchw_untimed_unless_asked() -> None:
    suite = load_suite(ROOT / "suites/quickstart.yaml")
    model = suite.model("cnn")
    data = ModelData(suite, model, "cpu")
    conv = model.layers[0]
    built = get_backend("torch").build([conv], [data.weights(0)], "cpu")
    assert built.note is None and built.prepare_input is None
    asked = replace(conv, params={**conv.params, "channels_last": True})
    built = get_backend("torch").build([asked], [data.weights(0)], "cpu")
    assert built.note.startswith("channels_last (asked for)")
    (x,) = built.prepared([data.input(0)])
    assert x.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("faster", ["channels_last", "NCHW"])
def test_on_cuda_a_conv_layer_runs_in_the_faster_layout(monkeypatch, faster) -> None:
    """Both layouts tried on the layer's shape (a stand-in for the timer here), the faster
    kept, its input prepared to match; torch-compile takes channels_last untimed."""
    suite = load_suite(ROOT / "suites/quickstart.yaml")
    model = suite.model("cnn")
    data = ModelData(suite, model, "cpu")  # on the CPU: only the choice is tested
    tried = []

    def fake_faster(variants, device):
        for name, call in variants.items():
            tried.append((name, tuple(call().shape)))
        return faster, f"{faster}, the faster at build (stand-in)"

    monkeypatch.setattr(torch_eager, "faster_layout", fake_faster)
    built = get_backend("torch").build([model.layers[0]], [data.weights(0)], "cuda")
    assert sorted(tried) == [("NCHW", (2, 8, 17, 17)), ("channels_last", (2, 8, 17, 17))]
    assert built.note.startswith(f"{faster}, the faster at build")
    (x,) = built.prepared([data.input(0)])
    assert x.is_contiguous(memory_format=torch.channels_last) == (faster == "channels_last")
    torch.testing.assert_close(
        built.fn(x), layer_by_layer(model, data)["conv1"], rtol=1e-5, atol=1e-5
    )
    tried.clear()
    compiled = get_backend("torch-compile").forward([model.layers[0]], [data.weights(0)], "cuda")
    assert not tried and compiled.note.startswith("channels_last, as Inductor runs convs")
