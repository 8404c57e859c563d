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
class Bound:
    """A built layer bound to one input: the once-per-input work is done.

    launch: runs the layer on the bound input and returns its output; the timed call. For
        kernels bound at the floor it only launches (buffers, grid and kernel fixed at bind).
    out: the output buffer `launch` writes into when the backend allocated it at bind time,
        else None. The checker poisons it before a checked call, so an unwritten element shows.
    """

    launch: Callable[[], torch.Tensor]
    out: torch.Tensor | None = None


@dataclass
class Built:
    """A layer ready to run.

    fn: the unbound callable, input tensor → output tensor.
    bind: the once-per-input step: input tensor → `Bound`. None means the backend has no
        separate bind step, and `bind_input` wraps `fn`.
    prepare_input: applied once to the input before timing, for layouts the previous layer
        would already have produced (e.g. channels_last); None for none.
    note: what a reader should know (internal layout, fusion, etc.).
    tuning_s: one-off tuning/compile time measured at build, never counted in layer time.
    plan: the tuned choice this build made (kernel, tiles, warps, stages, split-K ...), as
        plain JSON-able data, recorded with the result; None when nothing was tuned.
    """

    fn: Callable[[torch.Tensor], torch.Tensor]
    prepare_input: Callable[[torch.Tensor], torch.Tensor] | None = None
    note: str | None = None
    tuning_s: float | None = None
    bind: Callable[[torch.Tensor], Bound] | None = None
    plan: Mapping[str, object] | None = None

    def bind_input(self, x: torch.Tensor) -> Bound:
        """The layer bound to `x`: the backend's own bind step, or `fn` closed over `x`."""
        if self.bind is not None:
            return self.bind(x)
        fn = self.fn
        return Bound(launch=lambda: fn(x))


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
