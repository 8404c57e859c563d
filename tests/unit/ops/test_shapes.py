"""Shape inference, FLOPs and minimum bytes of every op, without torch (pure Python).

Shapes include the batch dimension, as the loader passes them.
"""

from __future__ import annotations

from typing import Any

import pytest

from opbench.ops.base import REQUIRED, ShapeError, coerce_param
from opbench.ops.registry import OPS
from opbench.vocabulary import BUILTIN, op_origin


def params(op_name: str, **given: Any) -> dict[str, Any]:
    """Parameters as the loader resolves them: coerced, defaults filled in."""
    op = OPS[op_name]
    resolved = {}
    for param in op.params:
        if param.name in given:
            resolved[param.name] = coerce_param(param, given[param.name])
        else:
            assert param.default is not REQUIRED, f"test forgot required {param.name}"
            resolved[param.name] = param.default
    return resolved


# (op, input shape with batch, parameters as written, expected output shape)
SHAPES = [
    ("linear", (2, 7), {"out_features": 5}, (2, 5)),
    ("linear", (2, 3, 4, 7), {"out_features": 1}, (2, 3, 4, 1)),
    ("conv2d", (2, 3, 9, 9), {"out_channels": 4, "kernel_size": 3}, (2, 4, 7, 7)),
    ("conv2d", (2, 3, 9, 9), {"out_channels": 4, "kernel_size": 3, "padding": 1}, (2, 4, 9, 9)),
    (
        "conv2d",
        (1, 3, 9, 10),
        {"out_channels": 5, "kernel_size": 3, "stride": 2, "padding": 1},
        (1, 5, 5, 5),
    ),
    ("conv2d", (1, 3, 11, 11), {"out_channels": 2, "kernel_size": 3, "dilation": 2}, (1, 2, 7, 7)),
    (
        "conv2d",
        (1, 3, 11, 12),
        {"out_channels": 2, "kernel_size": [3, 1], "stride": [2, 3], "padding": [0, 2]},
        (1, 2, 5, 6),
    ),
    ("conv2d", (1, 6, 5, 5), {"out_channels": 9, "kernel_size": 1, "groups": 3}, (1, 9, 5, 5)),
    (
        "conv2d",
        (1, 4, 5, 5),
        {"out_channels": 4, "kernel_size": 3, "groups": 4, "padding": 1},
        (1, 4, 5, 5),
    ),
    ("conv2d", (1, 1, 1, 1), {"out_channels": 3, "kernel_size": 1}, (1, 3, 1, 1)),
    ("conv2d", (1, 3, 4, 4), {"out_channels": 2, "kernel_size": 6, "padding": 1}, (1, 2, 1, 1)),
    # Pooling: stride defaults to the kernel; floor division of the output size.
    ("maxpool2d", (2, 3, 8, 8), {"kernel_size": 2}, (2, 3, 4, 4)),
    ("maxpool2d", (2, 3, 9, 7), {"kernel_size": 2}, (2, 3, 4, 3)),
    ("maxpool2d", (2, 3, 17, 17), {"kernel_size": 3, "stride": 2, "padding": 1}, (2, 3, 9, 9)),
    ("maxpool2d", (1, 1, 6, 9), {"kernel_size": [2, 3]}, (1, 1, 3, 3)),
    ("avgpool2d", (2, 3, 7, 7), {"kernel_size": 7}, (2, 3, 1, 1)),
    ("avgpool2d", (2, 3, 9, 9), {"kernel_size": 3, "stride": 1}, (2, 3, 7, 7)),
    ("avgpool2d", (1, 2, 5, 5), {"kernel_size": 2, "padding": 1}, (1, 2, 3, 3)),
    ("batchnorm2d", (2, 3, 4, 5), {}, (2, 3, 4, 5)),
    ("layernorm", (2, 5, 7), {}, (2, 5, 7)),
    ("rmsnorm", (2, 7), {}, (2, 7)),
    ("softmax", (2, 5, 7), {}, (2, 5, 7)),
    ("softmax", (2, 5, 7), {"dim": 0}, (2, 5, 7)),
    ("softmax", (2, 5, 7), {"dim": -3}, (2, 5, 7)),
    ("relu", (2, 3, 4), {}, (2, 3, 4)),
    ("gelu", (3,), {}, (3,)),
    ("silu", (2, 1, 1, 1), {}, (2, 1, 1, 1)),
    ("transpose", (2, 3, 5), {"dims": [1, 2]}, (2, 5, 3)),
    ("transpose", (2, 3, 5), {"dims": [-1, 0]}, (5, 3, 2)),
    ("transpose", (2, 3, 5), {"dims": [1, 1]}, (2, 3, 5)),
    ("permute", (2, 3, 5, 7), {"dims": [0, 2, 3, 1]}, (2, 5, 7, 3)),
    ("permute", (2, 3, 5), {"dims": [-1, 0, 1]}, (5, 2, 3)),
    ("flatten", (2, 3, 4, 5), {}, (2, 60)),
    ("flatten", (2, 3, 4, 5), {"start_dim": 2}, (2, 3, 20)),
    ("flatten", (2, 3, 4, 5), {"start_dim": -2}, (2, 3, 20)),
    ("flatten", (2, 3, 4, 5), {"start_dim": 0}, (120,)),
    ("flatten", (2, 3, 4, 5), {"start_dim": 3}, (2, 3, 4, 5)),
    ("attention", (2, 9, 12), {"heads": 3}, (2, 9, 12)),
    ("attention", (2, 9, 36), {"heads": 3, "packed_qkv": True}, (2, 9, 12)),
    ("attention", (1, 1, 6), {"heads": 2, "packed_qkv": True, "causal": True}, (1, 1, 2)),
    # grouped-query: [q | k | v] = (8 + 2 x 2) heads of 16
    ("attention", (2, 9, 192), {"heads": 8, "kv_heads": 2, "packed_qkv": True}, (2, 9, 128)),
    # decode: the input is the query, the cache is state
    ("attention", (2, 1, 128), {"heads": 8, "kv_heads": 2, "kv_len": 4096}, (2, 1, 128)),
    ("attention", (2, 5, 64), {"heads": 4, "kv_len": 5, "causal": True}, (2, 5, 64)),
]


