"""The torch baseline of every op goes through the call a PyTorch user writes (spied on while the
torch backend runs the layer), and the high-precision reference is a separate computation that
the written-out ops do not share with the baseline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_torch_backend import one_layer_suite

from opbench.backends.registry import get_backend
from opbench.ops.registry import OPS
from opbench.pipeline import ModelData

Check = Callable[[tuple, dict[str, Any], Any], None]


def _no_check(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    return None


def _rms_norm_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    x, shape, weight, eps = args
    assert tuple(shape) == (layer.input_shape[-1],)
    assert weight.shape == (layer.input_shape[-1],) and eps == layer.params["eps"]


def _layer_norm_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert tuple(args[1]) == (layer.input_shape[-1],) and args[4] == layer.params["eps"]


def _batch_norm_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert kwargs["training"] is False and kwargs["eps"] == layer.params["eps"]


def _conv_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    p = layer.params
    assert args[3:] == (p["stride"], p["padding"], p["dilation"], p["groups"])


def _sdpa_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    q, k, v = args
    assert q.dim() == 4 and q.shape[1] == layer.params["heads"]
    assert kwargs["is_causal"] == layer.params["causal"]


def _softmax_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert kwargs["dim"] == layer.params["dim"]


def _dims(expected: tuple) -> Check:
    def check(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
        assert args[1:] == expected

    return check


TENSOR = torch.Tensor

# op -> (input shape, params, [(owner, attribute, argument check)]): every call listed must be
# made exactly once by the eager forward. docs/suite-format.md's call table says the same.
CALLS: dict[str, tuple[str, str, list[tuple[Any, str, Check]]]] = {
    "linear": ("[5, 7]", "out_features: 9", [(F, "linear", _no_check)]),
    "conv2d": (
        "[3, 7, 6]",
        "out_channels: 4, kernel_size: [3, 2], stride: 2, padding: 1",
        [(F, "conv2d", _conv_args)],
    ),
    "maxpool2d": (
        "[3, 7, 6]",
        "kernel_size: 3, stride: 2, padding: 1",
        [(F, "max_pool2d", _no_check)],
    ),
    "avgpool2d": ("[3, 7, 6]", "kernel_size: 2, padding: 1", [(F, "avg_pool2d", _no_check)]),
    "batchnorm2d": ("[3, 5, 4]", "", [(F, "batch_norm", _batch_norm_args)]),
    "layernorm": ("[5, 7]", "eps: 0.001", [(F, "layer_norm", _layer_norm_args)]),
    "rmsnorm": ("[5, 7]", "eps: 0.001", [(F, "rms_norm", _rms_norm_args)]),
    "softmax": ("[5, 7]", "dim: 1", [(torch, "softmax", _softmax_args)]),
    "relu": ("[5, 7]", "", [(F, "relu", _no_check)]),
    "gelu": ("[5, 7]", "", [(F, "gelu", _no_check)]),
    "silu": ("[5, 7]", "", [(F, "silu", _no_check)]),
    "transpose": (
        "[5, 7]",
        "dims: [1, -1]",
        [(TENSOR, "transpose", _dims((1, 2))), (TENSOR, "contiguous", _no_check)],
    ),
    "permute": (
        "[3, 5, 7]",
        "dims: [0, 3, 1, 2]",
        [(TENSOR, "permute", _dims(((0, 3, 1, 2),))), (TENSOR, "contiguous", _no_check)],
    ),
    "flatten": ("[3, 5, 7]", "start_dim: 2", [(TENSOR, "flatten", _dims((2,)))]),
    "attention": (
        "[5, 6]",
        "heads: 2, causal: true",
        [(F, "scaled_dot_product_attention", _sdpa_args)],
    ),
}

# Activations fused into linear/conv layers go through the activation's own call.
FUSED_ACTIVATIONS = {
    "linear-gelu": ("linear", "[5, 7]", "out_features: 9, activation: gelu", "linear", "gelu"),
    "conv2d-relu": (
        "conv2d",
        "[3, 7, 6]",
        "out_channels: 4, kernel_size: 3, activation: relu",
        "conv2d",
        "relu",
    ),
    "linear-silu": ("linear", "[7]", "out_features: 5, activation: silu", "linear", "silu"),
}

# Ops whose reference is a formula of its own: it must not call the baseline's function.
WRITTEN_OUT = {
    "linear": (F, "linear"),
    "batchnorm2d": (F, "batch_norm"),
    "layernorm": (F, "layer_norm"),
    "rmsnorm": (F, "rms_norm"),
    "softmax": (torch, "softmax"),
    "relu": (F, "relu"),
    "gelu": (F, "gelu"),
    "silu": (F, "silu"),
}


class Spy:
    """Wraps owner.attribute: records every call's arguments, then calls the real function."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, attribute: str) -> None:
        self.calls: list[tuple[tuple, dict[str, Any]]] = []
        real = getattr(owner, attribute)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((args, kwargs))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, attribute, wrapper)


