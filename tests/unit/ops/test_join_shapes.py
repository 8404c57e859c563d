"""Shapes and costs of the ops for joins and real models (add, mul, concat, matmul, reshape,
slice, split): every accepted case against what torch itself infers, every refused case with
its field and a message that names the shapes. Shapes include the batch, as resolution passes
them; a join gets a tuple of shapes."""

from __future__ import annotations

from typing import Any

import pytest
from test_shapes import params

from opbench.ops.base import ShapeError
from opbench.ops.registry import OPS

# (op, input shapes with batch, parameters as written, expected output shape)
ACCEPTED: list[tuple[str, Any, dict[str, Any], tuple[int, ...]]] = [
    ("add", ((2, 8, 5, 5), (2, 8, 5, 5)), {}, (2, 8, 5, 5)),
    ("add", ((2, 8, 5, 5), (2, 8, 1, 1)), {}, (2, 8, 5, 5)),
    ("add", ((2, 8, 5, 5), (1, 8, 1, 1)), {}, (2, 8, 5, 5)),
    ("add", ((2, 7, 16), (16,)), {}, (2, 7, 16)),
    ("mul", ((2, 7, 16), (2, 7, 1)), {}, (2, 7, 16)),
    ("mul", ((2, 7, 3, 8), (1, 7, 1, 8)), {}, (2, 7, 3, 8)),
    ("mul", ((2, 3), (1, 1)), {}, (2, 3)),
    ("concat", ((2, 3, 4, 4), (2, 5, 4, 4)), {"axis": 1}, (2, 8, 4, 4)),
    ("concat", ((2, 3, 4), (2, 3, 1), (2, 3, 6)), {"axis": -1}, (2, 3, 11)),
    ("concat", ((2, 3, 4), (2, 3, 4)), {"axis": 2}, (2, 3, 8)),
    ("matmul", ((2, 5, 7), (2, 7, 3)), {}, (2, 5, 3)),
    ("matmul", ((2, 4, 9, 8), (2, 4, 8, 9)), {}, (2, 4, 9, 9)),
    ("matmul", ((2, 1, 5, 7), (2, 3, 7, 2)), {}, (2, 3, 5, 2)),
    ("matmul", ((2, 5, 7), (1, 7, 3)), {}, (2, 5, 3)),
    ("reshape", ((2, 3, 5, 7),), {"shape": [15, 7]}, (2, 15, 7)),
    ("reshape", ((2, 12, 8),), {"shape": [12, 2, -1]}, (2, 12, 2, 4)),
    ("reshape", ((2, 6),), {"shape": [-1]}, (2, 6)),
    ("slice", ((2, 9),), {"axis": 1, "start": 2}, (2, 7)),
    ("slice", ((2, 9, 4),), {"axis": 1, "start": -3, "end": None}, (2, 3, 4)),
    ("slice", ((2, 9, 4),), {"axis": -2, "start": 1, "end": 8, "step": 3}, (2, 3, 4)),
    ("slice", ((2, 9),), {"axis": 1, "start": 4, "end": 100}, (2, 5)),
    ("split", ((2, 5, 12),), {"axis": 2, "sizes": [4, 4, 4], "index": 2}, (2, 5, 4)),
    ("split", ((2, 6, 3),), {"axis": 1, "sizes": [1, 5], "index": 1}, (2, 5, 3)),
]


def arg(op_name: str, shapes) -> Any:
    return OPS[op_name].shape_arg(list(shapes))


def torch_shape(op_name: str, shapes, p) -> tuple[int, ...]:
    torch = pytest.importorskip("torch")
    xs = [torch.zeros(s) for s in shapes]
    if op_name in ("add", "mul"):
        return tuple((xs[0] + xs[1]).shape)
    if op_name == "concat":
        return tuple(torch.cat(xs, p["axis"]).shape)
    if op_name == "matmul":
        return tuple(torch.matmul(*xs).shape)
    if op_name == "reshape":
        return tuple(xs[0].reshape(xs[0].shape[0], *p["shape"]).shape)
    if op_name == "slice":
        axis = p["axis"] % xs[0].dim()
        return tuple(xs[0][(slice(None),) * axis + (slice(p["start"], p["end"], p["step"]),)].shape)
    return tuple(torch.split(xs[0], list(p["sizes"]), p["axis"])[p["index"]].shape)


@pytest.mark.parametrize(
    "op_name, shapes, given, expected",
    ACCEPTED,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(ACCEPTED)],
)
def test_shapes_agree_with_torch(op_name: str, shapes, given, expected) -> None:
    op = OPS[op_name]
    p = params(op_name, **given)
    assert op.takes(len(shapes), p)
    assert op.infer_shape(arg(op_name, shapes), p) == expected
    assert torch_shape(op_name, shapes, p) == expected
    assert op.flops(arg(op_name, shapes), expected, p) >= 0
    assert op.min_bytes(arg(op_name, shapes), expected, p, "float16") >= 0


