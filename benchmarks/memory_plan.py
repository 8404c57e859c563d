"""The Triton whole-model forward's planned memory, from the shapes alone (no kernel runs, no
GPU): for each model of the asked suites, the bytes of its group outputs as one buffer each
(before the plan), the planned arena (spec/buffer_plan.py, what pipeline/arena.py allocates),
and the graph's live activations (torch eager's floor, `Graph.live_bytes`). Also, for convs,
the bytes of the NHWC input copies the conv kernel makes when its tuned plan reads NHWC from
an NCHW input: their sum (each conv's own copy) and their largest (one shared scratch block,
kernels/scratch.py), an upper bound either way since tuning may pick the direct path.

    PYTHONPATH=. python3 benchmarks/memory_plan.py suites/cnn.yaml suites/llama.yaml
    PYTHONPATH=. python3 benchmarks/memory_plan.py --tiny     (suites/quickstart.yaml alone)

A prediction of the GPU's `peak_bytes` of the triton rows: arena + scratch + the prepared
model inputs (+ what a call allocates besides: nothing for bound groups).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opbench.backends.triton_fusion import fusion_groups  # noqa: E402
from opbench.backends.triton_table import is_view_layer  # noqa: E402
from opbench.ops.base import numel  # noqa: E402
from opbench.spec.buffer_plan import forward_steps, plan_buffers  # noqa: E402
from opbench.spec.load import load_suite  # noqa: E402
from opbench.spec.model import LayerSpec, ModelSpec  # noqa: E402

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
MIB = 2**20
MIN_CHANNELS_FOR_BLOCKS = 16  # kernels/conv/conv_plans.py: fewer channels take the gather path


def planned_group(model: ModelSpec, group: tuple[int, ...]) -> bool:
    """Whether the triton backend's Built for the group takes its out (triton_table.py): all
    but views and attention with separate q, k, v inputs."""
    layer = model.layers[group[0]]
    if len(group) == 1 and is_view_layer(layer):
        return False
    return not (layer.op == "attention" and layer.params.get("separate_qkv"))


def nhwc_copy_bytes(layer: LayerSpec) -> int:
    """The bytes of the NHWC copy of a conv's NCHW input, when its candidates include the
    NHWC path (kernels/conv_plans.float_paths); 0 otherwise."""
    if layer.op != "conv2d" or layer.params["quant"] != "none":
        return 0
    n, c, h, w = layer.input_shape
    p = layer.params
    if (p["groups"] != 1 and p["groups"] == c) or c < MIN_CHANNELS_FOR_BLOCKS:
        return 0

    def pair(v):
        return tuple(v) if isinstance(v, (list, tuple)) else (v, v)

    pointwise = (pair(p["kernel_size"]), pair(p["stride"]), pair(p["padding"])) == (
        (1, 1),
        (1, 1),
        (0, 0),
    )
    if pointwise and (h * w) % 8 == 0:
        return 0
    return numel(layer.input_shape) * ITEMSIZE[layer.dtype]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suites", nargs="*", type=Path)
    parser.add_argument("--tiny", action="store_true", help="suites/quickstart.yaml alone")
    args = parser.parse_args()
    if args.tiny:
        args.suites = args.suites or [ROOT / "suites" / "quickstart.yaml"]
    if not args.suites:
        parser.error("give one suite or more (or --tiny)")
    print(
        "| model | groups | one buffer each MiB | planned arena MiB | × fewer | live (torch) MiB "
        "| NHWC copies: sum / largest MiB | model inputs MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for path in args.suites:
        for model in load_suite(path).models:
            graph = model.graph
            order = graph.order_groups(fusion_groups(model))
            nbytes = [numel(la.output_shape) * ITEMSIZE[la.dtype] for la in model.layers]
            planned = [g for g in order if planned_group(model, g)]
            plan = plan_buffers(
                forward_steps(graph, order, planned, nbytes),
                keep=[graph.names[i] for i in graph.outputs],
            )
            live = graph.live_bytes([ITEMSIZE[la.dtype] for la in model.layers])
            copies = [nhwc_copy_bytes(model.layers[g[0]]) for g in order]
            inputs = sum(numel(s) for s in graph.inputs.values()) * ITEMSIZE[model.layers[0].dtype]
            cells = [
                model.name,
                str(len(order)),
                f"{plan.separate / MIB:.2f}",
                f"{plan.size / MIB:.2f}",
                f"{plan.separate / plan.size:.1f}" if plan.size else "—",
                f"{live / MIB:.2f}",
                f"{sum(copies) / MIB:.2f} / {max(copies, default=0) / MIB:.2f}",
                f"{inputs / MIB:.2f}",
            ]
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
