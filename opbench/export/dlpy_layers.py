"""The cuts DLPy's ONNX import refuses, built with DLPy's layer API instead (docs/sas.md).

DLPy builds BERT from Hugging Face weights with its layer API (`dlpy.transformers.bert_model`):
an InputLayer of tokens, MultiHeadAttention (which holds its own q, k, v and output
projections), Res for the residual adds, LayerNormalization, and Dense with an activation.
This module says what each layer of a model becomes in that API (`forms`), where a model
must start a piece of its own because what comes before cannot be built (`pieces`), and which
DLPy layers build each cut (`cut_layers`), as JSON for the manifest; the SAS script makes them
with `dlpy.layers`. It works on manifest entries and the layers' op parameters only (no DLPy,
no weights: dlpy_weights.py writes those).

What DLPy's layer API has no equivalent for is named per layer with the reason: RoPE, SwiGLU's
product, SiLU, a causal mask and grouped kv heads (MultiHeadAttention has neither parameter),
a KV cache, and the image-to-token reshapes of a ViT's patch embedding.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The suite's activations in DLPy's names (BERT_Model gives Dense its `hidden_act`, 'gelu').
ACTS = {"none": "identity", "relu": "relu", "gelu": "gelu", "tanh": "tanh", "sigmoid": "sigmoid"}
# Timed with a stand-in that moves the same bytes: (DLPy's act, the note).
ACT_STAND_INS = {
    "gelu_tanh": ("gelu", "GELU (tanh approximation) timed as DLPy's GELU"),
    "relu6": ("relu", "ReLU6 timed as ReLU: DLPy has no clipped ReLU"),
}
_ACT_OPS = {"relu", "gelu", "tanh", "sigmoid", "relu6"}
_TAKES_ACT = {"dense", "layernorm", "res", "mha"}
NO_FORM = {
    "rope": "DLPy has no rotary position embedding (RoPE)",
    "mul": "DLPy has no elementwise product of two activations (SwiGLU's product)",
    "silu": "DLPy has no SiLU (swish) activation",
    "softmax": "DLPy applies softmax inside MultiHeadAttention or in the output layer only",
}


@dataclass(frozen=True)
class Form:
    """What one suite layer becomes in DLPy's layer API.

    kind: dense, layernorm, res, mha (the attention's output projection carries the
        MultiHeadAttention), act (an activation folded into `host`), inside (the attention
        itself, inside the MultiHeadAttention that `host` carries), none (no equivalent).
    config: DLPy's parameters of the layer (n, act, epsilon, n_attn_heads, include_bias).
    why: for none, why not; otherwise the stand-in's note, if it is timed with one.
    absorbs: for mha, the q/k/v projections and the attention it holds.
    """

    kind: str
    config: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""
    host: str = ""
    absorbs: tuple[str, ...] = ()


def dlpy_name(name: str) -> str:
    """A layer name as DLPy and CAS take it (letters, digits, underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _rank_ok(layer: Mapping[str, Any]) -> bool:
    return len(layer["input_shapes"][0]) in (2, 3)


def _single_readers(layers: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    readers: dict[str, list[str]] = {}
    for layer in layers:
        for read in layer["inputs"]:
            readers.setdefault(read, []).append(layer["name"])
    return readers


def _attention(
    att: Mapping[str, Any], p: Mapping[str, Any], by: Mapping[str, Any],
    params: Mapping[str, Mapping[str, Any]], readers: Mapping[str, list[str]],
) -> tuple[str, list[str], str]:  # fmt: skip
    """(why not, q/k/v projections, output projection) of an attention layer."""
    if p.get("causal"):
        return "DLPy's MultiHeadAttention has no causal mask", [], ""
    if (p.get("kv_heads") or p["heads"]) != p["heads"]:
        return "DLPy's MultiHeadAttention has no kv-head count (grouped-query attention)", [], ""
    if p.get("kv_len") is not None:
        return "DLPy's MultiHeadAttention has no KV cache", [], ""
    projections = [r for r in att["inputs"] if r in by]
    if len(projections) != len(att["inputs"]) or any(
        by[r]["op"] != "linear" or params.get(r, {}).get("activation", "none") != "none"
        or readers.get(r) != [att["name"]] for r in projections
    ):  # fmt: skip
        return ("DLPy's MultiHeadAttention makes q, k and v itself: the attention must read "
                "linear projections (no activation) that nothing else reads"), [], ""  # fmt: skip
    sources = {tuple(by[r]["inputs"]) for r in projections}
    width = by[projections[0]]["input_shapes"][0][-1]
    if len(sources) != 1 or len(next(iter(sources))) != 1:
        return (
            "DLPy's MultiHeadAttention projects one input: q, k and v read different ones",
            [],
            "",
        )
    if att["output_shape"][-1] != width:
        return (f"DLPy's MultiHeadAttention attends in the input's width ({width}); this "
                f"attention's is {att['output_shape'][-1]}"), [], ""  # fmt: skip
    after = readers.get(att["name"], [])
    if len(after) != 1 or by[after[0]]["op"] != "linear":
        return ("DLPy's MultiHeadAttention ends in its output projection: the attention must "
                "be read by one linear layer only"), [], ""  # fmt: skip
    return "", projections, after[0]


def forms(
    layers: Sequence[Mapping[str, Any]], params: Mapping[str, Mapping[str, Any]]
) -> dict[str, Form]:
    """What each layer (manifest entries, walk order) becomes; `params`: each layer's op
    parameters."""
    by = {layer["name"]: layer for layer in layers}
    readers = _single_readers(layers)
    out: dict[str, Form] = {}
    for layer in layers:
        name, op, p = layer["name"], layer["op"], params.get(layer["name"])
        if p is None:
            out.setdefault(name, Form("none", why="no op parameters in the ONNX file"))
            continue
        if op == "attention":
            why, projections, o_proj = _attention(layer, p, by, params, readers)
            if why:
                out[name] = Form("none", why=why)
                continue
            o = params.get(o_proj, {})
            if "out_features" not in o:
                out[name] = Form("none", why="no op parameters for its output projection")
                continue
            act = o.get("activation", "none")
            biased = [bool(params.get(r, {}).get("bias", True)) for r in [*projections, o_proj]]
            out[name] = Form("inside", host=o_proj)
            out[o_proj] = Form(
                "mha",
                {"n": o["out_features"], "n_attn_heads": p["heads"],
                 "act": ACTS.get(act, act), "include_bias": any(biased)},
                why=("attention and its output projection timed as one DLPy "
                     "MultiHeadAttention, which also makes q, k and v: their projection's time "
                     "is its own cut's"),
                absorbs=(*projections, name),
            )  # fmt: skip
        elif name in out:
            continue  # an output projection, already the MultiHeadAttention
        elif not _rank_ok(layer):
            out[name] = Form("none", why=f"DLPy's layer API builds token models here; {op} "
                             f"reads a rank-{len(layer['input_shapes'][0])} tensor")  # fmt: skip
        elif op == "linear":
            act = p.get("activation", "none")
            note = ""
            if act in ACT_STAND_INS:
                act, note = ACT_STAND_INS[act]
            elif act not in ACTS:
                out[name] = Form("none", why=f"DLPy has no {act} activation")
                continue
            config = {"n": p["out_features"], "act": ACTS.get(act, act),
                      "include_bias": bool(p.get("bias", True))}  # fmt: skip
            out[name] = Form("dense", config, why=note)
        elif op in ("layernorm", "rmsnorm"):
            note = ""
            if op == "rmsnorm":
                note = ("RMSNorm timed as LayerNormalization (DLPy has no RMSNorm; the same "
                        "bytes, one more reduction), with zero shift")  # fmt: skip
            out[name] = Form("layernorm", {"epsilon": p.get("eps", 1e-5), "act": "identity"},
                             why=note)  # fmt: skip
        elif op == "add":
            shapes = {tuple(s) for s in layer["input_shapes"]}
            if len(layer["inputs"]) != 2 or len(shapes) != 1:
                out[name] = Form("none", why="DLPy's Res adds equal shapes of two layers")
            else:
                out[name] = Form("res", {"act": "identity"})
        elif op in _ACT_OPS:
            out[name] = _fold(layer, by, out, readers, p)
        else:
            out[name] = Form("none", why=NO_FORM.get(op, f"DLPy's layer API has no {op}"))
    return out


def _fold(
    layer: Mapping[str, Any], by: Mapping[str, Any], done: Mapping[str, Form],
    readers: Mapping[str, list[str]], p: Mapping[str, Any],
) -> Form:  # fmt: skip
    """An activation layer as the act of the layer before it, as DLPy's importer does."""
    op = layer["op"]
    if op == "gelu" and p.get("approximate", "none") == "tanh":
        op = "gelu_tanh"
    act, note = ACT_STAND_INS.get(op, (ACTS.get(op, op), ""))
    (host,) = layer["inputs"] if len(layer["inputs"]) == 1 else ("",)
    form = done.get(host)
    if form is None or form.kind not in _TAKES_ACT or readers.get(host) != [layer["name"]]:
        return Form("none", why="DLPy puts an activation onto the one layer before it; here "
                    "there is none that takes it")  # fmt: skip
    if form.config.get("act", "identity") != "identity":
        return Form("none", why=f"{host!r} has an activation already (DLPy keeps one)")
    return Form("act", {"act": act}, why=note, host=host)
