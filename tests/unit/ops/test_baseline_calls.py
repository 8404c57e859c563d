"""The torch baseline of every op goes through the call a PyTorch user writes (spied on while the
torch backend runs the layer), and the high-precision reference is a separate computation that
the written-out ops do not share with the baseline."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_torch_backend import BUILTIN_OPS, example_case, one_layer_suite

from opbench.backends.registry import get_backend
from opbench.ops.base import Op
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
    p = layer.params
    assert q.dim() == 4 and q.shape[1] == p["heads"] and k.shape[1] == (p["kv_heads"] or p["heads"])
    assert kwargs.get("enable_gqa", False) == (k.shape[1] != q.shape[1])
    if p["causal"] and k.shape[2] != q.shape[2]:  # decode: the queries are the last positions
        from torch.nn.attention.bias import CausalBias, CausalVariant

        mask = kwargs["attn_mask"]
        assert isinstance(mask, CausalBias) and mask.variant == CausalVariant.LOWER_RIGHT
    else:
        assert kwargs["is_causal"] == p["causal"]


def _softmax_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert kwargs["dim"] == layer.params["dim"]


def _concat_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert len(args[0]) == len(layer.inputs) and kwargs["dim"] == layer.params["axis"]


def _split_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert list(args[1]) == list(layer.params["sizes"]) and kwargs["dim"] == layer.params["axis"]


def _gelu_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert kwargs.get("approximate", "none") == layer.params["approximate"]


def _reshape_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    assert args[1:] == (layer.input_shape[0], *layer.params["shape"])


def _slice_args(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
    p = layer.params
    axis = p["axis"] % len(layer.input_shape)
    assert args[1] == (slice(None),) * axis + (slice(p["start"], p["end"], p["step"]),)


def _dims(expected: tuple) -> Check:
    def check(args: tuple, kwargs: dict[str, Any], layer: Any) -> None:
        assert args[1:] == expected

    return check


# Argument checks beyond "called exactly once", for the calls whose arguments carry the layer's
# parameters. Which calls an op's baseline makes is the op's own `torch_calls` (ops/<op>.py);
# docs/suite-format.md's call table says the same.
ARGUMENTS: dict[tuple[str, str], Check] = {
    ("conv2d", "torch.nn.functional.conv2d"): _conv_args,
    ("batchnorm2d", "torch.nn.functional.batch_norm"): _batch_norm_args,
    ("layernorm", "torch.nn.functional.layer_norm"): _layer_norm_args,
    ("rmsnorm", "torch.nn.functional.rms_norm"): _rms_norm_args,
    ("softmax", "torch.softmax"): _softmax_args,
    ("transpose", "torch.Tensor.transpose"): _dims((1, 2)),
    ("permute", "torch.Tensor.permute"): _dims(((0, 3, 1, 2),)),
    ("flatten", "torch.Tensor.flatten"): _dims((2,)),
    ("attention", "torch.nn.functional.scaled_dot_product_attention"): _sdpa_args,
    ("concat", "torch.cat"): _concat_args,
    ("split", "torch.split"): _split_args,
    ("gelu", "torch.nn.functional.gelu"): _gelu_args,
    ("reshape", "torch.Tensor.reshape"): _reshape_args,
    ("slice", "torch.Tensor.__getitem__"): _slice_args,
}


def owner_and_attribute(dotted: str) -> tuple[Any, str]:
    """ "torch.nn.functional.silu" → (torch.nn.functional, "silu"); "torch.Tensor.permute" →
    (torch.Tensor, "permute")."""
    path, attribute = dotted.rsplit(".", 1)
    owner: Any = importlib.import_module(path.split(".")[0])
    for part in path.split(".")[1:]:
        owner = getattr(owner, part)
    return owner, attribute


def expected_calls(op: str) -> list[tuple[Any, str, Check]]:
    return [
        (*owner_and_attribute(call), ARGUMENTS.get((op, call), _no_check))
        for call in OPS[op].torch_calls
    ]


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

# Ops whose reference is a formula of its own (`reference_written_out`): it must not make the
# baseline's calls.
WRITTEN_OUT = [name for name in BUILTIN_OPS if OPS[name].reference_written_out]


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


def test_every_builtin_op_names_its_torch_calls() -> None:
    for op in BUILTIN_OPS:
        assert OPS[op].torch_calls, f"op {op!r} names no torch call"
        for call in OPS[op].torch_calls:
            owner, attribute = owner_and_attribute(call)
            assert callable(getattr(owner, attribute)), call
    assert {op for op, _ in ARGUMENTS} <= set(BUILTIN_OPS)


@pytest.mark.parametrize("op", BUILTIN_OPS)
def test_eager_forward_makes_the_users_call(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = expected_calls(op)
    layer, built, data = built_layer(op, *example_case(op))
    xs = data.inputs(0)
    spies = [(Spy(monkeypatch, owner, attr), attr, check) for owner, attr, check in expected]
    out = built.fn(*xs)
    for spy, attr, check in spies:
        assert len(spy.calls) == 1, f"{op}: {attr} called {len(spy.calls)} times"
        args, kwargs = spy.calls[0]
        check(args, kwargs, layer)
    monkeypatch.undo()
    # The spied call's result is the layer's output: nothing recomputes it another way.
    assert torch.equal(out, built.fn(*xs))
    assert tuple(out.shape) == layer.output_shape


@pytest.mark.parametrize(
    "shape,params",
    [
        ("[3, 16]", "heads: 4, kv_heads: 2, kv_len: 9, causal: true"),
        ("[2, 16]", "heads: 4, kv_len: 5"),
        ("[5, 24]", "heads: 4, kv_heads: 1, packed_qkv: true, causal: true"),
        (
            "{q: [3, 16], k: [9, 8], v: [9, 8]}",
            "heads: 4, kv_heads: 2, causal: true, separate_qkv: true",
        ),
    ],
)
def test_grouped_and_decode_attention_make_the_users_call(
    shape: str, params: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """enable_gqa for grouped heads; causal_lower_right when the keys outnumber the queries."""
    layer, built, data = built_layer("attention", shape, params)
    calls: list[tuple[tuple, dict[str, Any]]] = []
    real = F.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> Any:
        # CausalBias recognises the call by the function's identity: restore it inside.
        calls.append((args, kwargs))
        monkeypatch.setattr(F, "scaled_dot_product_attention", real)
        try:
            return real(*args, **kwargs)
        finally:
            monkeypatch.setattr(F, "scaled_dot_product_attention", spy)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    out = built.fn(*data.inputs(0))
    monkeypatch.undo()
    assert len(calls) == 1
    _sdpa_args(*calls[0], layer)
    ref, _ = data.reference((0,))
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


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


def test_the_written_out_references_are_found() -> None:
    assert {"linear", "layernorm", "rmsnorm", "softmax", "silu"} <= set(WRITTEN_OUT)
    # Saying so without writing one would make the test below spy on the baseline itself.
    assert all(type(OPS[name]).reference is not Op.reference for name in WRITTEN_OUT)


@pytest.mark.parametrize("op", WRITTEN_OUT)
def test_reference_is_not_the_baseline_call(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    layer, _, data = built_layer(op, *example_case(op), "float16")
    spies = [(Spy(monkeypatch, owner, attr), attr) for owner, attr, _ in expected_calls(op)]
    ref, kind = data.reference((0,))
    for spy, attr in spies:
        assert spy.calls == [], f"{op}'s reference called {attr}"
    monkeypatch.undo()
    # ... and yet agrees with the baseline's call run in float64 on the same rounded data.
    xs = [x.double() if x.is_floating_point() else x for x in data.inputs(0)]
    weights = {k: v.half().double() for k, v in data.weights(0).items()}
    limit = 1e-12
    if OPS[op].derived_weights:  # rope's cos/sin: recomputed by the reference, not rounded
        weights = {k: v.double() for k, v in data.weights(0).items()}
        limit = 1e-6  # the tables' float32 angles
    baseline64 = OPS[op].forward(OPS[op].input_arg(xs), weights, layer)
    assert kind == "float64-cpu" and ref.dtype == torch.float64
    torch.testing.assert_close(ref, baseline64, rtol=limit, atol=limit)


def test_rmsnorm_baseline_is_the_fused_call_not_the_old_formula(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's weak baseline was upcast, pow, mean, rsqrt, multiply: none of it may run."""
    _, built, data = built_layer("rmsnorm", "[4, 64]", "", "float16")
    rsqrt = Spy(monkeypatch, torch, "rsqrt")
    rms = Spy(monkeypatch, F, "rms_norm")
    built.fn(data.input(0))
    assert len(rms.calls) == 1 and rsqrt.calls == []
