"""What an op reads of an ONNX node (`OnnxNode`) and what it makes of it (`OnnxReading`).

An op declares the nodes it reads (`Op.onnx_imports`) and reads each in `Op.read_onnx`: the
node's attributes and constant inputs become the op's parameters, the inputs that are its
weights are named, and the reading says how the layer sits on the graph (`layout`). The ONNX
importer (importers/onnx) describes the node, asks the registry's ops in turn, and does the
placing: where the batch is, views, constant operands as model inputs. Ops import nothing of
the importer nor of onnx: the description is plain values (numpy arrays for constants).

A reading declines a node that is another op's (None: MatMul of two activations is matmul's,
not linear's) or refuses one it cannot take with one line why (`Refused`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opbench.errors import NodeRefused as Refused

Shape = tuple[int, ...]

# ---- layouts: how the importer places a layer (importers/onnx/layouts.py) -----------------
#: One data input, the output its shape and view (activations: the importer may fold one into
#: the conv or linear before it).
ELEMENTWISE = "elementwise"
#: [N, C, H, W] with the batch in dim 0; an output of lower rank is the layer's [N, C, 1, 1]
#: without its unit dims (ReduceMean with keepdims=0).
NCHW = "nchw"
#: Over the last axis, whatever the other dims hold; `last_dim`: the output's, if it changes.
ROWS = "rows"
#: Every input read as a whole tensor (a constant one: a model input fed with the file's
#: values), the batch in one dim of each and of the output; the parameters named in `axes`
#: are ONNX axes, made batch-first (refused along the batch).
JOIN = "join"
#: Like JOIN, each operand leading with the batch (a product over the last two dims).
BATCHED = "batched"
#: Two operands, the one that broadcasts read second (a constant one: a model input).
BROADCAST = "broadcast"
#: q/k heads: the importer reads the head split of the input (`layout`, `head_dim`).
HEADS = "heads"
#: q, k, v as head splits, repeat_kv as kv_heads, the mask (the importer's attention.py).
ATTENTION = "attention"


@dataclass(frozen=True)
class OnnxValue:
    """One input or output of the node: its shape (None where unknown), whether it is a
    constant of the file (`constant`: its value as numpy, read on first use) and whether it
    holds integers."""

    shape: Shape | None
    is_constant: bool = False
    integer: bool = False
    read: Callable[[], Any] | None = field(default=None, repr=False, compare=False)

    @property
    def constant(self) -> Any:
        return self.read() if self.is_constant and self.read is not None else None


@dataclass(frozen=True)
class OnnxNode:
    """An ONNX node as an op reads it. `inputs`: one per input slot, None where it is not
    given; `outputs`: None where nothing names the output (an optional output left out)."""

    domain: str
    op_type: str
    attributes: Mapping[str, Any]  # strings decoded
    inputs: tuple[OnnxValue | None, ...]
    outputs: tuple[OnnxValue | None, ...] = ()

    def attr(self, name: str, default: Any = None) -> Any:
        value = self.attributes.get(name)
        return default if value is None else value

    def given(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def is_constant(self, i: int) -> bool:
        return self.given(i) and self.inputs[i].is_constant  # type: ignore[union-attr]

    def constant(self, i: int) -> Any:
        """Input i's constant as numpy, or None (not given, or computed)."""
        return self.inputs[i].constant if self.given(i) else None  # type: ignore[union-attr]

    def scalar(self, i: int) -> float | None:
        """Input i as a number: a constant of one element, else None."""
        array = self.constant(i)
        return None if array is None or array.size != 1 else float(array.reshape(-1)[0])

    def shape(self, i: int = 0) -> Shape:
        return self.inputs[i].shape  # type: ignore[union-attr, return-value]

    def epsilon(self) -> float:
        """`epsilon` as written before it was stored in float32 (1e-05, not 9.9999997e-06)."""
        return float(f"{float(self.attr('epsilon', 1e-5)):.7g}")


@dataclass(frozen=True)
class OnnxReading:
    """An op's reading of a node: the layer's parameters (as a suite writes them, defaults
    left out), its weights (key → (input index, "asis" or "transpose": stored as Wᵀ)), the
    inputs the layer reads in order, and how the importer places it."""

    params: Mapping[str, Any]
    layout: str = ELEMENTWISE
    weights: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    reads: tuple[int, ...] = (0,)
    axes: tuple[str, ...] = ()  # JOIN: parameters that are ONNX axes
    last_dim: int | None = None  # ROWS: the output's last dim, when not the input's


def elementwise(op: Any, node: OnnxNode, implied: Mapping[str, Any]) -> OnnxReading | None:
    """`Op.read_onnx` by default: one elementwise layer, its parameters `op.from_onnx`'s."""
    params = op.from_onnx(implied, node.attributes)
    return None if params is None else OnnxReading(params)


__all__ = ["OnnxNode", "OnnxReading", "OnnxValue", "Refused"]
