"""The correctness checks of one work item, around its timing.

1. The first call, on the suite's seeded inputs, against the reference.
2. Second inputs of the same shapes, seeded for this backend and drawn afresh for each check
   (data.py), against their own reference: no other computation in the process has produced
   its answer, so recycled memory cannot hold it, and a kernel that only knows the first input
   fails.
3. After timing, one more call on the first input, against the first call's output: a kernel
   right only on its first call, or racing on later ones, fails. (A call after the timed loop
   rather than the last timed call itself: keeping that one's output would add host work
   inside the timed loop.)
Each checked call starts from poisoned memory (measure/poison.py): its preallocated output,
the device's free memory and, as the call allocates it, every tensor it takes uninitialised;
and every output the checker releases is poisoned first. Device time is untouched: none of
this runs while timing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from opbench.backends.base import Bound, Built, torch_dtype
from opbench.measure.check import compare_outputs, with_failures
from opbench.measure.poison import call_poisoned, poison_, poison_free_memory, scrub
from opbench.ops.base import numel
from opbench.pipeline.data import ModelData
from opbench.pipeline.options import WorkItem
from opbench.results.model import Correctness
from opbench.spec.model import LayerSpec

if TYPE_CHECKING:
    import torch

SECOND_INPUT = "second input: "
AFTER_TIMING = "after timing: "

# Why a call's return value cannot be the layer's output (not a tensor, wrong shape, dtype or
# device), or None.
Validate = Callable[[object], "str | None"]


class WrongOutput(Exception):
    """A checked call returned something that cannot be the layer's output."""


def checked_launch(
    bound: Bound, device: str, nbytes: int, validate: Validate | None = None
) -> torch.Tensor:
    """One call of `bound` whose outputs start as poison; synchronised and validated."""

    def prepare() -> None:
        for buffer in (bound.out, *bound.extra.values()):
            if buffer is not None:
                poison_(buffer)
        poison_free_memory(device, nbytes)

    def call() -> torch.Tensor:
        out = bound.launch()
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        return out

    out = call_poisoned(call, prepare)
    problem = validate(out) if validate is not None else None
    if problem:
        raise WrongOutput(problem)
    return out


class Checks:
    """Runs the checks of one item and gathers them into one Correctness."""

    def __init__(
        self,
        item: WorkItem,
        data: ModelData,
        built: Built,
        device: str,
        validate: Validate | None = None,
    ) -> None:
        self.item, self.data, self.built, self.device = item, data, built, device
        self.validate = validate
        last = item.output_layer
        self.nbytes = numel(last.output_shape) * torch_dtype(last.dtype).itemsize
        self.first: torch.Tensor | None = None  # a copy of the first call's output
        self.first_finite = False
        self.xs: tuple[torch.Tensor, ...] = ()  # the timed binding's inputs
        self.correctness: Correctness | None = None

    def _compare(
        self, out: torch.Tensor, ref: torch.Tensor, output: LayerSpec, kind: str,
        kept: bool = False,
    ) -> Correctness:  # fmt: skip
        """`out` (one of the item's outputs) against `ref` at its limit: for a fused group the
        loosest own tolerance of the members its value comes through (WorkItem.tolerance),
        named in the record; a single layer's own. `kept`: the record the result keeps, which
        carries the loose mark."""
        limit = self.item.tolerance(output)
        whose = limit.layer if len(self.item.indices) > 1 else None
        return compare_outputs(out, ref, limit.value, kind, kept and limit.loose, whose)

    def _launch(self, bound: Bound) -> torch.Tensor:
        return checked_launch(bound, self.device, self.nbytes, self.validate)

    def _extra_failures(self, bound: Bound, refs: dict, kind: str) -> tuple[str, ...]:
        """A fused group's other outputs (`WorkItem.extra_outputs`) against their references,
        each failure prefixed with the output's name; a missing one is a wrong output."""
        failures: list[str] = []
        graph = self.item.model.graph
        for layer in self.item.extra_outputs:
            out = bound.extra.get(layer.name)
            if out is None:
                raise WrongOutput(f"the group gives no buffer for its output {layer.name!r}")
            ref = refs[graph.index(layer.name)]
            found = self._compare(out, ref, layer, kind)
            failures += [f"output {layer.name!r}: {f}" for f in found.failures]
        return tuple(failures)

    def first_call(self) -> Bound:
        """Bind the seeded inputs, check the first call, and return the binding to time."""
        xs = self.xs = self.built.prepared(self.data.group_inputs(self.item.indices))
        bound = self.built.bind_input(*xs)
        refs, kind = self.data.references(self.item.indices)
        ref = refs[self.item.model.graph.index(self.item.output_layer.name)]
        out = self._launch(bound)
        self.correctness = self._compare(out, ref, self.item.output_layer, kind, kept=True)
        self._add("", self._extra_failures(bound, refs, kind))
        self.first_finite = self.correctness.nonfinite == 0
        # A copy: a backend may write every call into the same buffer.
        self.first = out.detach().clone()
        scrub(out, spare=xs)
        return bound

    def second_input(self) -> None:
        raw = self.data.group_inputs(self.item.indices, check=self.item.backend)
        refs, kind = self.data.references(self.item.indices, raw)
        ref = refs[self.item.model.graph.index(self.item.output_layer.name)]
        xs = self.built.prepared(raw)
        # A backend may record each bind's tuned choices in Built.plan: the plan reported is
        # the timed binding's, so what this extra bind writes there is undone.
        plan = self.built.plan
        timed_plan = dict(plan) if isinstance(plan, dict) else None
        try:
            second = self.built.bind_input(*xs)
            out = self._launch(second)
            extra = self._extra_failures(second, refs, kind)
        finally:
            if timed_plan is not None and isinstance(plan, dict):
                plan.clear()
                plan.update(timed_plan)
        found = self._compare(out, ref, self.item.output_layer, kind)
        scrub(out, spare=xs)
        self._add(SECOND_INPUT, found.failures + extra)

    def after_timing(self, bound: Bound) -> None:
        """One more call on the timed binding, against the first call's output (against the
        reference where the first output had NaN/Inf, which would compare with nothing)."""
        out = self._launch(bound)
        if self.first_finite:
            against, kind = self.first, "first call"
        else:
            against, kind = self.data.reference(self.item.indices)
        found = self._compare(out, against, self.item.output_layer, kind)
        scrub(out, spare=self.xs)
        extra = ()
        if self.item.extra_outputs:
            refs, ref_kind = self.data.references(self.item.indices)
            extra = self._extra_failures(bound, refs, ref_kind)
        self._add(AFTER_TIMING, found.failures + extra)

    def _add(self, what: str, failures: tuple[str, ...]) -> None:
        assert self.correctness is not None, "first_call runs first"
        self.correctness = with_failures(self.correctness, tuple(what + f for f in failures))

    def result(self) -> Correctness:
        assert self.correctness is not None, "first_call runs first"
        scrub(self.first)
        self.first = None
        return self.correctness
