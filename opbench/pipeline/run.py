"""The run loop: every selected (model, layer group, backend), in plan order.

The run file is rewritten after every result, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from opbench.backends.base import Backend, Built
from opbench.backends.registry import all_backends
from opbench.pipeline import measure as _measure
from opbench.pipeline.data import ModelData
from opbench.pipeline.end_to_end import time_end_to_end
from opbench.pipeline.measure import base_result, recover
from opbench.pipeline.options import Progress, RunOptions, now_iso, prepare_device
from opbench.pipeline.plan import plan_work, select_models
from opbench.results.io import RunWriter
from opbench.results.model import RunResult, Status
from opbench.spec.load import spec_to_dict
from opbench.spec.model import SuiteSpec


def run_suite(
    suite: SuiteSpec,
    options: RunOptions,
    run_path: Path | None = None,
    env: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Run every selected (model, layer, backend) and return the results.

    `progress(event, payload)` is called with ("plan", n_items), ("start", WorkItem) and
    ("done", LayerResult). The run file, if a path is given, is rewritten after every result.
    """
    prepare_device(options.device)
    notify = progress or (lambda event, payload: None)
    backends: dict[str, Backend] = all_backends()
    items = plan_work(suite, options, backends)
    run = RunResult(
        suite=suite.name,
        started_at=now_iso(),
        device=options.device,
        env=env or {},
        suite_spec=spec_to_dict(suite),
        suite_source=suite.source,
        shard=options.shard,
        planned=len(items),
        origin=dict(options.origin),
    )
    notify("plan", len(items))

    writer = RunWriter(run_path) if run_path is not None else None

    def save() -> None:
        if writer is not None:
            writer.write(run)

    save()
    unavailable = {name: backends[name].unavailable_reason(options.device) for name in backends}
    for model in select_models(suite, options):
        model_items = [item for item in items if item.model.name == model.name]
        if not model_items:
            continue
        data = (options.model_data or ModelData)(suite, model, options.device)
        for backend_name in dict.fromkeys(item.backend for item in model_items):
            built: dict[tuple[int, ...], Built] = {}
            for item in (i for i in model_items if i.backend == backend_name):
                notify("start", item)
                reason = unavailable[backend_name]
                if reason:
                    result = replace(
                        base_result(item, options.device, options.gpu_label),
                        status=Status.UNSUPPORTED,
                        message=reason,
                    )
                else:
                    result = _measure.measure_item(
                        item, data, backends[backend_name], options, built
                    )
                run = run.with_layer(result)
                save()
                notify("done", result)
            # A model of one layer group has no forward beyond that result: timing it again
            # would double the work and add nothing.
            if (
                options.end_to_end
                and len(built) > 1
                and not options.layers
                and not options.shard
                and not unavailable[backend_name]
            ):
                e2e = time_end_to_end(
                    model, backend_name, built, data, options, backends[backend_name]
                )  # (eager, cuda_graph)
                run = replace(run, end_to_end=run.end_to_end + e2e)
                save()
            built.clear()
        del data
        recover(options.device)
    finished_env = dict(run.env)
    if options.device.startswith("cuda"):
        import torch

        from opbench.measure.env import gpu_clocks

        finished_env["clocks_end"] = gpu_clocks(torch.device(options.device).index or 0)
    run = replace(run, env=finished_env, finished_at=now_iso(), complete=True)
    save()
    return run
