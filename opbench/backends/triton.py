"""Our Triton kernels. Each op maps to a small builder that prepares weights (before timing)
and returns the launcher call; a layer with no builder is `unsupported`, never run by torch.

With `fuse: true` on a model, conv2d → batchnorm2d → activation runs as one fused conv.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from opbench.backends.base import Built, Unsupported, Weights, cast_weights, singles
from opbench.spec.model import LayerSpec, ModelSpec

Builder = Callable[[LayerSpec, dict[str, Any]], Callable]

ACTIVATION_OPS = ("relu", "gelu", "silu")


def _linear(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.linear import prepare_linear

    p = layer.params
    return prepare_linear(w["weight"], w.get("bias"), activation=p["activation"], quant=p["quant"])


def _conv2d(
    layer: LayerSpec,
    w: dict[str, Any],
    batchnorm: dict[str, Any] | None = None,
    activation: str | None = None,
) -> Callable:
    from opbench.kernels.conv import prepare_conv2d

    p = layer.params
    return prepare_conv2d(
        w["weight"],
        w.get("bias"),
        stride=p["stride"],
        padding=p["padding"],
        dilation=p["dilation"],
        groups=p["groups"],
        activation=activation or p["activation"],
        quant=p["quant"],
        batchnorm=batchnorm,
    )


def _attention(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.attention import prepare_attention

    p = layer.params
    return prepare_attention(
        heads=p["heads"], causal=p["causal"], packed_qkv=p["packed_qkv"], quant=p["quant"]
    )


def _permute(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.transpose import permute
    from opbench.ops.registry import get_op

    dims = get_op(layer.op).permutation(len(layer.input_shape), layer.params)
    return lambda x: permute(x, dims)


def _softmax(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.softmax import softmax

    return lambda x: softmax(x, layer.params["dim"])


def _layernorm(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.norm import layernorm

    return lambda x: layernorm(x, w["weight"], w["bias"], layer.params["eps"])


def _rmsnorm(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.norm import rmsnorm

    return lambda x: rmsnorm(x, w["weight"], layer.params["eps"])


def _activation(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.activation import activation

    return lambda x: activation(x, layer.op)


def _maxpool(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.pool import maxpool2d
    from opbench.ops.pool import MaxPool2d

    p = layer.params
    stride = MaxPool2d.stride(p)
    return lambda x: maxpool2d(x, p["kernel_size"], stride, p["padding"])


def _avgpool(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.pool import avgpool2d
    from opbench.ops.pool import AvgPool2d

    p = layer.params
    stride = AvgPool2d.stride(p)
    return lambda x: avgpool2d(x, p["kernel_size"], stride, p["padding"])


def _batchnorm(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    from opbench.kernels.batchnorm import batchnorm2d, fold_batchnorm

    scale, shift = fold_batchnorm(
        w["running_mean"], w["running_var"], w["weight"], w["bias"], layer.params["eps"]
    )
    return lambda x: batchnorm2d(x, scale, shift)


def _flatten(layer: LayerSpec, w: dict[str, Any]) -> Callable:
    start = layer.params["start_dim"]
    # Contiguous input: flattening re-labels the same memory, no bytes move and no kernel runs.
    return lambda x: x.view(*x.shape[:start], -1)


BUILDERS: dict[str, Builder] = {
    "linear": _linear,
    "conv2d": _conv2d,
    "attention": _attention,
    "transpose": _permute,
    "permute": _permute,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
    "relu": _activation,
    "gelu": _activation,
    "silu": _activation,
    "maxpool2d": _maxpool,
    "avgpool2d": _avgpool,
    "batchnorm2d": _batchnorm,
    "flatten": _flatten,
}

# Ops whose builders keep batchnorm statistics in float32 (folded at build time).
FLOAT32_WEIGHTS = {"batchnorm2d"}


def fusion_groups(model: ModelSpec) -> list[tuple[int, ...]]:
    """conv2d [→ batchnorm2d] [→ relu|gelu|silu] chains, when the model sets `fuse: true`."""
    if not model.fuse:
        return singles(model)
    groups: list[tuple[int, ...]] = []
    layers = model.layers
    i = 0
    while i < len(layers):
        group = [i]
        if layers[i].op == "conv2d" and layers[i].params["activation"] == "none":
            j = i + 1
            if j < len(layers) and layers[j].op == "batchnorm2d" and not layers[j].starts_chain:
                group.append(j)
                j += 1
            if j < len(layers) and layers[j].op in ACTIVATION_OPS and not layers[j].starts_chain:
                group.append(j)
        groups.append(tuple(group))
        i = group[-1] + 1
    return groups


class TritonBackend:
    name = "triton"

    def unavailable_reason(self, device: str) -> str | None:
        try:
            import triton  # noqa: F401
        except Exception as exc:
            return f"triton cannot be imported: {type(exc).__name__}: {exc}"
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "on the CPU triton needs its interpreter (TRITON_INTERPRET=1 before triton is imported)"
        return None

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        return fusion_groups(model)

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        first = layers[0]
        if len(layers) > 1:
            fn, note = self._build_fused(layers, weights)
        else:
            builder = BUILDERS.get(first.op)
            if builder is None:
                raise Unsupported(f"no Triton kernel for op {first.op!r}")
            w = (
                dict(weights[0])
                if first.op in FLOAT32_WEIGHTS
                else cast_weights(weights[0], first.dtype)
            )
            fn = builder(first, w)
            note = "view: no kernel launched" if first.op == "flatten" else None
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
        if interpret:
            note = "; ".join(
                filter(None, [note, "Triton interpreter: times are not performance figures"])
            )
        return Built(fn=torch.no_grad()(fn), note=note)

    def _build_fused(
        self, layers: Sequence[LayerSpec], weights: Sequence[Weights]
    ) -> tuple[Callable, str]:
        conv = layers[0]
        batchnorm = None
        activation = None
        for layer, w in zip(layers[1:], weights[1:], strict=False):
            if layer.op == "batchnorm2d":
                batchnorm = {**{k: v.float() for k, v in w.items()}, "eps": layer.params["eps"]}
            else:
                activation = layer.op
        fn = _conv2d(
            conv,
            cast_weights(weights[0], conv.dtype) | {},
            batchnorm=batchnorm,
            activation=activation,
        )
        return fn, "fused " + " → ".join(f"{layer.name} ({layer.op})" for layer in layers)
