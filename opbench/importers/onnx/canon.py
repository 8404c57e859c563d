"""The values of the walk (walk.py): canonical tensors, the view-node steps between them, and
what a maker of layers offers (steps.py makes layers through it without importing the walk)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Canon:
    """A canonical tensor (batch first): a model input or a layer's output."""

    id: int
    shape: Shape
    producer: str  # layer id or model input name


@dataclass(frozen=True)
class Step:
    node: Any  # onnx_ir.Node
    out: str  # the output value it makes


class LayerMaker(Protocol):
    """What steps.py needs of the walker: the batch, and a layer added on canonical tensors."""

    batch: int

    def add_layer(  # the walker's, of which steps.py passes these five
        self, op: str, params: dict, inputs: Sequence, out_shape: Shape, nodes: Sequence[str]
    ) -> Canon: ...
