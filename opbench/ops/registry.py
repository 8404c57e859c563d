"""Every op: the built-in ones, in one explicit list, and those plugins register, through one
path: `register_op(op, origin)` claims the name in the spec's vocabulary and keeps the op."""

from __future__ import annotations

import difflib

from opbench.ops.activation import GELU, ReLU, SiLU
from opbench.ops.attention import Attention
from opbench.ops.base import Op
from opbench.ops.batchnorm import BatchNorm2d
from opbench.ops.conv2d import Conv2d
from opbench.ops.flatten import Flatten
from opbench.ops.linear import Linear
from opbench.ops.norm import LayerNorm, RMSNorm
from opbench.ops.pool import AvgPool2d, MaxPool2d
from opbench.ops.softmax import Softmax
from opbench.ops.transpose import Permute, Transpose
from opbench.spec import vocabulary
from opbench.spec.vocabulary import BUILTIN

OPS: dict[str, Op] = {}


def register_op(op: Op, origin: str) -> None:
    """Make `op` usable in suites under `op.name`. Raises vocabulary.NameClash."""
    vocabulary.claim_op(op.name, origin)
    OPS[op.name] = op


def snapshot() -> dict[str, Op]:
    return dict(OPS)


def restore(state: dict[str, Op]) -> None:
    OPS.clear()
    OPS.update(state)


for _op in (
    Linear(),
    Conv2d(),
    MaxPool2d(),
    AvgPool2d(),
    BatchNorm2d(),
    LayerNorm(),
    RMSNorm(),
    Softmax(),
    ReLU(),
    GELU(),
    SiLU(),
    Transpose(),
    Permute(),
    Flatten(),
    Attention(),
):
    register_op(_op, BUILTIN)


def get_op(name: str) -> Op:
    return OPS[name]


def suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""
