"""The weights of DLPy layer-API layers, in the HDF5 layout DLPy's BERT_Model writes.

`dlpy.transformers.bert_model.BERT_Model._write_huggingface_bert_hdf5` (sas-dlpy 1.3) writes,
for CAS's `dlImportModelWeights` with formatType KERAS: a file attribute `layer_names` (the
layers with weights), and per layer a group `<layer>` holding the datasets
`<layer>/kernel:0` and `<layer>/bias:0` (so `/<layer>/<layer>/kernel:0`), listed in the
group's `weight_names` attribute. What each kernel holds (bert_utils.extract_pytorch_parms):

- Dense: the PyTorch weight as it is, (out, in) (SAS's y = A·x + b, A column-major); bias (out);
- MultiHeadAttention: Wq, Wk, Wv and Wo each transposed to (in, out) and put side by side,
  (E, 3E + n); bias bq | bk | bv | bo;
- LayerNormalization: the scale (E) as kernel, the shift (E) as bias.

The values come from the export's own ONNX model (the suite's seeded weights), read from the
nodes of each layer: a MatMul's Wᵀ or a Gemm's W, the bias Add, LayerNormalization's scale
and shift, the RMSNorm form's weight (its LayerNormalization stand-in gets a zero shift).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from opbench.export.dlpy_layers import Form, dlpy_name


def _node_weights(proto: Any, nodes: Iterable[str]) -> list[tuple[Any, int, np.ndarray]]:
    """(node, input index, value) of every initializer the layer's nodes read."""
    from onnx import numpy_helper

    inits = {t.name: t for t in proto.graph.initializer}
    wanted = set(nodes)
    found = []
    for node in proto.graph.node:
        if node.name in wanted:
            for i, t in enumerate(node.input):
                if t in inits:
                    found.append((node, i, numpy_helper.to_array(inits[t]).astype(np.float32)))
    return found


def linear_weights(proto: Any, nodes: Iterable[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """(W as (out, in), bias or None) of a linear layer's ONNX form."""
    weight = bias = None
    for node, i, value in _node_weights(proto, nodes):
        if node.op_type == "MatMul" and i == 1:
            weight = value.T
        elif node.op_type == "Gemm" and i == 1:
            transposed = any(a.name == "transB" and a.i for a in node.attribute)
            weight = value if transposed else value.T
        elif node.op_type == "Gemm" and i == 2 or node.op_type == "Add":
            bias = value.reshape(-1)
    if weight is None:
        raise ValueError(f"no MatMul/Gemm weight among nodes {list(nodes)}")
    return weight, bias


def norm_weights(proto: Any, nodes: Iterable[str], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift) of a LayerNormalization, or of the RMSNorm form (shift zero)."""
    found = _node_weights(proto, nodes)
    ln = [(n, i, v) for n, i, v in found if n.op_type == "LayerNormalization"]
    if ln:
        by_index = {i: v.reshape(-1) for _n, i, v in ln}
        return by_index[1], by_index.get(2, np.zeros(width, np.float32))
    scale = [v.reshape(-1) for n, _i, v in found if n.op_type == "Mul" and v.size == width]
    if not scale:
        raise ValueError(f"no norm scale among nodes {list(nodes)}")
    return scale[-1], np.zeros(width, np.float32)


def _mha(
    proto: Any, form: Form, by: Mapping[str, Any], o_proj: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """The MultiHeadAttention's kernel (E, 3E + n) and bias, as BERT_Model lays them out;
    `o_proj` is the output projection, which carries it."""
    *projections, _attention = form.absorbs
    parts, biases = [], []
    for name in projections:
        w, b = linear_weights(proto, by[name]["onnx_nodes"])
        rows = np.split(w, len(w) // w.shape[1]) if len(projections) == 1 else [w]
        parts += rows
        bs = np.split(b, len(rows)) if b is not None else [None] * len(rows)
        biases += bs
    w, b = linear_weights(proto, by[o_proj]["onnx_nodes"])
    parts.append(w)
    biases.append(b)
    kernel = np.concatenate([p.T for p in parts], axis=1)
    if not form.config.get("include_bias", True):
        return kernel, None
    bias = np.concatenate([
        b if b is not None else np.zeros(p.shape[0], np.float32) for p, b in zip(parts, biases, strict=True)
    ])  # fmt: skip
    return kernel, bias


def layer_arrays(
    proto: Any, layers: Sequence[Mapping[str, Any]], found: Mapping[str, Form]
) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Every weighted DLPy layer of the model: DLPy name -> (kernel, bias or None)."""
    by = {layer["name"]: layer for layer in layers}
    out: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for layer in layers:
        name = layer["name"]
        form = found.get(name)
        if form is None:
            continue
        if form.kind == "dense":
            w, b = linear_weights(proto, layer["onnx_nodes"])
            out[dlpy_name(name)] = (w, b if form.config.get("include_bias", True) else None)
        elif form.kind == "mha":
            out[dlpy_name(name)] = _mha(proto, form, by, name)
        elif form.kind == "layernorm":
            out[dlpy_name(name)] = norm_weights(
                proto, layer["onnx_nodes"], layer["output_shape"][-1]
            )
    return out


def write_hdf5(path: Path, arrays: Mapping[str, tuple[np.ndarray, np.ndarray | None]]) -> None:
    """The weights in BERT_Model's HDF5 layout (see the module's docstring)."""
    import h5py

    with h5py.File(path, "w") as fh:
        fh.attrs["layer_names"] = [name.encode() for name in arrays]
        for name, (kernel, bias) in arrays.items():
            group = fh.create_group(name)
            names = [f"{name}/kernel:0".encode()]
            group.create_dataset(names[0].decode(), data=kernel)
            if bias is not None:
                names.append(f"{name}/bias:0".encode())
                group.create_dataset(names[1].decode(), data=bias)
            group.attrs["weight_names"] = names
