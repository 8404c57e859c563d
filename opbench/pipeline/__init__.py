"""The only place that chains the GPU stages: spec → data → build → check → measure → results.

For every model: weights and the data of every value are drawn once (seeded by the suite,
model, layer and value names: `data`); each backend plans its groups (single layers, or fused
pieces of the graph: `plan`), builds each group, runs it against the high-precision reference,
then times it (`measure`); the whole model's forward over its graph (`forward`) is then
checked against the whole graph's reference and timed on each backend (`end_to_end`). `run` chains them and writes run.json
after every result.
"""

from opbench.pipeline.data import ModelData
from opbench.pipeline.end_to_end import time_end_to_end
from opbench.pipeline.measure import base_result, measure_item
from opbench.pipeline.options import (
    Progress,
    RunOptions,
    WorkItem,
    default_device,
    gpu_label,
    now_iso,
    prepare_device,
)
from opbench.pipeline.plan import plan_work, planned_results, select_models, shares
from opbench.pipeline.run import run_suite

__all__ = [
    "ModelData",
    "Progress",
    "RunOptions",
    "WorkItem",
    "base_result",
    "default_device",
    "gpu_label",
    "measure_item",
    "now_iso",
    "plan_work",
    "planned_results",
    "prepare_device",
    "run_suite",
    "select_models",
    "shares",
    "time_end_to_end",
]