# (op, input shapes, parameters, field, words the message must hold)
REFUSED = [
    ("add", ((2, 256, 56, 56), (2, 64, 56, 56)), {}, "inputs",
     "inputs [2, 256, 56, 56] and [2, 64, 56, 56] do not broadcast"),
    ("add", ((2, 1, 5), (2, 3, 5)), {}, "inputs", "put the larger input first"),
    ("mul", ((2, 5), (3, 2, 5)), {}, "inputs", "not to the first input's shape"),
    ("concat", ((2, 3, 4), (2, 3, 5)), {"axis": 1}, "inputs", "differ on axis 2"),
    ("concat", ((2, 3, 4), (2, 3)), {"axis": 1}, "inputs", "differ in rank"),
    ("concat", ((2, 3), (2, 3)), {"axis": 0}, "axis", "the batch"),
    ("concat", ((2, 3), (2, 3)), {"axis": 2}, "axis", "out of range"),
    ("matmul", ((2, 5, 7), (2, 6, 3)), {}, "inputs", "K differs"),
    ("matmul", ((2, 5, 7), (3, 7, 3)), {}, "inputs", "do not broadcast"),
    ("matmul", ((2, 7), (2, 7, 3)), {}, "inputs", "two dims besides the batch"),
    ("reshape", ((2, 3, 5),), {"shape": [4, -1]}, "shape", "cannot hold the 15 elements"),
    ("reshape", ((2, 3, 5),), {"shape": [5, 2]}, "shape", "holds 10 elements"),
    ("reshape", ((2, 3, 5),), {"shape": [-1, -1]}, "shape", "more than one -1"),
    ("reshape", ((2, 3, 5),), {"shape": [0, 15]}, "shape", "positive"),
    ("slice", ((2, 9),), {"axis": 1, "start": 5, "end": 5}, "start", "leave nothing"),
    ("slice", ((2, 9),), {"axis": 0, "start": 1}, "axis", "the batch"),
    ("split", ((2, 9),), {"axis": 1, "sizes": [4, 4], "index": 0}, "sizes", "add up to 8"),
    ("split", ((2, 9),), {"axis": 1, "sizes": [4, 5], "index": 2}, "index", "past the 2 pieces"),
    ("split", ((2, 9),), {"axis": 1, "sizes": [9, 0], "index": 0}, "sizes", "positive"),
]  # fmt: skip


@pytest.mark.parametrize(
    "op_name, shapes, given, field, words",
    REFUSED,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSED)],
)
def test_refused_shapes_say_why(op_name: str, shapes, given, field, words) -> None:
    with pytest.raises(ShapeError) as info:
        OPS[op_name].infer_shape(arg(op_name, shapes), params(op_name, **given))
    assert info.value.field == field
    assert words in str(info.value)


def test_join_costs() -> None:
    a, b = (2, 8, 5, 5), (2, 8, 1, 1)
    add = OPS["add"]
    assert add.flops((a, b), a, {}) == 400
    # Both inputs read once (the broadcast one at its own size), the output written once.
    assert add.min_bytes((a, b), a, {}, "float16") == 2 * (400 + 16 + 400)
    mm = OPS["matmul"]
    assert mm.flops(((2, 4, 9, 8), (2, 4, 8, 3)), (2, 4, 9, 3), {}) == 2 * 2 * 4 * 9 * 3 * 8
    cat = OPS["concat"]
    p = params("concat", axis=1)
    assert cat.flops(((2, 3), (2, 5)), (2, 8), p) == 0
    assert cat.min_bytes(((2, 3), (2, 5)), (2, 8), p, "float32") == 4 * (6 + 10 + 16)
    assert (
        OPS["reshape"].min_bytes((2, 6), (2, 3, 2), params("reshape", shape=[3, 2]), "float32") == 0
    )


@pytest.mark.parametrize(
    "op_name, shape, given, view",
    [
        ("slice", (1, 6, 8), {"axis": 1, "start": 2, "end": 5}, True),  # batch 1, leading axis
        ("slice", (2, 6, 8), {"axis": 1, "start": 2, "end": 5}, False),  # batch 2: strided
        ("slice", (2, 6, 8), {"axis": 1}, True),  # the whole axis
        ("slice", (1, 6, 8), {"axis": 1, "start": 0, "end": 6, "step": 2}, False),  # a step
        ("slice", (1, 1, 8), {"axis": 2, "start": 1, "end": 7, "step": 1}, True),
        ("slice", (1, 6, 8), {"axis": 1, "start": 3, "end": 4, "step": 2}, True),  # one row
        ("split", (1, 1, 12), {"axis": -1, "sizes": [4, 8], "index": 1}, True),  # decode qkv
        ("split", (2, 5, 12), {"axis": -1, "sizes": [4, 8], "index": 1}, False),
    ],
)
def test_slices_are_views_exactly_when_contiguous(op_name, shape, given, view) -> None:
    """A view (no kernel, no bytes) exactly when torch's own slice of a contiguous tensor is
    contiguous; otherwise a copy of the piece, read once and written once."""
    torch = pytest.importorskip("torch")
    op = OPS[op_name]
    p = params(op_name, **given)
    out_shape = op.infer_shape(shape, p)
    assert op.view_layer(shape, p) is view
    x = torch.zeros(shape)
    if op_name == "slice":
        axis = p["axis"] % x.dim()
        piece = x[(slice(None),) * axis + (slice(p["start"], p["end"], p["step"]),)]
    else:
        piece = torch.split(x, list(p["sizes"]), p["axis"])[p["index"]]
    assert piece.is_contiguous() is view
    expected_bytes = 0 if view else 2 * 2 * piece.numel()
    assert op.min_bytes(shape, out_shape, p, "float16") == expected_bytes


def test_gelu_approximate_and_relu6_params() -> None:
    gelu = OPS["gelu"]
    assert params("gelu")["approximate"] == "none"
    assert gelu.epilogue_name(params("gelu", approximate="tanh")) == "gelu_tanh"
    assert gelu.epilogue_name(params("gelu")) == "gelu"
    with pytest.raises(ValueError):
        params("gelu", approximate="sigmoid")
    assert OPS["relu6"].infer_shape((2, 3), {}) == (2, 3)