@pytest.mark.parametrize("op_name", [n for n in OPS if op_origin(n) == BUILTIN])
def test_every_builtin_op_example_infers_its_shape(op_name: str) -> None:
    # The op's own example (ops/<op>.py), at batch 2; the cases above add the edge cases.
    example = OPS[op_name].example
    assert example is not None, f"op {op_name!r} has no example"
    p = params(op_name, **example.params)
    op = OPS[op_name]
    in_shape = op.shape_arg([(2, *shape) for shape in example.inputs])
    assert op.infer_shape(in_shape, p) == (2, *example.output)
    assert op.takes(len(example.inputs), p)


@pytest.mark.parametrize(
    "op_name, in_shape, given, expected", SHAPES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SHAPES)]
)
def test_infer_shape(op_name: str, in_shape, given, expected) -> None:
    op = OPS[op_name]
    p = params(op_name, **given)
    assert op.infer_shape(in_shape, p) == expected
    # Every op's costs are defined for every shape it accepts.
    assert op.flops(in_shape, expected, p) >= 0
    assert op.min_bytes(in_shape, expected, p, "float16") >= 0


def test_conv_output_size_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    op = OPS["conv2d"]
    for in_shape, given in [
        (SHAPES[i][1], SHAPES[i][2]) for i in range(len(SHAPES)) if SHAPES[i][0] == "conv2d"
    ]:
        p = params("conv2d", **given)
        x = torch.zeros(in_shape)
        w = torch.zeros(p["out_channels"], in_shape[1] // p["groups"], *p["kernel_size"])
        y = torch.nn.functional.conv2d(
            x, w, None, p["stride"], p["padding"], p["dilation"], p["groups"]
        )
        assert op.infer_shape(in_shape, p) == tuple(y.shape)


def test_pool_output_size_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    for op_name, fn in (
        ("maxpool2d", torch.nn.functional.max_pool2d),
        ("avgpool2d", torch.nn.functional.avg_pool2d),
    ):
        for _, in_shape, given, _expected in (c for c in SHAPES if c[0] == op_name):
            op = OPS[op_name]
            p = params(op_name, **given)
            y = fn(torch.zeros(in_shape), p["kernel_size"], op.stride(p), p["padding"])
            assert op.infer_shape(in_shape, p) == tuple(y.shape)


def test_pool_stride_defaults_to_kernel() -> None:
    op = OPS["maxpool2d"]
    p = params("maxpool2d", kernel_size=[2, 3])
    assert p["stride"] is None
    assert op.stride(p) == (2, 3)
    assert op.stride(params("maxpool2d", kernel_size=2, stride=1)) == (1, 1)


def test_permutation_of_transpose_and_permute() -> None:
    assert OPS["transpose"].permutation(4, params("transpose", dims=[1, -1])) == (0, 3, 2, 1)
    assert OPS["permute"].permutation(3, params("permute", dims=[-1, 0, 1])) == (2, 0, 1)


@pytest.mark.parametrize(
    "op_name, in_shape, given, field",
    [
        ("linear", (4,), {"out_features": 2}, None),
        ("conv2d", (2, 8), {"out_channels": 2, "kernel_size": 3}, None),
        ("conv2d", (2, 3, 4, 4), {"out_channels": 2, "kernel_size": 0}, "kernel_size"),
        ("conv2d", (2, 3, 4, 4), {"out_channels": 2, "kernel_size": 5}, "kernel_size"),
        ("conv2d", (2, 3, 4, 4), {"out_channels": 2, "kernel_size": 1, "dilation": 0}, "dilation"),
        ("conv2d", (2, 4, 4, 4), {"out_channels": 6, "kernel_size": 1, "groups": 4}, "groups"),
        ("maxpool2d", (2, 3, 4, 4), {"kernel_size": 0}, "kernel_size"),
        ("maxpool2d", (2, 3, 4, 4), {"kernel_size": 3, "padding": 2}, "padding"),
        ("avgpool2d", (2, 3, 4, 4), {"kernel_size": 2, "stride": [1, 0]}, "stride"),
        ("batchnorm2d", (2, 3, 4), {}, None),
        ("softmax", (2, 3), {"dim": 2}, "dim"),
        ("softmax", (2, 3), {"dim": -3}, "dim"),
        ("transpose", (2, 3), {"dims": [0]}, "dims"),
        ("transpose", (2, 3), {"dims": [0, 2]}, "dims"),
        ("permute", (2, 3, 4), {"dims": [2, 1, 0, 3]}, "dims"),
        ("permute", (2, 3, 4), {"dims": [2, 2, 0]}, "dims"),
        ("flatten", (2, 3), {"start_dim": 2}, "start_dim"),
        ("flatten", (2, 3), {"start_dim": -3}, "start_dim"),
        ("attention", (2, 9), {"heads": 1}, None),
        ("attention", (2, 9, 10), {"heads": 4}, "heads"),
        ("attention", (2, 9, 10), {"heads": 2, "packed_qkv": True}, "packed_qkv"),
        ("attention", (2, 9, 96), {"heads": 6, "kv_heads": 4, "packed_qkv": True}, "kv_heads"),
        ("attention", (2, 9, 32), {"heads": 4, "kv_heads": 2}, "kv_heads"),
        ("attention", (2, 9, 30), {"heads": 4, "kv_heads": 2, "packed_qkv": True}, "packed_qkv"),
        ("attention", (2, 9, 32), {"heads": 4, "kv_len": 8, "causal": True}, "kv_len"),
        ("attention", (2, 9, 96), {"heads": 4, "kv_len": 16, "packed_qkv": True}, "packed_qkv"),
    ],
)
def test_impossible_shapes_raise_with_the_field(op_name, in_shape, given, field) -> None:
    with pytest.raises(ShapeError) as info:
        OPS[op_name].infer_shape(in_shape, params(op_name, **given))
    assert info.value.field == field
    assert str(info.value)


# ---- costs -----------------------------------------------------------------------------------


def test_linear_flops_and_bytes() -> None:
    op = OPS["linear"]
    m_dims, k, n = (3, 5), 7, 11
    in_shape, out_shape = (*m_dims, k), (*m_dims, n)
    m = 15
    p = params("linear", out_features=n)
    assert op.flops(in_shape, out_shape, p) == 2 * m * k * n
    # fp16: x read, y written, W and bias read, 2 bytes each.
    assert op.min_bytes(in_shape, out_shape, p, "float16") == 2 * (m * k + m * n + n * k + n)
    assert op.min_bytes(in_shape, out_shape, p, "float32") == 4 * (m * k + m * n + n * k + n)
    no_bias = params("linear", out_features=n, bias=False)
    assert op.weight_shapes(in_shape, no_bias) == {"weight": (n, k)}
    assert op.min_bytes(in_shape, out_shape, no_bias, "bfloat16") == 2 * (m * k + m * n + n * k)


def test_int8_weights_count_one_byte() -> None:
    """A linear's quantized weight counts as stored: one byte per element plus its fp32
    channel scales (int8, fp8, int8-weight), half a byte plus one scale in the layer's dtype
    per group (int4-weight)."""
    op = OPS["linear"]
    in_shape, out_shape = (4, 64), (4, 32)
    io = 2 * (4 * 64 + 4 * 32)
    for quant in ("int8", "fp8", "int8-weight"):
        q = params("linear", out_features=32, quant=quant, bias=False)
        assert op.min_bytes(in_shape, out_shape, q, "float16") == io + 32 * 64 + 4 * 32
    with_bias = params("linear", out_features=32, quant="int8")
    # The bias is not quantized: it stays in the layer's dtype.
    assert op.min_bytes(in_shape, out_shape, with_bias, "float16") == io + 32 * 64 + 4 * 32 + 2 * 32
    int4 = params("linear", out_features=32, quant="int4-weight", group_size=16, bias=False)
    assert op.min_bytes(in_shape, out_shape, int4, "bfloat16") == io + 32 * 32 + 2 * 32 * 4
    conv = OPS["conv2d"]
    pc = params("conv2d", out_channels=8, kernel_size=3, quant="int8", bias=False)
    cin, cout = (2, 4, 6, 6), conv.infer_shape((2, 4, 6, 6), pc)
    assert conv.min_bytes(cin, cout, pc, "float16") == 2 * (2 * 4 * 36 + 2 * 8 * 16) + 8 * 4 * 9


def test_conv_flops_count_groups_and_kernel() -> None:
    op = OPS["conv2d"]
    p = params("conv2d", out_channels=8, kernel_size=[3, 2], groups=2, padding=1)
    in_shape = (2, 4, 6, 5)
    out_shape = op.infer_shape(in_shape, p)
    assert (
        op.flops(in_shape, out_shape, p)
        == 2 * (2 * 8 * out_shape[2] * out_shape[3]) * (4 // 2) * 3 * 2
    )
    assert op.weight_shapes(in_shape, p) == {"weight": (8, 2, 3, 2), "bias": (8,)}


def test_attention_flops_halve_when_causal() -> None:
    op = OPS["attention"]
    b, s, e = 2, 16, 24
    p = params("attention", heads=4)
    full = op.flops((b, s, e), (b, s, e), p)
    assert full == 4 * b * s * s * e  # QK^T and PV, 2 FLOPs per multiply-add each
    assert op.flops((b, s, e), (b, s, e), params("attention", heads=4, causal=True)) == full // 2
    packed = params("attention", heads=4, packed_qkv=True)
    assert op.flops((b, s, 3 * e), (b, s, e), packed) == full
    assert op.min_bytes((b, s, 3 * e), (b, s, e), packed, "float16") == 2 * (
        b * s * 3 * e + b * s * e
    )


def test_three_input_attention_shapes_and_errors() -> None:
    """separate_qkv: q [B, S, H D], k and v [B, N, Hkv D]; N from k; the fields named."""
    op = OPS["attention"]
    p = params("attention", heads=4, kv_heads=2, causal=True, separate_qkv=True)
    assert op.input_count(p) == 3 and op.input_count(params("attention", heads=4)) == 1
    shapes = ((2, 3, 64), (2, 9, 32), (2, 9, 32))
    assert op.infer_shape(shapes, p) == (2, 3, 64)
    assert op.flops(shapes, (2, 3, 64), p) == 4 * 2 * 4 * 16 * (3 * 9 - 9 / 2)
    assert op.weight_shapes(shapes, p) == {}
    assert op.min_bytes(shapes, (2, 3, 64), p, "float16") == 2 * (2 * 3 * 64 * 2 + 2 * 2 * 9 * 32)
    for bad, field in [
        (((2, 3, 64), (2, 9, 32), (2, 8, 32)), "separate_qkv"),  # v differs from k
        (((2, 3, 64), (2, 9, 48), (2, 9, 48)), "separate_qkv"),  # not kv_heads x 16
        (((2, 3, 64), (2, 2, 32), (2, 2, 32)), "causal"),  # fewer keys than queries
        (((2, 3, 64), (2, 9, 32)), "separate_qkv"),  # two inputs
    ]:
        with pytest.raises(ShapeError) as info:
            op.infer_shape(bad, p)
        assert info.value.field == field, bad
    with pytest.raises(ShapeError) as info:
        op.infer_shape(shapes, {**p, "kv_len": 10})
    assert info.value.field == "kv_len"


def test_decode_attention_costs_and_cache() -> None:
    """The cache is state of [B, N, Hkv D] twice, read once; causal queries are the last S of
    N positions, so they see S N - S^2 / 2 (query, key) pairs."""
    op = OPS["attention"]
    b, s, h, hkv, d, n = 2, 4, 8, 2, 16, 100
    p = params("attention", heads=h, kv_heads=hkv, kv_len=n)
    in_shape = out_shape = (b, s, h * d)
    assert op.weight_shapes(in_shape, p) == {"k_cache": (b, n, hkv * d), "v_cache": (b, n, hkv * d)}
    assert op.flops(in_shape, out_shape, p) == 4 * b * h * s * n * d
    causal = params("attention", heads=h, kv_heads=hkv, kv_len=n, causal=True)
    assert op.flops(in_shape, out_shape, causal) == 4 * b * h * d * (s * n - s * s // 2)
    cache = 2 * b * n * hkv * d
    assert op.min_bytes(in_shape, out_shape, p, "float16") == 2 * (2 * b * s * h * d + cache)
    assert op.weight_shapes(in_shape, params("attention", heads=h)) == {}


def test_memory_bound_ops_bytes() -> None:
    shape = (2, 3, 4, 5)
    n = 120
    for name in ("relu", "gelu", "silu", "softmax"):
        assert OPS[name].min_bytes(shape, shape, params(name), "float16") == 2 * 2 * n
    assert OPS["layernorm"].min_bytes(shape, shape, params("layernorm"), "float32") == 4 * (
        2 * n + 2 * 5
    )
    assert OPS["rmsnorm"].min_bytes(shape, shape, params("rmsnorm"), "float32") == 4 * (2 * n + 5)
    assert OPS["batchnorm2d"].min_bytes(shape, shape, params("batchnorm2d"), "float16") == 2 * (
        2 * n + 4 * 3
    )
    perm = params("permute", dims=[0, 2, 3, 1])
    assert OPS["permute"].min_bytes(shape, (2, 4, 5, 3), perm, "bfloat16") == 2 * 2 * n
    # flatten is a view: nothing moves.
    assert OPS["flatten"].min_bytes(shape, (2, 60), params("flatten"), "float32") == 0
    pool = params("maxpool2d", kernel_size=2)
    out = OPS["maxpool2d"].infer_shape(shape, pool)
    assert OPS["maxpool2d"].min_bytes(shape, out, pool, "float16") == 2 * (n + 2 * 3 * 2 * 2)
    assert OPS["maxpool2d"].flops(shape, out, pool) == 2 * 3 * 2 * 2 * 4


def test_elementwise_flops() -> None:
    shape = (4, 5)
    assert OPS["relu"].flops(shape, shape, {}) == 20
    assert (
        OPS["gelu"].flops(shape, shape, {})
        > OPS["silu"].flops(shape, shape, {})
        > OPS["relu"].flops(shape, shape, {})
    )
    assert OPS["flatten"].flops(shape, (4, 5), params("flatten")) == 0


@pytest.mark.parametrize(
    "kind, value, expected",
    [
        ("pair", 3, (3, 3)),
        ("pair", [2, 5], (2, 5)),
        ("int_list", [0, -1], (0, -1)),
        ("pos_float", 1, 1.0),
        ("choice", "GELU", "gelu"),
        ("choice", None, "none"),
    ],
)
def test_coerce_param_normalises(kind, value, expected) -> None:
    from opbench.ops.base import Param

    param = Param("x", kind, "none" if kind == "choice" else REQUIRED, ("none", "gelu"))
    assert coerce_param(param, value) == expected


@pytest.mark.parametrize(
    "kind, value",
    [
        ("int", True),
        ("int", 2.0),
        ("pos_int", 0),
        ("nonneg_int", -1),
        ("float", "1"),
        ("pos_float", 0),
        ("bool", 1),
        ("bool", "yes"),
        ("pair", [1]),
        ("pair", [1, 2, 3]),
        ("pair", -1),
        ("pair", [1, True]),
        ("int_list", [1, 1.5]),
        ("int_list", 3),
        ("choice", "tanh"),
    ],
)
def test_coerce_param_rejects(kind, value) -> None:
    from opbench.ops.base import Param

    with pytest.raises(ValueError):
        coerce_param(Param("x", kind, REQUIRED, ("none", "gelu")), value)
