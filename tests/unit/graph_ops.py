"""Join ops of the tests' own (`t_add`, `t_concat`, `t_pick`), so that the graph plumbing is tested
apart from the real join ops (ops/add.py, ops/concat.py): their shape rules and a torch
forward, no Triton kernel. `registered()` puts them in the registries for one test."""

from __future__ import annotations

from contextlib import contextmanager

from opbench.ops.base import VARIADIC, Example, Op, Param, ShapeError
from opbench.ops.registry import register_op
from opbench.plugins import loading


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether b broadcasts to a (NumPy rules, a keeps its shape)."""
    return len(b) <= len(a) and all(y in (1, x) for x, y in zip(a[::-1], b[::-1], strict=False))


class JoinAdd(Op):
    name = "t_add"
    summary = "a + b (tests only)"
    arity = 2
    reference_written_out = True
    example = Example(((3, 5), (1, 5)), (3, 5))

    def infer_shape(self, in_shape, p):
        a, b = in_shape
        if not _broadcasts(a, b):
            raise ShapeError(f"inputs {list(a)} and {list(b)} do not broadcast")
        return a

    def flops(self, in_shape, out_shape, p):
        return _numel(out_shape)

    def forward(self, x, weights, layer):
        a, b = x
        return a + b


class JoinConcat(Op):
    name = "t_concat"
    summary = "concatenation along `axis` (tests only)"
    arity = VARIADIC
    params = (Param("axis", "int", 1),)
    reference_written_out = True
    example = Example(((2, 3), (4, 3)), (6, 3), {"axis": 1})

    def infer_shape(self, in_shape, p):
        first = in_shape[0]
        axis = p["axis"] % len(first)
        for other in in_shape[1:]:
            same = len(other) == len(first) and all(
                x == y for k, (x, y) in enumerate(zip(first, other, strict=True)) if k != axis
            )
            if not same:
                raise ShapeError(
                    f"inputs {list(first)} and {list(other)} differ outside axis {p['axis']}",
                    "axis",
                )
        return (*first[:axis], sum(s[axis] for s in in_shape), *first[axis + 1 :])

    def forward(self, x, weights, layer):
        import torch

        return torch.cat(x, dim=layer.params["axis"])


class JoinPick(Op):
    """Reads `count` inputs (its count depends on a parameter) and returns the first."""

    name = "t_pick"
    summary = "the first of `count` inputs (tests only)"
    arity = VARIADIC
    params = (Param("count", "pos_int", 2),)

    def input_count(self, params):
        return params["count"]

    def infer_shape(self, in_shape, p):
        return in_shape[0]

    def forward(self, x, weights, layer):
        return x[0].clone()


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@contextmanager
def registered():
    state = loading.snapshot()
    try:
        register_op(JoinAdd(), "tests")
        register_op(JoinConcat(), "tests")
        register_op(JoinPick(), "tests")
        yield
    finally:
        loading.restore(state)