def built_layer(op: str, shape: str, params: str, dtype: str = "float32"):
    suite = one_layer_suite(op, shape, params, dtype)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    layer = model.layers[0]
    built = get_backend("torch").build([layer], [data.weights(0)], "cpu")
    return layer, built, data


def test_every_op_has_its_call_listed() -> None:
    assert set(CALLS) == set(OPS)


@pytest.mark.parametrize("op", list(CALLS))
def test_eager_forward_makes_the_users_call(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shape, params, expected = CALLS[op]
    layer, built, data = built_layer(op, shape, params)
    x = data.input(0)
    spies = [(Spy(monkeypatch, owner, attr), attr, check) for owner, attr, check in expected]
    out = built.fn(x)
    for spy, attr, check in spies:
        assert len(spy.calls) == 1, f"{op}: {attr} called {len(spy.calls)} times"
        args, kwargs = spy.calls[0]
        check(args, kwargs, layer)
    monkeypatch.undo()
    # The spied call's result is the layer's output: nothing recomputes it another way.
    assert torch.equal(out, built.fn(x))
    assert tuple(out.shape) == layer.output_shape


@pytest.mark.parametrize("case", list(FUSED_ACTIVATIONS))
def test_fused_activation_uses_the_activation_call(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    op, shape, params, main, activation = FUSED_ACTIVATIONS[case]
    _, built, data = built_layer(op, shape, params)
    main_spy = Spy(monkeypatch, F, main)
    act_spy = Spy(monkeypatch, F, activation)
    built.fn(data.input(0))
    assert len(main_spy.calls) == 1 and len(act_spy.calls) == 1


@pytest.mark.parametrize("op", list(WRITTEN_OUT))
def test_reference_is_not_the_baseline_call(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shape, params, _ = CALLS[op]
    layer, _, data = built_layer(op, shape, params, "float16")
    owner, attr = WRITTEN_OUT[op]
    spy = Spy(monkeypatch, owner, attr)
    ref, kind = data.reference((0,))
    assert spy.calls == [], f"{op}'s reference called {attr}"
    monkeypatch.undo()
    # ... and yet agrees with the baseline's call run in float64 on the same rounded data.
    x = data.input(0).double()
    weights = {k: v.half().double() for k, v in data.weights(0).items()}
    baseline64 = OPS[op].forward(x, weights, layer)
    assert kind == "float64-cpu" and ref.dtype == torch.float64
    torch.testing.assert_close(ref, baseline64, rtol=1e-12, atol=1e-12)


def test_rmsnorm_baseline_is_the_fused_call_not_the_old_formula(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's weak baseline was upcast, pow, mean, rsqrt, multiply: none of it may run."""
    _, built, data = built_layer("rmsnorm", "[4, 64]", "", "float16")
    rsqrt = Spy(monkeypatch, torch, "rsqrt")
    rms = Spy(monkeypatch, F, "rms_norm")
    built.fn(data.input(0))
    assert len(rms.calls) == 1 and rsqrt.calls == []
