"""The run loop: every selected (model, layer group, backend), in plan order.

The run file is rewritten after every result, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from opbench.backends.base import Backend, Built
from opbench.backends.registry import all_backends
from opbench.pipeline import measure as _measure
from opbench.pipeline.data import ModelData
from opbench.pipeline.end_to_end import build_groups, time_end_to_end
from opbench.pipeline.measure import base_result, recover
from opbench.pipeline.options import Progress, RunOptions, now_iso, prepare_device
from opbench.pipeline.plan import EndToEndUnit, Plan, plan_run, select_models
from opbench.results.io import RunWriter
from opbench.results.model import LayerResult, RunResult, Status
from opbench.spec.load import spec_to_dict
from opbench.spec.model import SuiteSpec

# run.env key of a share's run file: its layer results are all done (its whole-model units may
# not be). Under torchrun a rank that owns a forward waits for every rank's file to say so.
LAYERS_DONE = "layers_done"


def run_suite(
    suite: SuiteSpec,
    options: RunOptions,
    run_path: Path | None = None,
    env: dict[str, Any] | None = None,
    progress: Progress | None = None,
    before_end_to_end: Callable[[RunResult], Mapping[tuple[str, str, str], Any]] | None = None,
) -> RunResult:
    """Run every selected (model, layer, backend) and every whole-model unit; return the
    results.

    `progress(event, payload)` is called with ("plan", n_items), ("start", WorkItem),
    ("done", LayerResult) and ("end_to_end", EndToEnd). The run file, if a path is given, is
    rewritten after every result.

    A run of one share (`options.shard`, every torchrun rank) times its layer results first
    and its whole-model units after them, each unit building every group of its forward: the
    other shares time some of those layers. `before_end_to_end(run)`, called between the two
    passes by a share that owns a unit, returns further recorded plans (torchrun: every rank's,
    once each has finished its layers), so that a group another rank tuned is built with that
    plan, not tuned again.
    """
    prepare_device(options.device)
    notify = progress or (lambda event, payload: None)
    backends: dict[str, Backend] = all_backends()
    plan = plan_run(suite, options, backends)
    run = RunResult(
        suite=suite.name,
        started_at=now_iso(),
        device=options.device,
        env=env or {},
        suite_spec=spec_to_dict(suite),
        suite_source=suite.source,
        shard=options.shard,
        planned=len(plan.items),
        origin=dict(options.origin),
        options=options.recorded(),
    )
    notify("plan", len(plan.items))
    writer = RunWriter(run_path) if run_path is not None else None

    def save(new: RunResult) -> None:
        nonlocal run
        run = new
        if writer is not None:
            writer.write(run)

    save(run)
    runner = _Runner(suite, options, backends, notify, save)
    if not options.shard:
        # One process owns every layer of a model: each forward reuses the groups its layer
        # results built, right after them.
        runner.walk(lambda: run, plan.items, plan.end_to_end, reuse=True)
    else:
        runner.walk(lambda: run, plan.items, [], reuse=False)
        save(replace(run, env={**run.env, LAYERS_DONE: True}))
        if plan.end_to_end:
            extra = before_end_to_end(run) if before_end_to_end else {}
            runner.options = replace(options, plans={**extra, **options.plans})
            runner.walk(lambda: run, [], plan.end_to_end, reuse=False)
    finished_env = dict(run.env)
    if options.device.startswith("cuda"):
        import torch

        from opbench.measure.env import gpu_clocks

        finished_env["clocks_end"] = gpu_clocks(torch.device(options.device).index or 0)
    save(replace(run, env=finished_env, finished_at=now_iso(), complete=_complete(run, plan)))
    return run


def _complete(run: RunResult, plan: Plan) -> bool:
    """Every planned result is there, and every whole-model unit gave its rows (a unit that
    could not run gives rows that say why, so only a missing row leaves the run incomplete)."""
    rows = {(e.model, e.backend) for e in run.end_to_end}
    return len(run.layers) == len(plan.items) and all(
        (u.model.name, u.backend) in rows for u in plan.end_to_end
    )


class _Runner:
    """Walks models in suite order: each model's data made once, its layer results per
    backend, then that backend's whole-model units."""

    def __init__(self, suite, options, backends, notify, save) -> None:
        self.suite, self.options, self.backends = suite, options, backends
        self.notify, self.save = notify, save
        self.unavailable = {
            name: backends[name].unavailable_reason(options.device) for name in backends
        }

    def walk(self, current, items, units, reuse: bool) -> None:
        options = self.options
        for model in select_models(self.suite, options):
            model_items = [item for item in items if item.model.name == model.name]
            model_units = [unit for unit in units if unit.model.name == model.name]
            if not model_items and not model_units:
                continue
            data = (options.model_data or ModelData)(self.suite, model, options.device)
            order = [i.backend for i in model_items] + [u.backend for u in model_units]
            for backend_name in dict.fromkeys(order):
                built: dict[tuple[int, ...], Built] = {}
                tried: set[tuple[int, ...]] = set()
                for item in (i for i in model_items if i.backend == backend_name):
                    self.notify("start", item)
                    result = self._measure(item, data, built)
                    tried.add(item.indices)
                    self.save(current().with_layer(result))
                    self.notify("done", result)
                for unit in (u for u in model_units if u.backend == backend_name):
                    if not reuse:
                        built, tried = {}, set()
                    self._end_to_end(current, unit, data, built, tried)
                built.clear()
            del data
            recover(options.device)

    def _measure(self, item, data, built) -> LayerResult:
        reason = self.unavailable[item.backend]
        if reason:
            return replace(
                base_result(item, self.options.device, self.options.gpu_label),
                status=Status.UNSUPPORTED,
                message=reason,
            )
        backend = self.backends[item.backend]
        return _measure.measure_item(item, data, backend, self.options, built)

    def _end_to_end(self, current, unit: EndToEndUnit, data, built, tried) -> None:
        options, backend = self.options, self.backends[unit.backend]
        if self.unavailable[unit.backend]:
            return  # every layer result already says why; a forward would say it again
        missing = [g for g in unit.groups if g not in tried]
        failed = build_groups(unit, missing, data, backend, options, built)
        e2e = time_end_to_end(unit.model, unit.backend, built, data, options, backend)
        if failed:
            e2e = tuple(replace(row, message=f"{row.message}; {failed}") if row.message
                        else replace(row, message=failed) for row in e2e)  # fmt: skip
        self.save(replace(current(), end_to_end=current().end_to_end + e2e))
        for row in e2e:
            self.notify("end_to_end", row)
