"""The suite loader on valid suites: defaults and overrides, sweeps, pieces, locations."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench.spec.load import load_suite, load_suite_text, spec_to_dict
from opbench.spec.model import DEFAULT_TOLERANCE, INT8_TOLERANCE, TimingSpec

SUITES = Path(__file__).resolve().parents[2] / "data" / "suites"
REPO = Path(__file__).resolve().parents[3]


def test_normative_example_loads() -> None:
    suite = load_suite(SUITES / "example.yaml")
    assert suite.name == "encoder"
    assert suite.description == "BERT-base encoder layer"
    assert suite.source == str(SUITES / "example.yaml")
    (model,) = suite.models
    assert (model.name, model.base_name, model.batch, model.fuse) == (
        "bert_layer",
        "bert_layer",
        8,
        False,
    )
    assert [layer.name for layer in model.layers] == [
        "ln1",
        "qkv",
        "attn",
        "proj",
        "ffn_up",
        "ffn_down",
    ]
    shapes = [(layer.input_shape, layer.output_shape) for layer in model.layers]
    assert shapes == [
        ((8, 512, 768), (8, 512, 768)),
        ((8, 512, 768), (8, 512, 2304)),
        ((8, 512, 2304), (8, 512, 768)),
        ((8, 512, 768), (8, 512, 768)),
        ((8, 512, 768), (8, 512, 3072)),
        ((8, 512, 3072), (8, 512, 768)),
    ]
    qkv = model.layer("qkv")
    assert qkv.quant == "int8" and qkv.params["out_features"] == 2304 and qkv.params["bias"] is True
    assert model.layer("attn").params == {
        "heads": 12,
        "causal": False,
        "packed_qkv": True,
        "kv_heads": None,
        "kv_len": None,
        "separate_qkv": False,
        "quant": "none",
        "layout": "rows",
        "mask": False,
        "append": False,
    }
    assert model.layer("ffn_up").params["activation"] == "gelu"
    assert model.layer("ffn_down").reference_name == "FC_2"
    assert model.layer("proj").reference_name is None
    for layer in model.layers:
        assert layer.dtype == "float16"
        assert layer.backends == ("torch", "triton")
        assert layer.target_speedup == 1.5
        assert layer.tolerance is None
        assert layer.timing == TimingSpec(25.0, 100.0, 5, True, False)
    assert model.layer("ln1").effective_tolerance == DEFAULT_TOLERANCE["float16"]
    assert qkv.effective_tolerance == INT8_TOLERANCE
    assert [all(p is None for p in ps) for ps in model.graph.producers] == [True] + [False] * 5


@pytest.mark.parametrize("path", sorted((REPO / "suites").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_suites_load(path: Path) -> None:
    suite = load_suite(path)
    assert suite.models and all(model.layers for model in suite.models)


def test_builtin_defaults_when_nothing_is_set() -> None:
    (model,) = load_suite(SUITES / "builtin_defaults.yaml").models
    relu, q = model.layers
    assert model.batch == 1 and model.fuse is False
    assert relu.dtype == "float32"
    assert relu.backends == ("torch", "triton")
    assert relu.target_speedup == 1.5
    assert (
        relu.tolerance is None and relu.effective_tolerance == DEFAULT_TOLERANCE["float32"] == 1e-4
    )
    assert relu.regression_threshold is None and relu.reference_name is None
    assert relu.timing == TimingSpec()
    assert q.effective_tolerance == INT8_TOLERANCE


def test_defaults_model_and_layer_overrides() -> None:
    suite = load_suite(SUITES / "overrides.yaml")
    plain = suite.model("from_defaults").layer("a")
    assert plain.dtype == "float16"
    assert plain.backends == ("torch", "triton")
    assert plain.tolerance == 0.01 and plain.effective_tolerance == 0.01
    assert plain.target_speedup == 2.0
    assert plain.regression_threshold == 0.1
    assert plain.timing == TimingSpec(
        warmup_ms=7, rep_ms=30, rounds=4, flush_l2=True, cuda_graph=False
    )

    model = suite.model("model_level")
    inherits = model.layer("inherits")
    assert inherits.dtype == "bfloat16"
    assert inherits.backends == ("torch",)
    assert inherits.tolerance == 0.02
    assert inherits.target_speedup == 3.0
    assert inherits.regression_threshold == 0.2
    # timing merges field by field: rounds from the model, the rest from defaults.
    assert inherits.timing == TimingSpec(
        warmup_ms=7, rep_ms=30, rounds=9, flush_l2=True, cuda_graph=False
    )

    layer = model.layer("overrides_all")
    assert layer.dtype == "float32"
    assert layer.backends == ("torch-compile", "triton")
    assert layer.tolerance == 0.5
    assert layer.allow_loose_tolerance and layer.loose_tolerance
    assert layer.target_speedup == 1.25
    assert layer.regression_threshold == 0.3
    assert layer.reference_name == "SAS_FC"
    assert layer.timing == TimingSpec(
        warmup_ms=7, rep_ms=11, rounds=9, flush_l2=False, cuda_graph=False
    )


def test_null_tolerance_on_a_layer_falls_back_to_the_nearest_level() -> None:
    # `tolerance: null` on the layer means "not set here": the model's 0.02 applies.
    layer = load_suite(SUITES / "overrides.yaml").model("model_level").layer("int8_default_tol")
    assert layer.quant == "int8"
    assert layer.tolerance == 0.02


def test_batch_sweep_expands_into_named_instances() -> None:
    suite = load_suite(SUITES / "sweep_chain.yaml")
    assert [m.name for m in suite.models] == ["mlp[batch=1]", "mlp[batch=3]", "mlp[batch=8]"]
    for model, batch in zip(suite.models, (1, 3, 8), strict=True):
        assert model.base_name == "mlp" and model.batch == batch
        fc, act, side, flat = model.layers
        assert fc.input_shape == (batch, 5, 12) and fc.output_shape == (batch, 5, 7)
        assert act.input_shape == (batch, 5, 7) and act.output_shape == (batch, 5, 7)
        assert side.input_shape == (batch, 6) and side.output_shape == (batch, 4)
        assert flat.input_shape == (batch, 4) and flat.output_shape == (batch, 4)
    assert suite.model("mlp[batch=3]").batch == 3
    with pytest.raises(KeyError):
        suite.model("mlp")


def test_single_element_sweep_is_still_named_as_a_sweep() -> None:
    text = (
        "name: s\nmodels:\n  - {name: m, batch: [4], input: [3], layers: [{name: a, op: relu}]}\n"
    )
    (model,) = load_suite_text(text).models
    assert (model.name, model.batch) == ("m[batch=4]", 4)


def test_layer_input_starts_a_new_piece() -> None:
    model = load_suite(SUITES / "sweep_chain.yaml").models[0]
    assert [all(p is None for p in ps) for ps in model.graph.producers] == [
        True, False, True, False
    ]  # fmt: skip
    # The layer after the new piece takes the new piece's output, not the old one's.
    assert model.layer("flat").input_shape == model.layer("side").output_shape


def test_file_and_line_of_models_and_layers() -> None:
    path = SUITES / "sweep_chain.yaml"
    lines = path.read_text().splitlines()
    model = load_suite(path).models[0]
    assert model.line is not None and "name: mlp" in lines[model.line - 1]
    for layer in model.layers:
        assert f"name: {layer.name}," in lines[layer.line - 1]


def test_block_style_layer_line_is_its_first_line() -> None:
    path = SUITES / "overrides.yaml"
    lines = path.read_text().splitlines()
    layer = load_suite(path).model("model_level").layer("overrides_all")
    assert lines[layer.line - 1].strip() == "- name: overrides_all"


def test_yaml_merge_keys_reuse_a_layer() -> None:
    text = """name: s
