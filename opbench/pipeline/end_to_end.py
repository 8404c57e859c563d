"""A whole model's forward, timed on one backend, from the layers that backend built, in the
two ways a user runs a model.

eager: Python issues each layer in turn. A layer whose input is the same tensor on every call
    (fresh chain input, or the previous layer's preallocated output buffer) runs through its
    bound launch (`Built.bind_input(x).launch`), bound once to that tensor; a layer whose input
    is made anew on every call (the previous layer allocates its output, or the suite changes
    dtype here) gets that new tensor through its `fn`, exactly as a model passes it along.
    A layer is never bound to a stale copy of its input: it would read cold memory where the
    model reads the output just written.
cuda_graph: the whole forward captured once as a CUDA graph and its replays timed (the
    timer's `cuda_graph` option). torch.compile backends give their own graph figure instead:
    the whole forward compiled in their `graph_mode` (mode="reduce-overhead" for
    torch-compile), which captures CUDA graphs itself. No CUDA graphs on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from opbench.backends.base import Built, torch_dtype
from opbench.backends.registry import runs_triton
from opbench.measure.timer import time_callable
from opbench.pipeline.data import ModelData
from opbench.pipeline.measure import error_message, recover, timing_for
from opbench.pipeline.options import RunOptions
from opbench.results.model import EndToEnd, Status
from opbench.spec.model import ModelSpec

EAGER, CUDA_GRAPH = "eager", "cuda_graph"
Step = Callable[[Any], Any]


def time_end_to_end(
    model: ModelSpec,
    backend: str,
    built: dict[tuple[int, ...], Built],
    data: ModelData,
    options: RunOptions,
    implementation: Any = None,
) -> tuple[EndToEnd, EndToEnd]:
    """The whole forward in both modes: (eager, cuda_graph). Layers that start a new chain
    take their own input. `implementation` is the backend object (for its graph mode)."""
    interpreted = runs_triton(backend) and os.environ.get("TRITON_INTERPRET") == "1"
    groups = sorted(built)
    covered = [i for g in groups for i in g]
    if covered != list(range(len(model.layers))):
        reason = "not every layer was built on this backend"
        eager_row = EndToEnd(model.name, backend, Status.UNSUPPORTED, message=reason, mode=EAGER)
        return eager_row, replace(eager_row, mode=CUDA_GRAPH)
    timing = timing_for(model.layers[0], options, interpreted)
    row = EndToEnd(model.name, backend, Status.OK, interpreted=interpreted, mode=EAGER)
    # The suite's `cuda_graph` timing option is for layers; each mode here decides for itself
    # (eager is Python issuing the layers, never a replay).
    timing = replace(timing, cuda_graph=False)
    eager = _timed(row, options, timing, lambda: _eager_forward(model, built, data))
    graph_row = replace(row, mode=CUDA_GRAPH)
    return eager, _graph_mode(graph_row, model, built, data, options, implementation, timing)


def _timed(row: EndToEnd, options: RunOptions, timing, make_forward) -> EndToEnd:
    """`row` timed on the forward `make_forward()` gives; a failure is the result, never a
    crash."""
    try:
        forward = make_forward()
        with options.timing_guard():
            measurement = time_callable(forward, timing, options.device, hold=False)
    except Exception as exc:
        recover(options.device)
        return replace(row, status=Status.ERROR, message=error_message(exc))
    return replace(row, samples_ms=measurement.rounds, timer=measurement.timer)


def _graph_mode(row, model, built, data, options, implementation, timing) -> EndToEnd:
    if not options.device.startswith("cuda"):
        return replace(row, status=Status.UNSUPPORTED, message="no CUDA graphs on the CPU")
    graph_mode = getattr(implementation, "graph_mode", None)
    if graph_mode is None:
        graph_timing = replace(timing, cuda_graph=True)
        return _timed(row, options, graph_timing, lambda: _eager_forward(model, built, data))
    device = options.device
    # The compiled forward captures its own CUDA graphs: the timer must not capture it again
    # (torch refuses: "Cannot prepare for replay during capturing stage").
    result = _timed(
        row, options, timing, lambda: _compiled_forward(model, implementation, data, device)
    )
    return replace(
        result, message=result.message or f"torch.compile(mode={graph_mode!r}) of the forward"
    )


def _chain_input(model: ModelSpec, data: ModelData, index: int, built: Built | None):
    x = data.input(index)
    if built is not None and built.prepare_input is not None:
        # Once, before timing: as in the per-layer timing, the layout is the previous
        # layer's business, not this forward's.
        x = built.prepare_input(x)
    return x


def _eager_forward(model: ModelSpec, built: dict[tuple[int, ...], Built], data: ModelData):
    """The forward as one callable, from the groups' bound launches (see the module doc)."""
    steps: list[Step] = []
    previous = None  # the output of the step before, from running the chain once
    stable = False  # whether that output is the same tensor on every call
    for group in sorted(built):
        layer_built = built[group]
        dtype = torch_dtype(model.layers[group[0]].dtype)
        if model.layers[group[0]].starts_chain:
            source = _chain_input(model, data, group[0], layer_built)
        elif stable and previous.dtype == dtype:
            source = previous
        elif stable:
            # The suite changes dtype here; a real model casts too (one kernel). Into a buffer
            # of its own, so the next layer stays bound like any other.
            source = _cast_step(previous, dtype, steps)
        else:
            source = None
        if source is not None:
            bound = layer_built.bind_input(source)
            previous = bound.launch()
            # Only a buffer the backend owns (Bound.out) is the same tensor on the next call.
            stable = bound.out is not None and previous.data_ptr() == bound.out.data_ptr()
            steps.append(lambda _x, launch=bound.launch: launch())
        else:

            def step(x, fn=layer_built.fn, dtype=dtype):
                # The suite changes dtype here; a real model would cast at this point too.
                return fn(x if x.dtype == dtype else x.to(dtype))

            previous, stable = step(previous), False
            steps.append(step)

    def forward():
        x = None
        for step in steps:
            x = step(x)
        return x

    return forward


