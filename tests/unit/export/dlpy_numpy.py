"""What DLPy's layer-API layers compute, in numpy, from the HDF5 file the SAS script loads.

The stand-in CAS server cannot score, so the tests hold this against each layer's output
(ONNX Runtime on the cut's ONNX file). It is read off DLPy's layer definitions and BERT_Model's
weight layout (dlpy/layers.py, dlpy/transformers/bert_utils.py): Dense y = A·x + b with A
stored (out, in); MultiHeadAttention with its packed kernel (E, 3E + n) = Wqᵀ | Wkᵀ | Wvᵀ | Woᵀ,
heads split along the width, softmax(q·kᵀ/√d)·v; LayerNormalization over the token's width;
Res the sum of its sources; GELU the erf form, RELU, TANH, SIGMOID (LOGISTIC).
"""

from __future__ import annotations

import math

import numpy as np


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


ACTS = {"identity": lambda y: y, "relu": lambda y: np.maximum(y, 0.0), "gelu": lambda y: _gelu(y),
        "tanh": np.tanh, "sigmoid": lambda y: 1 / (1 + np.exp(-y))}  # fmt: skip


def dlpy_forward(spec: dict, h5, x: np.ndarray) -> np.ndarray:
    """What DLPy's layer definitions compute, from the HDF5 weights BERT_Model's way."""
    values = {spec["input"]["name"]: x}
    for entry in spec["layers"]:
        name, c = entry["name"], entry["config"]
        src = [values[s] for s in entry["sources"]]
        group = h5[name] if name in h5 else None
        kernel = group[f"{name}/kernel:0"][()] if group is not None else None
        bias = group[f"{name}/bias:0"][()] if group is not None else None
        if entry["type"] == "dense":  # kernel (out, in)
            y = src[0] @ kernel.T + bias
        elif entry["type"] == "mha":  # kernel (E, 3E + n): Wqᵀ | Wkᵀ | Wvᵀ | Woᵀ
            e, heads = src[0].shape[-1], c["n_attn_heads"]
            q, k, v = (src[0] @ kernel[:, i * e : (i + 1) * e] + bias[i * e : (i + 1) * e]
                       for i in range(3))  # fmt: skip
            split = [
                t.reshape(*t.shape[:-1], heads, e // heads).swapaxes(-2, -3) for t in (q, k, v)
            ]
            scores = split[0] @ split[1].swapaxes(-1, -2) / math.sqrt(e // heads)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            weights /= weights.sum(-1, keepdims=True)
            ctx = (weights @ split[2]).swapaxes(-2, -3).reshape(q.shape)
            y = ctx @ kernel[:, 3 * e :] + bias[3 * e :]
        elif entry["type"] == "layernorm":
            mean = src[0].mean(-1, keepdims=True)
            var = src[0].var(-1, keepdims=True)
            y = (src[0] - mean) / np.sqrt(var + c["epsilon"]) * kernel + bias
        else:  # res
            y = sum(src)
        act = c.get("act", "identity")
        if act not in ACTS:
            raise ValueError(f"no numpy form for DLPy's act {act!r}")
        values[name] = ACTS[act](y)
    return values[spec["output"]]
