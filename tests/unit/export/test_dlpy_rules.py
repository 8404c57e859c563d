"""export/dlpy_rules.py against DLPy's own ONNX import (sas-dlpy 1.3, installed).

Every cut the rules accept is converted by the same code the SAS script runs (sas_runner's
dlpy_layers: DLPy's onnx_to_sas with the script's output layer and substitutions), and the
DLPy model is checked against the ONNX graph: every compute node is a layer, linked to the
layers the graph says, every activation sits on the right layer, the output layer ends the
cut. Each rule is shown on a small model: DLPy raises, or builds something else than the
graph, and the rules say so before anyone goes to SAS.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opbench.export import sas_runner
from opbench.export.cuts import value_shapes
from opbench.export.dlpy_rules import apply_stand_ins, problems, softmax_output, stand_ins
from opbench.export.model_files import write_model_files
from tests.unit.export.onnx_graphs import Builder, branching, residual, resnet50

onnx = pytest.importorskip("onnx")
pytest.importorskip("dlpy")
pytest.importorskip("h5py")

_COMPUTE = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
            "Concat", "Gemm", "MatMul"}  # fmt: skip
_ACT = {"Relu": "RELU", "Tanh": "TANH", "Log": "LOGISTIC"}


def dlpy_import(proto: Any, tmp_path: Path, name: str = "m") -> list[Any]:
    """The DLPy layers of a model, exactly as the SAS script makes them."""
    path = tmp_path / f"{name}.onnx"
    onnx.save(proto, str(path))
    subs = [s.as_json() for s in stand_ins(proto)]
    output = "softmax" if softmax_output(proto) else "identity"  # as export decides
    cut = {"file": path.name, "sas": {"stand_ins": subs, "output_layer": output}}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return sas_runner.dlpy_layers(cut, name, base=tmp_path)
    finally:
        os.chdir(cwd)


def unfaithful(proto: Any, layers: list[Any]) -> str | None:
    """How DLPy's model differs from the graph (after the substitutions), or None."""
    graph = apply_stand_ins(proto, stand_ins(proto)).graph
    weights = {t.name for t in graph.initializer}
    maker = {o: n for n in graph.node for o in n.output}

    def compute(n) -> bool:
        if n.op_type in ("Add", "Sum"):
            return all(i not in weights for i in n.input)
        return n.op_type in _COMPUTE

    def sources(t: str) -> list[str]:
        if t in weights:
            return []
        n = maker.get(t)
        if n is None:
            return ["<input>"]
        return [n.name] if compute(n) else [s for i in n.input for s in sources(i)]

    by_name = {layer.name: layer for layer in layers}
    input_name = layers[0].name
    acts: dict[str, str] = {}
    for n in graph.node:
        if compute(n):
            layer = by_name.get(n.name)
            if layer is None:
                return f"{n.name} is not a DLPy layer"
            want = sorted({s.replace("<input>", input_name) for i in n.input for s in sources(i)})
            got = sorted(s.name for s in layer.src_layers)
            if want != got:
                return f"{n.name} reads {want}, DLPy links {got}"
            operands = [i for i in n.input if i not in weights]
            if n.op_type in ("Add", "Sum", "Concat") and len(got) != len(operands):
                return f"{n.name} joins {len(operands)} tensors, DLPy {len(got)}"
        elif n.op_type in _ACT:
            (src,) = sources(n.input[0]) or ["<none>"]
            acts[src] = _ACT[n.op_type] if src not in acts else "<twice>"
        elif n.op_type == "Softmax" and str(layers[-1].config.get("act")).upper() != "SOFTMAX":
            return f"{n.name}: no layer of DLPy's model applies the Softmax"
    for layer in layers[1:-1]:
        act = str(layer.config.get("act") or "identity").upper()
        want = acts.get(layer.name, "IDENTITY")
        if act != want:
            return f"{layer.name} has act {act}, the graph {want}"
    missing = sorted(set(acts) - set(by_name))
    if missing:
        return f"activations on {missing}, which are no DLPy layers (dropped)"
    out = graph.output[0].name
    (end,) = sources(out)
    if layers[-1].name == end:  # DLPy made the last Dense layer the (softmax) output layer
        return None
    if layers[-1].src_layers[0].name != end.replace("<input>", input_name):
        return f"the output layer follows {layers[-1].src_layers[0].name}, the graph ends at {end}"
    return None