def _cast_step(previous, dtype, steps: list[Step]):
    """Append a step that casts `previous` (a stable buffer) into a new stable buffer."""
    import torch

    cast = torch.empty_like(previous, dtype=dtype)
    steps.append(lambda _x, cast=cast, src=previous: cast.copy_(src))
    return steps[-1](None)


def _compiled_forward(model: ModelSpec, implementation, data: ModelData, device: str):
    """The whole model as one function of its chain inputs, compiled by the backend in its
    graph mode; the weights are the same seeded ones, cast as its layers cast them."""
    import torch

    layers = [
        implementation.forward([layer], [data.weights(i)], device, static_weights=True)
        for i, layer in enumerate(model.layers)
    ]
    starts = [i for i, layer in enumerate(model.layers) if layer.starts_chain]
    inputs = [_chain_input(model, data, i, layers[i]) for i in starts]
    dtypes = [torch_dtype(layer.dtype) for layer in model.layers]

    def model_forward(*chain_inputs):
        # Every chain's last output is returned: a compiler drops whatever does not reach an
        # output, and a model of several chains (a layer that takes fresh input starts one)
        # would otherwise be timed without all but its last chain (seen on the H200: 0.038 ms
        # for a ResNet block stack whose eager forward takes 0.46 ms).
        fresh = iter(chain_inputs)
        ends = []
        x = None
        for i, layer in enumerate(layers):
            if i in starts:
                if x is not None:
                    ends.append(x)
                x = next(fresh)
            elif x.dtype != dtypes[i]:
                x = x.to(dtypes[i])
            x = layer.fn(x)
        return (*ends, x)

    compiled = implementation.compile_model(model_forward, inputs)
    mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)

    def forward():
        # Each call is a new inference step: CUDA-graph trees may reuse the last outputs.
        mark_step()
        return compiled(*inputs)

    forward()  # compile and capture before timing
    return forward
