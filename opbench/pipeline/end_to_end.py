"""A whole model's forward over its graph (pipeline/forward.py), checked and timed on one
backend, in the two ways a user runs a model.

eager: Python issues each group in turn (bound launches where the inputs are fixed tensors).
cuda_graph: the whole forward captured once as a CUDA graph and its replays timed (the
    timer's `cuda_graph` option). torch.compile backends give their own graph figure instead:
    the whole forward compiled in their `graph_mode` (mode="reduce-overhead" for
    torch-compile), which captures CUDA graphs itself. No CUDA graphs on the CPU.

Each mode's row carries a `correctness` record: one call of that forward (captured and
replayed once, for the graph mode), its buffers poisoned first, every model output against
the high-precision reference of the whole graph from the same model inputs. The tolerance is
the loosest of the model's layers. The row also says how much device memory the forward needs
(CUDA: what its set-up keeps plus the peak of one call), the graph's live activations, from
the shapes, and the bytes of the buffers planned by liveness (pipeline/arena.py) against one
buffer per value: those two from the plan, on any device.
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from opbench.backends.base import Built, torch_dtype
from opbench.backends.registry import runs_triton
from opbench.measure.check import combine, compare_outputs
from opbench.measure.poison import call_poisoned, poison_, poison_free_memory, scrub
from opbench.measure.timer import time_callable
from opbench.measure.timer_cpu import time_once
from opbench.ops.base import numel
from opbench.pipeline.data import ModelData
from opbench.pipeline.forward import Forward, eager_forward
from opbench.pipeline.measure import error_message, recover, timing_for
from opbench.pipeline.options import RunOptions
from opbench.pipeline.torch_forward import module_forward
from opbench.results.model import EndToEnd, Status
from opbench.spec.model import ModelSpec

EAGER, CUDA_GRAPH = "eager", "cuda_graph"


def time_end_to_end(
    model: ModelSpec,
    backend: str,
    built: dict[tuple[int, ...], Built],
    data: ModelData,
    options: RunOptions,
    implementation: Any = None,
) -> tuple[EndToEnd, EndToEnd]:
    """The whole forward in both modes: (eager, cuda_graph). `implementation` is the backend
    object (for its graph mode)."""
    interpreted = runs_triton(backend) and os.environ.get("TRITON_INTERPRET") == "1"
    graph = model.graph
    outputs = tuple(graph.names[i] for i in graph.outputs)
    itemsizes = [torch_dtype(layer.dtype).itemsize for layer in model.layers]
    row = EndToEnd(
        model.name,
        backend,
        Status.OK,
        interpreted=interpreted,
        mode=EAGER,
        outputs=outputs,
        live_bytes=graph.live_bytes(itemsizes),
        gpu=options.gpu_label,
    )
    reason = _unsupported(model, built)
    if reason:
        row = replace(row, status=Status.UNSUPPORTED, message=reason)
        return row, replace(row, mode=CUDA_GRAPH)
    timing = timing_for(model.layers[0], options)
    # The suite's `cuda_graph` timing option is for layers; each mode here decides for itself
    # (eager is Python issuing the layers, never a replay).
    timing = replace(timing, cuda_graph=False)
    if _whole_module(implementation) and getattr(implementation, "graph_mode", None) is None:
        make_eager = lambda: module_forward(model, data, options.device)  # noqa: E731
    else:
        make_eager = lambda: eager_forward(model, built, data)  # noqa: E731
    eager = _timed(row, options, timing, data, make_eager)
    graph_row = replace(row, mode=CUDA_GRAPH)
    return eager, _graph_mode(graph_row, model, built, data, options, implementation, timing)


def build_groups(
    unit: Any,
    groups: list[tuple[int, ...]],
    data: ModelData,
    backend: Any,
    options: RunOptions,
    built: dict[tuple[int, ...], Built],
) -> str | None:
    """Build `groups` of a whole-model unit (pipeline/plan.EndToEndUnit) into `built`: the
    groups whose layer results another share timed. Each is built with its recorded plan where
    there is one (`--plans`, or the other ranks' plans under torchrun), else as its layer
    result was (shipped plans, or tuning). Returns what failed, or None."""
    from opbench.backends.base import Unsupported

    failed: list[str] = []
    for group in groups:
        layers = [unit.model.layers[i] for i in group]
        recorded = options.plans.get((unit.model.name, layers[0].name, unit.backend))
        try:
            with _reusing(recorded):
                weights = [data.weights(i) for i in group]
                built[group] = backend.build(layers, weights, options.device)
        except Unsupported as exc:
            failed.append(f"{layers[0].name}: {exc}")
        except Exception as exc:  # one group's failure is the row's message, not a crash
            recover(options.device)
            failed.append(f"{layers[0].name}: build failed: {error_message(exc)}")
    return f"could not build {'; '.join(failed)}" if failed else None


@contextmanager
def _reusing(recorded):
    if recorded is None:
        yield
        return
    from opbench.kernels.tuning import reuse

    with reuse(recorded):
        yield


def _whole_module(implementation: Any) -> bool:
    """Whether the backend runs the whole model as one nn.Module (the torch peers:
    pipeline/torch_forward.py) rather than as its built groups in turn."""
    return bool(getattr(implementation, "whole_module", False))


def _unsupported(model: ModelSpec, built: dict[tuple[int, ...], Built]) -> str | None:
    covered = sorted(i for g in built for i in g)
    if covered != list(model.graph.walk()):
        return "not every layer was built on this backend"
    try:
        model.graph.order_groups(built)
    except ValueError as exc:
        return f"the built groups cannot run as one forward: {exc}"
    return None


def _timed(row: EndToEnd, options: RunOptions, timing, data: ModelData, make_forward) -> EndToEnd:
    """`row` checked and timed on the forward `make_forward()` gives; a failure is the result,
    never a crash (with the correctness found before it, if any).

    The eager row keeps the host's time in its figure (Python issuing each layer is what an
    eager forward costs). A graph row is device time: the stream is held while the host
    issues the call, as for a layer. Without the hold, torch.compile's per-call host work
    (guards, CUDA-graph tree bookkeeping: 0.15 ms for the LLaMA-7B block on an H200) leaked
    into its graph figure (1.50 against 1.36 ms held) while a replay of our graph costs the
    host almost nothing: a weakened peer."""
    try:
        with _peak_memory(data.device) as peak:
            forward = make_forward()
            peak["settle"](forward.call)
        row = replace(row, peak_bytes=peak.get("bytes"), **_planned(forward))
        notes = [n for n in (forward.note, row.message) if n]
        if "bytes" in peak and peak["bytes"] is None:
            notes.append(UNKNOWN_PEAK)
        row = replace(row, message="; ".join(notes) or None)
        row = replace(row, correctness=_check(forward, data))
        with options.timing_guard():
            if row.interpreted:  # one call, as a layer's (pipeline/measure.time_call)
                measurement = time_once(forward.call)
            else:
                hold = row.mode != EAGER
                measurement = time_callable(forward.call, timing, options.device, hold=hold)
    except Exception as exc:
        recover(options.device)
        return replace(row, status=Status.ERROR, message=error_message(exc))
    return replace(row, samples_ms=measurement.rounds, timer=measurement.timer)


UNKNOWN_PEAK = (
    "peak memory not measured: the device held less at the forward's peak than before its"
    " set-up (memory of earlier work was freed inside it)"
)


def _graph_mode(row, model, built, data, options, implementation, timing) -> EndToEnd:
    if not options.device.startswith("cuda"):
        return replace(row, status=Status.UNSUPPORTED, message="no CUDA graphs on the CPU")
    graph_mode = getattr(implementation, "graph_mode", None)
    device = options.device
    if graph_mode is None:
        graph_timing = replace(timing, cuda_graph=True)
        if _whole_module(implementation):
            make = lambda: module_forward(model, data, device)  # noqa: E731
        else:
            make = lambda: eager_forward(model, built, data)  # noqa: E731
        return _timed(row, options, graph_timing, data, lambda: _captured(make(), data.device))
    # The compiled forward captures its own CUDA graphs: the timer must not capture it again
    # (torch refuses: "Cannot prepare for replay during capturing stage").
    result = _timed(
        row, options, timing, data, lambda: module_forward(model, data, device, implementation)
    )
    compiled = f"torch.compile(mode={graph_mode!r}) of the forward"
    message = f"{compiled}; {result.message}" if result.message else compiled
    return replace(result, message=message)


def _captured(forward: Forward, device: str) -> Forward:
    """The forward with a check that replays a CUDA graph of it. The timer captures `call`
    itself (timing's cuda_graph option); this capture only checks what a replay writes. Off
    CUDA (tests with a fake timer) the forward is checked as it is."""
    if not device.startswith("cuda"):
        return forward
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward.call()
    torch.cuda.current_stream().wait_stream(side)
    capture = torch.cuda.CUDAGraph()
    with torch.cuda.graph(capture):
        outs = forward.call()

    def replay() -> tuple[Any, ...]:
        capture.replay()
        return outs

    return replace(forward, buffers=forward.buffers + tuple(outs), check=replay)


def _check(forward: Forward, data: ModelData):
    """One call of the forward (or of its check, for a captured graph) from poisoned memory,
    every output against the whole graph's reference."""
    refs, kind = data.model_reference()
    model = data.model
    graph = model.graph
    nbytes = sum(
        numel(model.layers[i].output_shape) * torch_dtype(model.layers[i].dtype).itemsize
        for i in graph.outputs
    )

    def prepare() -> None:
        for buffer in forward.buffers:
            poison_(buffer)
        poison_free_memory(data.device, nbytes)

    def call():
        outs = (forward.check or forward.call)()
        if data.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        return outs

    outs = call_poisoned(call, prepare)
    tolerance = max(layer.effective_tolerance for layer in model.layers)
    loose = any(layer.loose_tolerance for layer in model.layers)
    found = []
    for index, out in zip(graph.outputs, outs, strict=True):
        found.append(
            (graph.names[index], compare_outputs(out, refs[index], tolerance, kind, loose))
        )
    kept = {id(b) for b in forward.buffers}
    for out in outs:
        if id(out) not in kept:
            scrub(out)  # no checked answer stays behind in freed memory
    return combine(found)


def _planned(forward: Forward) -> dict[str, int]:
    """The planned buffers' bytes (pipeline/arena.py), from the plan: on any device."""
    memory = forward.memory
    if memory is None or memory.plan is None:
        return {}
    return {"planned_bytes": memory.planned_bytes, "separate_bytes": memory.separate_bytes}


@contextmanager
def _peak_memory(device: str):
    """On CUDA, what the forward needs: the device memory allocated inside the block beyond
    what was allocated when it began, at its peak over one call made after the set-up
    (`found["settle"](call)`). What set-up allocates and keeps (buffers, prepared inputs)
    counts; its passing allocations (tuning's trial launches, the first binds) do not: they
    are one-off, not the forward's. Bytes in found["bytes"] once the block ends; elsewhere
    nothing is measured (settle does not call)."""
    found: dict[str, Any] = {"settle": lambda call: None}
    if not device.startswith("cuda"):
        yield found
        found.pop("settle")
        return
    import torch

    # Garbage of earlier work still allocated (launches in reference cycles) would be freed
    # inside the block by the forward's own collection: counted before, it made peaks negative.
    gc.collect()
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)

    def settle(call) -> None:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        call()
        torch.cuda.synchronize(device)

    found["settle"] = settle
    torch.cuda.reset_peak_memory_stats(device)
    yield found
    torch.cuda.synchronize(device)
    found.pop("settle")
    found["bytes"] = forward_peak(before, torch.cuda.max_memory_allocated(device))


def forward_peak(before: int, peak: int) -> int | None:
    """The forward's peak beyond what was allocated before its set-up, or None where the
    block ended with its peak below that start: something allocated earlier was freed inside
    it (torch.compile's reduce-overhead mode releases the pool of the forward it compiled
    before), so the difference measures that release, not the forward. Unknown, not negative."""
    extra = int(peak - before)
    return extra if extra >= 0 else None