@pytest.mark.parametrize("make", [residual, branching], ids=["residual", "branching"])
def test_every_cut_passes_the_rules_and_dlpy_imports_it_faithfully(make, tmp_path: Path):
    b: Builder = make()
    entry, _ = write_model_files(b.model([b.out]), b.name, b.manifest_layers(), b.feed(), tmp_path)
    shapes = value_shapes(onnx.load(str(tmp_path / entry["file"]), load_external_data=False))
    for cut in entry["cuts"]:
        proto = onnx.load(str(tmp_path / cut["file"]))
        assert problems(proto, shapes) == [], cut["layer"]
        layers = dlpy_import(proto, tmp_path, f"cut{cut['cut']}")
        assert unfaithful(proto, layers) is None, cut["layer"]
        weights = tmp_path / f"cut{cut['cut']}_weights.onnxmodel.h5"
        assert weights.is_file()
    # joins became SAS residual and concat layers, each linking its branches
    last = dlpy_import(onnx.load(str(tmp_path / entry["cuts"][-1]["file"])), tmp_path)
    kinds = {layer.name: layer.type for layer in last}
    if b.name == "residual":
        assert kinds["b1_add"] == kinds["b2_add"] == "residual"
        srcs = {s.name for s in next(x for x in last if x.name == "b1_add").src_layers}
        assert srcs == {"b1_conv3_bn", "b1_down_bn"}
    else:
        assert kinds["cat"] == kinds["cat2"] == "concat"


def _tiny(build) -> Any:
    b = Builder("tiny", (2, 3, 8, 8), seed=3)
    out = build(b)
    return b.model([out])


