"""The backend protocol: turn one layer (or a fused group of consecutive layers) into a
zero-argument-ready callable. Backends know nothing about timing or checking."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from opbench.spec.model import LayerSpec, ModelSpec

Weights = Mapping[str, "torch.Tensor"]


# One exception for "no implementation for this layer", shared with the kernels.
from opbench.kernels import Unsupported  # noqa: E402,F401


@dataclass
class Built:
    """A layer ready to run.

    fn: the timed callable, input tensor → output tensor.
    prepare_input: applied once to the input before timing, for layouts the previous layer
        would already have produced (e.g. channels_last); None for none.
    note: what a reader should know (internal layout, fusion, etc.).
    tuning_s: one-off tuning/compile time measured at build, never counted in layer time.
    """

    fn: Callable[[torch.Tensor], torch.Tensor]
    prepare_input: Callable[[torch.Tensor], torch.Tensor] | None = None
    note: str | None = None
    tuning_s: float | None = None


class Backend(Protocol):
    name: str

    def unavailable_reason(self, device: str) -> str | None:
        """None when the backend can run on `device`, else why not."""

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        """Groups of consecutive layer indices built as one unit (fusion); singles by default."""

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        """Build the layers of one group. Weights arrive as float32 on `device`."""


def singles(model: ModelSpec) -> list[tuple[int, ...]]:
    return [(i,) for i in range(len(model.layers))]


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def cast_weights(weights: Weights, dtype: str) -> dict[str, torch.Tensor]:
    target = torch_dtype(dtype)
    return {k: v.to(target) for k, v in weights.items()}
