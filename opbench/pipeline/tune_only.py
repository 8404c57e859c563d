"""Tune without timing: build and bind every Triton layer of a suite, so that each kernel
chooses its plan, and collect the choices. `opbench plans tune` turns them into the package's
shipped plan tables (kernels/shipped_plans.py); nothing is checked or timed here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opbench.spec.model import SuiteSpec

TRITON = "triton"


@dataclass
class TuneReport:
    """choices: every recorded kernel choice (Choice.to_json()), in the order made.
    layers: Triton work items bound; skipped: (model/layer, why) of those that would not
    build or bind; tuning_s: time spent timing candidates; wall_s: the whole walk."""

    choices: list[Mapping[str, Any]] = field(default_factory=list)
    layers: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    tuning_s: float = 0.0
    wall_s: float = 0.0


def tune_suites(
    suites: Iterable[SuiteSpec], device: str, progress: Callable[[str], None] | None = None
) -> TuneReport:
    """Build and bind each Triton work item of `suites` once, on `device`."""
    from opbench.backends.base import Unsupported
    from opbench.backends.registry import get_backend
    from opbench.kernels.tuning import TUNING_SECONDS
    from opbench.pipeline.data import ModelData
    from opbench.pipeline.options import RunOptions
    from opbench.pipeline.plan import plan_work

    report = TuneReport()
    start, tuned_before = time.perf_counter(), TUNING_SECONDS[0]
    backend = get_backend(TRITON)
    for suite in suites:
        options = RunOptions(device=device, backends=(TRITON,))
        for item in plan_work(suite, options, {TRITON: backend}):
            name = f"{suite.name}/{item.model.name}/{'+'.join(la.name for la in item.layers)}"
            data = ModelData(suite, item.model, device)
            try:
                weights = [data.weights(i) for i in item.indices]
                built = backend.build(item.layers, weights, device)
                built.bind_input(*built.prepared(data.group_inputs(item.indices)))
            except Unsupported as exc:
                report.skipped.append((name, str(exc)))
                continue
            except Exception as exc:  # one layer's failure must not end the walk
                report.skipped.append((name, f"{type(exc).__name__}: {exc}"[:200]))
                continue
            report.layers += 1
            report.choices.extend((built.plan or {}).get("choices", []))
            if progress is not None:
                progress(name)
    report.tuning_s = TUNING_SECONDS[0] - tuned_before
    report.wall_s = time.perf_counter() - start
    return report
