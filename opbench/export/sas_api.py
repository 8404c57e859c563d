"""`export sas`, second pass: the cuts DLPy's layer API builds (dlpy_layers.py, dlpy_cuts.py).

After the ONNX pass (sas.py) has said which cuts DLPy's ONNX import keeps, this pass gives the
layer API every cut the import refuses, and every cut that starts from a token input (a
transformer's [batch, S, E]: one input layer and one baseline per model input, whichever API
times its cuts). A cut it builds gets `sas.api = "layers"` with its input, its DLPy layers and
its output; the model gets one HDF5 file of weights in BERT_Model's layout (dlpy_weights.py);
each piece input (a boundary's output, dlpy_cuts.py) gets its data, computed with ONNX Runtime
from the boundary's own cut, and a baseline. Layers whose cut neither API builds keep their
ONNX reason, with the layer API's after it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np

from opbench.export.dlpy_cuts import PIECE_SUFFIX, Plan, cut_layers, plan
from opbench.export.dlpy_weights import layer_arrays, write_hdf5
from opbench.export.model_files import file_stem
from opbench.export.onnx_ops import HINT


def layer_params(proto: Any, model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each layer's op parameters, from the hint on its first ONNX node (onnx_ops.layer_hint);
    a layer without one gets none (the layer API then leaves it alone)."""
    docs = {n.name: n.doc_string for n in proto.graph.node}
    out = {}
    for layer in model["layers"]:
        doc = docs.get(layer["onnx_nodes"][0], "") if layer["onnx_nodes"] else ""
        if doc.startswith(HINT):
            out[layer["name"]] = json.loads(doc[len(HINT) :])["params"]
    return out


def _piece_data(out: Path, model: dict[str, Any], boundary: str) -> np.ndarray:
    """The output of a boundary layer on the model's fixed inputs (its own cut, ONNX Runtime)."""
    import onnxruntime as ort

    cut = next(c for c in model["cuts"] if c["layer"] == boundary)
    session = ort.InferenceSession(str(out / cut["file"]), providers=["CPUExecutionProvider"])
    feeds = {i["name"]: np.load(out / i["file"]) for i in cut["inputs"]}
    return np.asarray(session.run(None, feeds)[0], dtype=np.float32)


def _input_entry(p: Plan, tensor: str, file: str) -> dict[str, Any]:
    shape = p.inputs[tensor]
    tokens, width = (shape[1], shape[2]) if len(shape) == 3 else (1, shape[1])
    from opbench.export.dlpy_layers import dlpy_name

    return {"name": dlpy_name(tensor), "tensor": tensor, "tokens": tokens, "width": width,
            "file": file}  # fmt: skip


def add_layer_api(out: Path, model: dict[str, Any], whole: Any) -> dict[str, str]:
    """Give the layer API the cuts it builds (see the module's docstring); the manifest entry is
    changed in place. Returns, per layer its cut leaves untimed, the layer API's reason."""
    params = layer_params(whole, model)
    layers = [dict(layer, inputs=layer.get("inputs", [])) for layer in model["layers"]]
    model_inputs = {i["name"]: i["shape"] for i in model["inputs"]}
    onnx_ok = {c["layer"] for c in model["cuts"] if c["sas"]["status"] == "ok"}
    p = plan(layers, params, model_inputs, onnx_ok)
    api_cuts: dict[str, dict[str, Any]] = {}
    reasons: dict[str, str] = {}
    for cut in model["cuts"]:
        built, why = cut_layers(p, cut["layer"])
        token_input = built is not None and len(model_inputs.get(built["input"]["tensor"], ())) == 3
        if built is not None and (cut["sas"]["status"] == "refused" or token_input):
            api_cuts[cut["layer"]] = built
        elif cut["sas"]["status"] == "refused":
            reasons[cut["layer"]] = why
    pieces = {b["input"]["tensor"] for b in api_cuts.values()} - set(model_inputs)
    if pieces and importlib.util.find_spec("onnxruntime") is None:
        for layer, built in list(api_cuts.items()):
            if built["input"]["tensor"] in pieces:
                del api_cuts[layer]
                reasons[layer] = (f"it starts from {built['input']['tensor']!r}, whose values "
                                  "export computes with ONNX Runtime (not installed)")  # fmt: skip
    if not api_cuts:
        _layer_status(model, p, api_cuts, reasons, set())
        return reasons
    import onnx

    stem = model["stem"]
    files: dict[str, str] = {i["name"]: i["file"] for i in model["inputs"]}
    for start in sorted({b["input"]["tensor"] for b in api_cuts.values()} - set(files)):
        boundary = start[: -len(PIECE_SUFFIX)]
        path = out / stem / f"{file_stem(start)}.npy"
        np.save(path, _piece_data(out, model, boundary))
        files[start] = path.relative_to(out).as_posix()
        model["baselines"].append({"input": start, "file": None, "inputs": [
            {"name": start, "layer": "", "shape": p.inputs[start], "file": files[start]}]})  # fmt: skip
    used = {b["input"]["tensor"] for b in api_cuts.values()}
    for base in model["baselines"]:
        if base["input"] in used:
            base["sas"] = {
                "api": "layers",
                "input": _input_entry(p, base["input"], files[base["input"]]),
            }
    for cut in model["cuts"]:
        built = api_cuts.get(cut["layer"])
        if built is None:
            continue
        built["input"]["file"] = files[built["input"]["tensor"]]
        cut["sas"] = {"status": "ok", "api": "layers", "problems": [], "stand_ins": [],
                      "onnx_problems": cut["sas"]["problems"], **built}  # fmt: skip
    _layer_status(model, p, api_cuts, reasons, used)
    weights = out / stem / f"{stem}_dlpy.h5"
    named = {entry["name"] for b in api_cuts.values() for entry in b["layers"]}
    whole_data = onnx.load(str(out / model["file"]))  # with the weights
    arrays = layer_arrays(whole_data, layers, p.forms)
    write_hdf5(weights, {k: v for k, v in arrays.items() if k in named})
    model["sas_layer_api"] = {"weights": weights.relative_to(out).as_posix(),
                              "layout": "BERT_Model's HDF5 (dlpy_weights.py)"}  # fmt: skip
    return reasons


def _layer_status(
    model: dict[str, Any], p: Plan, api_cuts: dict[str, dict[str, Any]],
    reasons: dict[str, str], used: set[str],
) -> None:  # fmt: skip
    for layer in model["layers"]:
        name = layer["name"]
        reads = [r[: -len(PIECE_SUFFIX)] if r.endswith(PIECE_SUFFIX) and r not in used
                 and r[: -len(PIECE_SUFFIX)] in p.forms else r for r in p.reads[name]]  # fmt: skip
        if reads != list(layer.get("inputs", [])):
            layer["sas"]["reads"] = reads  # what the CSV's `inputs` column says
        form = p.forms[name]
        if name in api_cuts:
            note = form.why
            layer["sas"].update(status="stand-in" if note else "timed", why=note, remedy="",
                                api="layers")  # fmt: skip
        elif form.kind == "inside" and form.host in api_cuts:
            layer["sas"].update(status="not timed", remedy="", why=(
                f"timed together with {form.host!r}: DLPy's MultiHeadAttention holds the "
                "attention and its output projection"))  # fmt: skip
        elif name in reasons and layer["sas"]["status"] in ("refused", "not timed"):
            layer["sas"]["why"] += f"; DLPy's layer API cannot build it either: {reasons[name]}"
            layer["sas"]["remedy"] = ""
