"""The backend protocol: turn one layer (or a fused group: a connected piece of the model's
graph) into a callable of its inputs. Backends know nothing about timing or checking.

A layer, or a group, takes one tensor per input: a one-input layer `fn(x)`, a join `fn(a, b)`,
a group its external inputs in order of first use (`Graph.external_inputs`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from opbench.spec.model import LayerSpec, ModelSpec

Weights = Mapping[str, "torch.Tensor"]


# One exception for "no implementation for this layer", shared with the kernels and ops.
from opbench.errors import Unsupported  # noqa: E402,F401


@dataclass
class Bound:
    """A built layer bound to its inputs: the once-per-input work is done.

    launch: runs the layer on the bound inputs and returns its output; the timed call. For
        kernels bound at the floor it only launches (buffers, grid and kernel fixed at bind).
    out: the output buffer `launch` writes into when the backend allocated it at bind time,
        else None. The checker poisons it before a checked call, so an unwritten element shows.
    extra: a fused group's other outputs, by layer name: the buffers the same launch writes
        for the group's layers that are read outside it besides its last (add → norm: the sum,
        the pre-norm residual stream). Checked, poisoned and handed to their readers like
        `out`; a group with such a layer and no buffer for it here is an error.
    """

    launch: Callable[[], torch.Tensor]
    out: torch.Tensor | None = None
    extra: Mapping[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Built:
    """A layer ready to run.

    fn: the unbound callable, input tensors → output tensor (`fn(*xs)`, one per input).
    bind: the once-per-input step: input tensors → `Bound` (`bind(*xs)`). None means the
        backend has no separate bind step, and `bind_input` wraps `fn`.
    prepare_input: applied once to each input before timing, for layouts the producing layer
        would already have produced (e.g. channels_last); None for none.
    note: what a reader should know (internal layout, fusion, etc.).
    tuning_s: one-off tuning/compile time measured at build, never counted in layer time.
    plan: the tuned choice this build made (kernel, tiles, warps, stages, split-K ...), as
        plain JSON-able data, recorded with the result; None when nothing was tuned.
    takes_out: `bind` writes into buffers it is given: `bind(*xs, out=t, extra=(...))`, `out`
        the group's output (contiguous, the layer's output shape and dtype) and `extra` its
        other outputs in `Bound.extra` order. A whole-model forward plans those buffers by
        liveness (spec/buffer_plan.py); a Built without it allocates its own.
    """

    fn: Callable[..., torch.Tensor]
    prepare_input: Callable[[torch.Tensor], torch.Tensor] | None = None
    note: str | None = None
    tuning_s: float | None = None
    bind: Callable[..., Bound] | None = None
    plan: Mapping[str, object] | None = None
    takes_out: bool = False

    def bind_input(
        self,
        *xs: torch.Tensor,
        out: torch.Tensor | None = None,
        extra: Sequence[torch.Tensor] = (),
    ) -> Bound:
        """The layer bound to its inputs `xs`: the backend's own bind step, or `fn` closed
        over them. `out` and `extra`: buffers to write into (only where `takes_out`)."""
        if out is not None or extra:
            if not (self.takes_out and self.bind is not None):
                raise ValueError("this layer allocates its own output: it takes no out buffer")
            if extra:
                return self.bind(*xs, out=out, extra=tuple(extra))
            return self.bind(*xs, out=out)
        if self.bind is not None:
            return self.bind(*xs)
        fn = self.fn
        if len(xs) == 1:
            (x,) = xs
            return Bound(launch=lambda: fn(x))
        return Bound(launch=lambda: fn(*xs))

    def prepared(self, xs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The inputs after `prepare_input` (each of them), or as they are."""
        prepare = self.prepare_input
        return tuple(xs) if prepare is None else tuple(prepare(x) for x in xs)


class Backend(Protocol):
    name: str

    def unavailable_reason(self, device: str) -> str | None:
        """None when the backend can run on `device`, else why not."""

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        """Groups of layer indices built as one unit (fusion), each a connected piece of the
        model's graph with one output (`model.graph.is_connected`, `group_outputs`), in walk
        order within the group; singles by default."""

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        """Build the layers of one group (walk order). Weights arrive as float32 on `device`.
        The Built takes the group's external inputs (`model.graph.external_inputs`)."""


def singles(model: ModelSpec) -> list[tuple[int, ...]]:
    return [(i,) for i in range(len(model.layers))]


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def cast_weights(weights: Weights, dtype: str) -> dict[str, torch.Tensor]:
    target = torch_dtype(dtype)
    return {k: v.to(target) for k, v in weights.items()}
