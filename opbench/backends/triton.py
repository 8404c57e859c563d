"""Our Triton kernels as a backend. Each op maps to a builder in `triton_table.py` that
prepares weights (before timing) and returns a `LayerKernel`; a layer with no builder is
`unsupported`, never run by torch.

Build → bind → launch: `build` gives a `Built` whose `bind` fixes, for its inputs, the output
and workspace buffers, the plan, and every kernel argument (kernels/launch.py); the bound
launch only launches. `Built.plan` holds the plan of the last `bind`.

With `fuse: true` on a model, connected pieces of its graph run as one kernel each: the plan
is `triton_fusion.py`'s (norm → fp8 linears, [silu] → mul → fp8 linear [→ add], conv → bn →
add → act, SwiGLU, linear → add, linear → act, add → norm, linear → rope, rope → attention
with the cache append), the kernels `triton_fused.py`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from opbench.backends.base import Bound, Built, Unsupported, Weights, cast_weights
from opbench.backends.triton_fused import build_fused
from opbench.backends.triton_fusion import fusion_groups
from opbench.backends.triton_table import BUILDERS, FLOAT32_WEIGHTS, LayerKernel, is_view_layer
from opbench.spec.model import LayerSpec, ModelSpec

INTERPRETER_NOTE = "Triton interpreter: times are not performance figures"

__all__ = ["TritonBackend", "build_fused", "fusion_groups", "triton_built"]


def triton_built(kernel: LayerKernel | Callable[..., Any], note: str | None) -> Built:
    """A Built around a built layer; with a bind step, `bind` records its plan in Built.plan."""
    if not isinstance(kernel, LayerKernel):
        return Built(fn=kernel, note=note)
    from opbench.kernels.tuning import TUNING_SECONDS

    plan: dict[str, Any] = {}

    def bind(*xs: Any, out: Any = None, extra: tuple[Any, ...] = ()) -> Bound:
        tuned_before = TUNING_SECONDS[0]
        bound = kernel.bind_into(xs, out, extra) if out is not None or extra else kernel.bind(*xs)
        plan.clear()
        plan.update(bound.plan())
        # Tuning happens at the first bind of a shape: count it as tuning, not as the check
        # that happened to bind first.
        built.tuning_s = (built.tuning_s or 0.0) + TUNING_SECONDS[0] - tuned_before
        extra = dict(zip(kernel.extra_names, bound.extra, strict=True))
        return Bound(launch=bound.launch, out=bound.out, extra=extra)

    built = Built(fn=kernel, note=note, bind=bind, plan=plan, takes_out=kernel.takes_out)
    return built


class TritonBackend:
    name = "triton"

    def unavailable_reason(self, device: str) -> str | None:
        try:
            import triton  # noqa: F401
        except Exception as exc:
            return f"triton cannot be imported: {type(exc).__name__}: {exc}"
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "on the CPU triton needs its interpreter (TRITON_INTERPRET=1 before triton is imported)"
        return None

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        return fusion_groups(model)

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        first = layers[0]
        with torch.no_grad():
            if len(layers) > 1:
                kernel, note = _fused(layers, weights)
            else:
                builder = BUILDERS.get(first.op)
                if builder is None:
                    raise Unsupported(f"no Triton kernel for op {first.op!r}")
                w = (dict(weights[0]) if first.op in FLOAT32_WEIGHTS
                     else cast_weights(weights[0], first.dtype))  # fmt: skip
                kernel = builder(first, w)
                note = "view: no kernel launched" if is_view_layer(first) else None
        if os.environ.get("TRITON_INTERPRET") == "1":
            note = "; ".join(filter(None, [note, INTERPRETER_NOTE]))
        return triton_built(kernel, note)


def _fused(layers: Sequence[LayerSpec], weights: Sequence[Weights]):
    """The fused group's kernel, through this module's `build_fused` (tests replace it)."""
    return build_fused(layers, weights)
