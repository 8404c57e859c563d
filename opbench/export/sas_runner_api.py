"""The cuts the SAS script builds with DLPy's layer API (written beside it as sas_layer_api.py).

The manifest gives each such cut (and its baseline) an input of tokens, its layers (Dense,
MultiHeadAttention, LayerNormalization, Res, with DLPy's parameters and source layers) and
its output; the weights of every layer are in the model's HDF5 file, in the layout DLPy's
BERT_Model writes. As BERT_Model does, the input is an InputLayer of width tokens x token size
with the token size set, and the model is built as type RNN; an identity output layer ends
it, as for the ONNX cuts. The cut's own HDF5 file (its layers' groups only) is written into
the weights directory, loaded with dlImportModelWeights (formatType KERAS, with the input's
data spec, as BERT_Model.load_weights passes one) and deleted unless --keep-weights.
"""

import csv
from pathlib import Path

WEIGHTED = ("fc", "mhattention", "layernorm")
LENGTH = "_length_"


def dlpy_layers(spec):
    """The DLPy layers of a cut (or a baseline: no layers), input first, output last."""
    from dlpy.layers import (
        Dense,
        InputLayer,
        LayerNormalization,
        MultiHeadAttention,
        OutputLayer,
        Res,
    )

    inp = spec["input"]
    first = InputLayer(n_channels=1, width=inp["tokens"] * inp["width"], height=1,
                       name=inp["name"])  # fmt: skip
    first._token_size = inp["width"]  # as BERT_Model sets it on its inputs
    made = {inp["name"]: first}
    for entry in spec.get("layers", []):
        c, name = entry["config"], entry["name"]
        src = [made[s] for s in entry["sources"]]
        kind = entry["type"]
        if kind == "dense":
            layer = Dense(n=c["n"], act=c["act"], include_bias=c["include_bias"], name=name,
                          src_layers=src)  # fmt: skip
        elif kind == "mha":
            layer = MultiHeadAttention(n=c["n"], n_attn_heads=c["n_attn_heads"], act=c["act"],
                                       include_bias=c["include_bias"], name=name,
                                       src_layers=src)  # fmt: skip
        elif kind == "layernorm":
            layer = LayerNormalization(name=name, act=c["act"], epsilon=c["epsilon"],
                                       token_size=src[0].output_size, src_layers=src)  # fmt: skip
        elif kind == "res":
            layer = Res(name=name, act=c["act"], src_layers=src)
        else:
            raise ValueError(f"unknown layer type {kind!r} in the manifest")
        made[name] = layer
    last = made[spec["output"]] if spec.get("layers") else first
    width = last.output_size if isinstance(last.output_size, int) else inp["width"]
    output = OutputLayer(name="output", act="identity", include_bias=False, full_connect=False,
                         n=width, src_layers=[last])  # fmt: skip
    return [*made.values(), output]


def upload_tokens(conn, inp, base, table, uploaded, check):
    """The input as a CAS table: one row per batch item, one column per value, and the number
    of tokens in `_length_` (the data spec's length variable)."""
    if table in uploaded:
        return
    import numpy as np

    rows = np.load(Path(base) / inp["file"])
    rows = rows.reshape(rows.shape[0], -1)
    path = Path(base) / (inp["file"] + ".tokens.csv")
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*(f"x{i}" for i in range(rows.shape[1])), LENGTH])
        writer.writerows([*row, inp["tokens"]] for row in rows.tolist())
    check(conn.upload(str(path), importoptions={"filetype": "csv"},
                      casout={"name": table, "replace": True}), "uploading the input")  # fmt: skip
    uploaded.add(table)


def write_cut_weights(model_h5, names, path):
    """The groups of `names` copied from the model's HDF5 file into the cut's own."""
    import h5py

    with h5py.File(model_h5, "r") as src, h5py.File(path, "w") as dst:
        dst.attrs["layer_names"] = [n.encode("utf8") for n in names]
        for name in names:
            src.copy(src[name], dst, name=name)


def import_cut(conn, spec, name, args, model_h5, check, caslib):
    """Build the cut in CAS with DLPy's layer API and load its weights; whether it has any."""
    from dlpy.model import DataSpec, DataSpecNumNomOpts

    layers = dlpy_layers(spec)
    check(conn.retrieve("deeplearn.buildmodel", _messagelevel="error",
                        model={"name": name, "replace": True}, type="RNN"), "buildModel")  # fmt: skip
    for layer in layers:
        check(conn.retrieve("deeplearn.addlayer", _messagelevel="error", model=name,
                            **layer.to_model_params()), f"addLayer {layer.name}")  # fmt: skip
    weighted = [layer.name for layer in layers if layer.type in WEIGHTED]
    if not weighted:
        return False
    weights_dir = Path(args.weights_dir)
    weights_dir.mkdir(parents=True, exist_ok=True)
    path = weights_dir / f"{name}_weights.kerasmodel.h5"
    write_cut_weights(model_h5, weighted, path)
    inp = spec["input"]
    values = [f"x{i}" for i in range(inp["tokens"] * inp["width"])]
    data_spec = DataSpec(type_="NUMNOM", layer=inp["name"], data=values,
                         numeric_nominal_parms=DataSpecNumNomOpts(LENGTH, token_size=inp["width"]))  # fmt: skip
    try:
        check(conn.retrieve("deeplearn.dlimportmodelweights", _messagelevel="error", model=name,
                            modelWeights={"name": name + "_weights", "replace": True},
                            dataSpecs=[data_spec], formatType="KERAS",
                            weightFilePath=path.name, caslib=caslib),
              "dlImportModelWeights")  # fmt: skip
    finally:
        if not args.keep_weights:
            path.unlink(missing_ok=True)
    return True