# Each case: a model that breaks one rule, the rule's words, and how DLPy shows it: it raises
# ("raises"), or its model differs from the graph ("differs"), or it imports without a sign
# and the rule stands on DLPy's code ("silent": which line of sas_onnx_parse.py).
CASES = {
    "transpose": (lambda b: b.transpose("t", b.conv("c", "input", 4), [0, 1, 3, 2]),
                  "has no Transpose", "raises"),
    "mul": (lambda b: b.mul("m", b.conv("c", "input", 4), b.conv("d", "input", 4)),
            "has no Mul", "raises"),
    "relu_after_pool": (lambda b: b.relu("r", b.pool("p", b.conv("c", "input", 4), "MaxPool", 2, 2)),
                        "MaxPool layer takes no activation", "differs"),
    "relu_on_input": (lambda b: b.conv("c", b.relu("r", "input"), 4),
                      "here there is none", "differs"),
    "model_input_in_a_join": (lambda b: b.add("a", b.conv("c", "input", 3, 3, 1, 1), "input"),
                              "the model input is an operand", "differs"),
    "two_activations": (lambda b: b.unary("t", b.relu("r", b.conv("c", "input", 4)), "Tanh", "tanh"),
                        "a second activation", "differs"),
    "softmax_in_the_middle": (lambda b: b.softmax("s", b.conv("c", "input", 4)),
                              "only as the activation of the output layer", "differs"),
    "concat_on_width": (lambda b: b.concat("k", [b.conv("c", "input", 4), b.conv("d", "input", 4)], axis=3),
                        "concatenates on channels", "silent: onnx_extract_concat ignores axis"),
    "add_of_two_shapes": (lambda b: b.add("a", b.conv("c", "input", 4), b.conv("d", "input", 1)),
                          "a residual layer sums equal shapes", "silent: Res takes any sources"),
    "conv_after_flatten": (lambda b: b.gemm("g", b.relu("r", b.flatten("f", b.conv("c", "input", 2))), 3),
                           None, "none"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_each_rule_matches_what_dlpy_does(case, tmp_path: Path):
    build, words, dlpy = CASES[case]
    proto = _tiny(build)
    found = problems(proto)
    if words is None:
        assert found == []
    else:
        assert any(words in p.why for p in found), [p.why for p in found]
    if dlpy == "raises":
        with pytest.raises(sas_runner.PrefixError, match="DLPy cannot import it"):
            dlpy_import(proto, tmp_path)
        return
    layers = dlpy_import(proto, tmp_path)
    if dlpy == "differs":
        assert unfaithful(proto, layers) is not None
    else:  # imports, and its model has every layer where the graph has it
        assert unfaithful(proto, layers) is None


def test_relu6_is_timed_as_relu(tmp_path: Path):
    proto = _tiny(lambda b: b.conv("d", b.relu6("r6", b.conv("c", "input", 4)), 4))
    assert [p.op for p in problems(proto)] == ["Clip"]  # DLPy has no Clip
    (sub,) = stand_ins(proto)
    assert (sub.node, sub.was, sub.op) == ("r6", "Clip", "Relu")
    assert "ReLU6 timed as ReLU" in sub.note
    assert problems(apply_stand_ins(proto, [sub])) == []
    layers = dlpy_import(proto, tmp_path)
    conv = next(layer for layer in layers if layer.name == "c")
    assert conv.config["act"] == "RELU"  # the stand-in sits on the conv, as a ReLU would


def test_sigmoid_is_dlpys_logistic_activation(tmp_path: Path):
    proto = _tiny(
        lambda b: b.conv("d", b.unary("s", b.conv("c", "input", 4), "Sigmoid", "sigmoid"), 4)
    )
    assert [p.op for p in problems(proto)] == ["Sigmoid"]
    (sub,) = stand_ins(proto)
    assert (sub.node, sub.op) == ("s", "Log")
    layers = dlpy_import(proto, tmp_path)
    assert next(x for x in layers if x.name == "c").config["act"] == "LOGISTIC"
    assert unfaithful(proto, layers) is None


def test_the_output_layer_is_identity_and_sized_like_dlpy_sizes_it(tmp_path: Path):
    proto = _tiny(lambda b: b.conv("c", "input", 5, 3, 1, 1))
    layers = dlpy_import(proto, tmp_path)
    out = layers[-1]
    assert out.type == "output" and str(out.config["act"]).upper() == "IDENTITY"
    assert out.config["full_connect"] is False and out.config["n"] == 5
    params = out.to_model_params()
    assert params["layer"]["n"] == 5 and params["srclayers"] == ["c"]


def test_resnet50_every_cut_passes_the_rules(tmp_path: Path):
    """Issue 28's target: 100% of ResNet-50's cuts loadable by DLPy's rules; DLPy itself
    imports the cuts of a downsample block faithfully (all 122 would write 6 GB of HDF5)."""
    b = resnet50()
    entry, _ = write_model_files(b.model([b.out]), b.name, b.manifest_layers(), b.feed(), tmp_path)
    shapes = value_shapes(onnx.load(str(tmp_path / entry["file"]), load_external_data=False))
    refused = {}
    for cut in entry["cuts"]:
        found = problems(onnx.load(str(tmp_path / cut["file"]), load_external_data=False), shapes)
        if found:
            refused[cut["layer"]] = found
    assert refused == {}
    for layer in ("layer1_0_down", "layer1_0_add", "layer1_0_out"):
        cut = next(c for c in entry["cuts"] if c["layer"] == layer)
        proto = onnx.load(str(tmp_path / cut["file"]))
        assert unfaithful(proto, dlpy_import(proto, tmp_path, layer)) is None, layer
    assert np.isfinite(entry["weights_bytes"])
