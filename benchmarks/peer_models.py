"""The shipped networks as their libraries build them, carrying the suite's seeded weights:
torchvision's ResNet-50 and MobileNetV2, transformers' BertLayer and LlamaDecoderLayer.

Each `Peer` maps every weighted layer of the suite's model to the library module's parameter
(or, for the packed QKV projection, to the three projections it stands for), loads the suite's
float32 weights into it, and refuses to go on unless every parameter and running statistic of
the library module was set exactly once: a name that did not match can never leave a randomly
initialised weight behind and make the comparison meaningless.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Missing(Exception):
    """The library is not installed here (or does not import): the row says why."""


@dataclass
class Peer:
    """A library module and how to feed it: call(module, x) -> the output tensor."""

    library: str
    module: Any
    call: Callable[[Any, Any], Any]
    note: str = ""


_TORCHVISION_NOTE: list[str] = []  # the note of the first import, for every later peer


def torchvision_models() -> tuple[Any, str]:
    """torchvision.models, and a note. Where torchvision's C extension does not load (a
    torchvision built for another torch), its pure-Python model definitions are imported
    alone: they need none of the C ops (nms, roi_align, ...)."""
    if _TORCHVISION_NOTE:
        return importlib.import_module("torchvision.models"), _TORCHVISION_NOTE[0]
    models, note = _import_torchvision_models()
    _TORCHVISION_NOTE.append(note)
    return models, note


def _import_torchvision_models() -> tuple[Any, str]:
    try:
        import torchvision.models as models

        return models, ""
    except ModuleNotFoundError as exc:
        raise Missing(f"torchvision is not installed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a broken install: try the Python models alone
        spec = importlib.util.find_spec("torchvision")
        if spec is None:
            raise Missing(f"torchvision does not import: {exc}") from None
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        package = types.ModuleType("torchvision")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["torchvision"] = package
        models = importlib.import_module("torchvision.models")
        first = str(exc).strip().splitlines()[0]
        return models, f"torchvision's C extension does not load ({first}): models imported alone"


def resnet_blocks(model) -> list[int]:
    """Bottlenecks per stage of the suite's ResNet."""
    blocks = [0, 0, 0, 0]
    for layer in model.layers:
        m = re.fullmatch(r"l(\d)b(\d+)_c1_conv", layer.name)
        if m:
            blocks[int(m[1]) - 1] += 1
    return blocks


def resnet_names(model) -> dict[str, str]:
    """The suite's ResNet layer -> torchvision's module path."""
    names = {"stem_conv": "conv1", "stem_bn": "bn1", "fc": "fc"}
    for layer in model.layers:
        m = re.fullmatch(r"l(\d)b(\d+)_(c(\d)|down)_(conv|bn)", layer.name)
        if m:
            stage, block, part, k, kind = m.groups()
            if part == "down":
                names[layer.name] = f"layer{stage}.{block}.downsample.{0 if kind == 'conv' else 1}"
            else:
                names[layer.name] = f"layer{stage}.{block}.{kind}{k}"
    return names


def resnet50_peer(model, data) -> Peer:
    models, note = torchvision_models()
    classes = next(layer for layer in model.layers if layer.name == "fc").params["out_features"]
    module = models.resnet.ResNet(
        models.resnet.Bottleneck, resnet_blocks(model), num_classes=classes
    )
    loaded = load_suite_weights(module, model, data, resnet_names(model))
    return Peer("torchvision", loaded, lambda m, x: m(x), note)


def mobilenet_v2_peer(model, data) -> Peer:
    models, note = torchvision_models()
    classes = model.layers[-1].params["out_features"]
    module = models.mobilenetv2.MobileNetV2(num_classes=classes)
    names = {"stem_conv": "features.0.0", "stem_bn": "features.0.1",
             "classifier": "classifier.1"}  # fmt: skip
    blocks = sorted({int(m[1]) for layer in model.layers
                     if (m := re.fullmatch(r"b(\d+)_.*", layer.name))})  # fmt: skip
    for b in blocks:
        expands = any(layer.name == f"b{b}_expand_conv" for layer in model.layers)
        parts = (["expand"] if expands else []) + ["dw"]
        base = f"features.{b + 1}.conv"
        for i, part in enumerate(parts):  # conv, bn, relu6 as one ConvBNActivation
            names[f"b{b}_{part}_conv"], names[f"b{b}_{part}_bn"] = f"{base}.{i}.0", f"{base}.{i}.1"
        names[f"b{b}_project_conv"] = f"{base}.{len(parts)}"
        names[f"b{b}_project_bn"] = f"{base}.{len(parts) + 1}"
    head = len(blocks) + 1
    names["head_conv"], names["head_bn"] = f"features.{head}.0", f"features.{head}.1"
    return Peer(
        "torchvision", load_suite_weights(module, model, data, names), lambda m, x: m(x), note
    )


def _transformers() -> Any:
    # transformers imports torchvision where it is installed: a torchvision whose C extension
    # does not load would fail it, so its models are imported alone first (see above).
    try:
        torchvision_models()
    except Missing:
        pass
    try:
        import transformers
    except Exception as exc:  # noqa: BLE001 - not installed, or broken: the row says which
        raise Missing(f"transformers does not import: {exc}") from None
    return transformers


def _dims(model) -> tuple[int, int, int]:
    """hidden size, heads, FFN size of a BERT or LLaMA block of the suite."""
    attn = next(layer for layer in model.layers if layer.op == "attention")
    ffn = next(layer for layer in model.layers if layer.name in ("ffn_up", "gate"))
    return attn.input_shape[-1] // 3, attn.params["heads"], ffn.params["out_features"]


