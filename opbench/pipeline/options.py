"""What a run is asked to do: its options, its work items, and the device it runs on."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from opbench.spec.model import GroupTolerance, LayerSpec, ModelSpec, group_tolerance


@dataclass(frozen=True)
class WorkItem:
    """One (model, group of layers, backend) result to produce. The group is one layer, or a
    connected piece of the model's graph built as one (fusion), in walk order."""

    model: ModelSpec
    indices: tuple[int, ...]
    backend: str

    @property
    def layers(self) -> tuple[LayerSpec, ...]:
        return tuple(self.model.layers[i] for i in self.indices)

    @property
    def output_layer(self) -> LayerSpec:
        """The layer whose output is the group's result: its last layer read outside it (a
        fused group may have others, `extra_outputs`, written by the same launch)."""
        return self.model.layers[self.model.graph.group_outputs(self.indices)[-1]]

    @property
    def extra_outputs(self) -> tuple[LayerSpec, ...]:
        """The group's other layers read outside it (add → norm: the sum)."""
        return tuple(
            self.model.layers[i] for i in self.model.graph.group_outputs(self.indices)[:-1]
        )

    def tolerance(self, output: LayerSpec) -> GroupTolerance:
        """The limit `output` (one of the group's outputs) is checked at: the loosest own
        tolerance among the members its value comes through (spec/model.group_tolerance)."""
        graph = self.model.graph
        at = graph.index(output.name)
        through = (graph.ancestors(at) | {at}) & set(self.indices)
        return group_tolerance([self.model.layers[i] for i in sorted(through)], output)


@dataclass
class RunOptions:
    device: str = "cpu"
    backends: Sequence[str] = ()
    models: Sequence[str] = ()
    layers: Sequence[str] = ()
    quick: bool = False
    rounds: int | None = None
    end_to_end: bool = True
    shard: tuple[int, int] | None = None
    gpu_label: str | None = None
    # Entered around every timed loop (warm-up and rounds), never around build or check: lets
    # the ranks of a torchrun run take turns for timing only (--exclusive-timing).
    timing_guard: Callable[[], AbstractContextManager[Any]] = nullcontext
    # Recorded plans to reuse (`--plans`), by (model, layer, backend): see pipeline/plans.py.
    plans: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    # Wall seconds each result took in an earlier run (`--plans RUN`), by (model, layer,
    # backend): shares are balanced on them where known (pipeline/plan.deal).
    costs: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    # Makes each model's data: ModelData (seeded) unless the run's suite is an ONNX file,
    # whose own weights and ONNX Runtime's output come in (pipeline/file_data.py).
    model_data: Callable[..., Any] | None = None
    # Where the suite came from, kept in run.json (`RunResult.origin`): the ONNX import's
    # record (every node: in which layer, absorbed, or unsupported).
    origin: Mapping[str, Any] = field(default_factory=dict)

    def recorded(self) -> dict[str, Any]:
        """The choices that shape what the run measures, for run.json (`RunResult.options`):
        the shares of one run (`--shard`) must agree on each, or `opbench merge` refuses."""
        return {
            "backends": list(self.backends),
            "models": list(self.models),
            "layers": list(self.layers),
            "quick": self.quick,
            "rounds": self.rounds,
            "end_to_end": self.end_to_end,
        }


Progress = Callable[[str, Any], None]


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def prepare_device(device: str) -> None:
    """Settings that must hold before any kernel module is imported."""
    if device == "cpu":
        # triton.jit reads this when it decorates a kernel, i.e. at import.
        os.environ.setdefault("TRITON_INTERPRET", "1")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def gpu_label(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index or 0
    return f"{torch.cuda.get_device_name(index)} #{index}"