models:
  - name: m
    input: [8]
    layers:
      - &fc {name: a, op: linear, out_features: 4, activation: relu}
      - {<<: *fc, name: b, out_features: 6}
"""
    a, b = load_suite_text(text, "f.yaml").models[0].layers
    assert a.params["activation"] == b.params["activation"] == "relu"
    assert b.params["out_features"] == 6 and b.input_shape == (1, 4)
    assert (a.line, b.line) == (6, 7)


def test_parameters_are_normalised() -> None:
    text = """name: s
models:
  - name: m
    input: [3, 9, 9]
    layers:
      - {name: c, op: conv2d, out_channels: 6, kernel_size: [3, 1], stride: 2, activation: RELU}
      - {name: p, op: maxpool2d, kernel_size: 2}
"""
    conv, pool = load_suite_text(text).models[0].layers
    assert conv.params["kernel_size"] == (3, 1)
    assert conv.params["stride"] == (2, 2)
    assert conv.params["padding"] == (0, 0) and conv.params["dilation"] == (1, 1)
    assert conv.params["activation"] == "relu"
    assert pool.params["stride"] is None  # means "= kernel_size"
    assert conv.output_shape == (1, 6, 4, 5)
    assert pool.output_shape == (1, 6, 2, 2)


def test_spec_to_dict_is_plain_data() -> None:
    import json

    suite = load_suite(SUITES / "sweep_chain.yaml")
    data = json.loads(json.dumps(spec_to_dict(suite), allow_nan=False))
    assert [m["name"] for m in data["models"]] == [m.name for m in suite.models]
    first = data["models"][0]["layers"][0]
    assert first["name"] == "fc" and first["params"]["out_features"] == 7
    assert first["input_shape"] == [1, 5, 12]
    assert first["timing"] == {
        "warmup_ms": 0,
        "rep_ms": 1,
        "rounds": 2,
        "flush_l2": True,
        "cuda_graph": False,
        "target_ci": 0.01,
        "min_ms": 100.0,
        "max_ms": 1000.0,
    }