def bert_peer(model, data) -> Peer:
    tf = _transformers()
    hidden, heads, ffn = _dims(model)
    config = tf.BertConfig(hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn,
                           hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0, attn_implementation="sdpa")  # fmt: skip
    module = tf.models.bert.modeling_bert.BertLayer(config)
    names = {"qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
             "attn_out": "attention.output.dense", "ln1": "attention.output.LayerNorm",
             "ffn_up": "intermediate.dense", "ffn_down": "output.dense",
             "ln2": "output.LayerNorm"}  # fmt: skip
    return Peer(
        f"transformers {tf.__version__}",
        load_suite_weights(module, model, data, names),
        _first(lambda m, x: m(x)),
    )


def llama_peer(model, data) -> Peer:
    import torch

    tf = _transformers()
    hidden, heads, ffn = _dims(model)
    config = tf.LlamaConfig(hidden_size=hidden, num_attention_heads=heads,
                            num_key_value_heads=heads, intermediate_size=ffn, rms_norm_eps=1e-6,
                            attn_implementation="sdpa")  # fmt: skip
    module = tf.models.llama.modeling_llama.LlamaDecoderLayer(config, layer_idx=0)
    names = {"attn_norm": "input_layernorm",
             "qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
             "o_proj": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
             "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}  # fmt: skip
    rope: dict[tuple, tuple] = {}
    at = [i for i, layer in enumerate(model.layers) if layer.op == "rope"]
    # The suite's rope layer holds cos and sin [S, D] as LlamaRotaryEmbedding computes them
    # (its theta, positions 0..S-1): the library layer gets the same tables. A block without
    # one gets cos 1, sin 0, a rotation by nothing (the library still runs its arithmetic).
    tables = data.weights(at[0]) if at else None

    def call(m: Any, x: Any) -> Any:
        key = (x.shape, x.dtype, x.device)
        if key not in rope:
            if tables is not None:
                rope[key] = tuple(t.to(x.device, x.dtype).expand(x.shape[0], -1, -1).contiguous()
                                  for t in (tables["cos"], tables["sin"]))  # fmt: skip
            else:
                shape = (*x.shape[:2], hidden // heads)
                rope[key] = (torch.ones(shape, dtype=x.dtype, device=x.device),
                             torch.zeros(shape, dtype=x.dtype, device=x.device))  # fmt: skip
            for tensor in rope[key]:  # fixed across calls, like a model's rotary cache
                torch._dynamo.mark_static_address(tensor)
        return m(x, position_embeddings=rope[key])

    note = ("the suite's rotary tables as position_embeddings" if at
            else "rotary embedding by 0 (cos 1, sin 0): the suite's block has none")  # fmt: skip
    names.update({model.layers[i].name: SKIP for i in at})
    return Peer(
        f"transformers {tf.__version__}",
        load_suite_weights(module, model, data, names),
        _first(call),
        note,
    )


def _first(call: Callable) -> Callable:
    """The layer's output tensor, where the library returns a tuple (older transformers)."""

    def first(m: Any, x: Any) -> Any:
        out = call(m, x)
        return out[0] if isinstance(out, tuple) else out

    return first


# A suite layer whose weights the library takes another way (the rotary tables).
SKIP = object()

# The fp8 block's peer is the same library layer in the suite's bf16: its quantized linears
# run unquantized there, as on the suite's torch backends.
PEERS = {"resnet50": resnet50_peer, "mobilenet_v2": mobilenet_v2_peer,
         "bert_layer": bert_peer, "llama7b_prefill": llama_peer,
         "llama7b_prefill_fp8": llama_peer}  # fmt: skip


def load_suite_weights(module: Any, model, data, names: dict[str, Any]) -> Any:
    """module with the suite's seeded weights (`data`'s, float32) in every parameter and
    running statistic; ValueError naming what was left unset or set twice."""
    state = module.state_dict()
    set_: list[str] = []
    for i, layer in enumerate(model.layers):
        weights = {k: v.cpu() for k, v in data.weights(i).items()}
        if not weights:
            continue
        target = names.get(layer.name)
        if target is SKIP:
            continue  # tables the library computes itself, handed to it another way
        if target is None:
            raise ValueError(f"no library parameter for the suite's layer {layer.name!r}")
        parts = target if isinstance(target, tuple) else (target,)
        for key, tensor in weights.items():
            for part, piece in zip(parts, tensor.chunk(len(parts), dim=0), strict=True):
                name = f"{part}.{key}"
                if name not in state or state[name].shape != piece.shape:
                    raise ValueError(f"{layer.name}.{key} does not fit the library's {name}")
                state[name] = piece.clone()
                set_.append(name)
    expected = [k for k in state if not k.endswith("num_batches_tracked")]
    unset = sorted(set(expected) - set(set_))
    twice = sorted({n for n in set_ if set_.count(n) > 1})
    if unset or twice:
        raise ValueError(f"library parameters unset {unset[:5]} or set twice {twice[:5]}")
    module.load_state_dict(state)
    return module.eval().requires_grad_(False)


def peer_for(model, data) -> Peer:
    """The library's module of `model` (its base name picks which) carrying the suite's seeded
    weights (`data`: the model's ModelData), float32 on the CPU. Missing when the library is
    not here."""
    return PEERS[model.base_name](model, data)
