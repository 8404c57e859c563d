"""The planned memory of a whole-model forward (pipeline/forward.py).

- **Outputs**: every group whose Built `takes_out` writes its outputs into one arena, at the
  offsets spec/buffer_plan.py gives by liveness over the forward's order: a value's bytes are
  reused once its last reader (or the last reader of a view of it) has run; model outputs are
  kept to the end. The plan is fixed before anything is bound, so bound launches and
  CUDA-graph captures see the same addresses on every call.
- **Scratch**: what bound launches write before they read (kernels/scratch.py: NHWC copies,
  split-K partials, quantized activations) comes from one block that every group's scratch
  starts at, sized by the largest group's need.

Torch eager keeps no buffers between layers: its peak is its live values. Without this plan
the Triton forward held one buffer per group for the whole forward (ResNet-50 b32 on an H100:
935 MiB against torch eager's 171.5 MiB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from opbench.backends.base import Built, torch_dtype
from opbench.ops.base import numel
from opbench.spec.buffer_plan import BufferPlan, forward_steps, plan_buffers
from opbench.spec.model import ModelSpec


@dataclass
class ForwardMemory:
    """plan: where each planned value lives (None: no group takes its buffers). arena: the
    bytes of the planned values. scratch: the shared scratch (kernels/scratch.ScratchArena).
    enabled: False for a forward asked not to plan (each group's buffers its own)."""

    plan: BufferPlan | None
    arena: Any
    scratch: Any
    layouts: Mapping[str, tuple[tuple[int, ...], Any]]
    enabled: bool = True

    @staticmethod
    def of(
        model: ModelSpec,
        order: Sequence[tuple[int, ...]],
        built: Mapping[tuple[int, ...], Built],
        device: str,
        plan: bool = True,
    ) -> ForwardMemory:
        """The plan for the groups in `order`; plan=False: none (each allocates its own)."""
        import torch

        from opbench.kernels.scratch import ScratchArena

        graph = model.graph
        dtypes = [torch_dtype(layer.dtype) for layer in model.layers]
        nbytes = [
            numel(layer.output_shape) * dtype.itemsize
            for layer, dtype in zip(model.layers, dtypes, strict=True)
        ]
        planned = [g for g in order if plan and built[g].takes_out]
        layouts = {
            graph.names[i]: (tuple(model.layers[i].output_shape), dtypes[i])
            for g in planned
            for i in graph.group_outputs(g)
        }
        buffers = arena = None
        if planned:
            steps = forward_steps(graph, order, planned, nbytes)
            buffers = plan_buffers(steps, keep=[graph.names[i] for i in graph.outputs])
            arena = torch.empty(buffers.size, dtype=torch.uint8, device=device)
        return ForwardMemory(buffers, arena, ScratchArena(device), layouts, plan)

    def binding(self) -> AbstractContextManager[Any]:
        """Around one group's bind: its scratch from the shared block (when planning)."""
        return self.scratch.group() if self.enabled else nullcontext()

    def out_for(self, value: str) -> Any:
        """The planned buffer of `value` (the layer's output shape and dtype, contiguous), or
        None when its group writes a buffer of its own."""
        if self.plan is None or value not in self.plan.offsets:
            return None
        shape, dtype = self.layouts[value]
        start = self.plan.offsets[value]
        return self.arena[start : start + self.plan.sizes[value]].view(dtype).view(shape)

    @property
    def buffers(self) -> tuple[Any, ...]:
        """The arena and the scratch block: poisoned before a checked call."""
        return tuple(b for b in (self.arena, self.scratch.block) if b is not None and b.numel())

    @property
    def planned_bytes(self) -> int:
        """The bytes the forward holds for its planned outputs and its shared scratch."""
        return sum(b.numel() for b in self.buffers)

    @property
    def separate_bytes(self) -> int:
        """What the planned outputs took as one buffer each (before this plan)."""
        return 0 if self.plan is None else self.plan.separate
