"""The only place that chains the GPU stages: spec → build → check → measure → results.

For every model: weights and inputs are drawn once (seeded by the suite, model and layer
names); each backend plans its groups (single layers, or fused chains), builds each group,
runs it once against the high-precision reference, then times it. The run file is written
atomically after every result, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import gc
import os
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from opbench.backends.base import Backend, Built, Unsupported, torch_dtype
from opbench.backends.registry import BACKEND_NAMES, get_backend
from opbench.measure.check import compare_outputs
from opbench.measure.timer import time_callable
from opbench.ops.inputs import generator, make_input, seed_for
from opbench.ops.registry import get_op
from opbench.results.io import RunWriter
from opbench.results.model import EndToEnd, LayerResult, RunResult, Status
from opbench.spec.load import spec_to_dict
from opbench.spec.model import LayerSpec, ModelSpec, SuiteSpec, TimingSpec

# Above this many FLOPs (or elements), the reference runs in float32 on the GPU instead of
# float64 on the CPU, which would take minutes for one large GEMM.
GPU_REFERENCE_FLOPS = 2e9
GPU_REFERENCE_ELEMENTS = 32 * 1024 * 1024


@dataclass(frozen=True)
class WorkItem:
    """One (model, group of layers, backend) result to produce."""

    model: ModelSpec
    indices: tuple[int, ...]
    backend: str

    @property
    def layers(self) -> tuple[LayerSpec, ...]:
        return tuple(self.model.layers[i] for i in self.indices)


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


def _model_selected(model: ModelSpec, names: Sequence[str]) -> bool:
    return not names or model.name in names or model.base_name in names


def select_models(suite: SuiteSpec, options: RunOptions) -> list[ModelSpec]:
    return [m for m in suite.models if _model_selected(m, options.models)]


def plan_work(
    suite: SuiteSpec, options: RunOptions, backends: dict[str, Backend]
) -> list[WorkItem]:
    """Every result the run will produce, in order. Deterministic, so shards agree."""
    items: list[WorkItem] = []
    for model in select_models(suite, options):
        for name in _backend_order(model, options):
            backend = backends[name]
            for group in backend.plan(model):
                layers = [model.layers[i] for i in group]
                if not all(name in layer.backends for layer in layers):
                    groups = [(i,) for i in group]
                else:
                    groups = [group]
                for g in groups:
                    if name not in model.layers[g[0]].backends:
                        continue
                    if options.layers and not any(
                        model.layers[i].name in options.layers for i in g
                    ):
                        continue
                    items.append(WorkItem(model, g, name))
    if options.shard:
        k, n = options.shard
        keys = [(item.model.name, item.layers[0].name) for item in items]
        items = [item for item, share in zip(items, shares(keys, n), strict=True) if share == k - 1]
    return items


def shares(keys: Sequence[tuple[str, str]], n: int) -> list[int]:
    """The share (0-based, of n) of each planned result, from its (model, first layer) key.

    Every backend's result for the same layer lands in the same share, so a layer's speed-up
    is always the ratio of two timings taken on one GPU, and the shares stay balanced however
    many backends a suite lists (plan order alternates backends: dealing results out one by
    one would give one rank every torch layer and another every triton layer)."""
    first_seen: dict[tuple[str, str], int] = {}
    for key in keys:
        first_seen.setdefault(key, len(first_seen))
    return [first_seen[key] % n for key in keys]


def _backend_order(model: ModelSpec, options: RunOptions) -> list[str]:
    order: dict[str, None] = {}
    for layer in model.layers:
        for name in layer.backends:
            if not options.backends or name in options.backends:
                order.setdefault(name, None)
    return list(order)


def _error_message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


class ModelData:
    """Seeded weights, inputs and references of one model, computed once and shared by backends."""

    def __init__(self, suite: SuiteSpec, model: ModelSpec, device: str) -> None:
        self.suite, self.model, self.device = suite, model, device
        self._weights: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, Any] = {}
        self._refs: dict[tuple[int, ...], tuple[Any, str]] = {}

    def weights(self, index: int) -> dict[str, Any]:
        """float32 weights on the device. Seeded by the model's base name: sweeps share them."""
        if index not in self._weights:
            layer = self.model.layers[index]
            gen = generator(seed_for(self.suite.name, self.model.base_name, layer.name, "weights"))
            cpu = get_op(layer.op).make_weights(layer, gen)
            self._weights[index] = {k: v.to(self.device) for k, v in cpu.items()}
        return self._weights[index]

    def input(self, index: int):
        """The layer's input in its dtype, on the device (fresh random-normal data)."""
        if index not in self._inputs:
            layer = self.model.layers[index]
            x = make_input(
                layer.input_shape, seed_for(self.suite.name, self.model.name, layer.name, "input")
            )
            self._inputs[index] = x.to(device=self.device, dtype=torch_dtype(layer.dtype))
        return self._inputs[index]

    def reference(self, indices: tuple[int, ...]):
        """The group's output computed in high precision from the same (rounded) inputs and weights."""
        if indices in self._refs:
            return self._refs[indices]
        import torch

        layers = [self.model.layers[i] for i in indices]
        flops = sum(
            get_op(lay.op).flops(lay.input_shape, lay.output_shape, lay.params) for lay in layers
        )
        big = max(_numel(lay.input_shape) + _numel(lay.output_shape) for lay in layers)
        on_gpu = self.device.startswith("cuda") and (
            flops > GPU_REFERENCE_FLOPS or big > GPU_REFERENCE_ELEMENTS
        )
        dev, dtype, kind = (
            (self.device, torch.float32, "float32-cuda")
            if on_gpu
            else ("cpu", torch.float64, "float64-cpu")
        )
        x = self.input(indices[0]).to(dev, dtype)
        with torch.no_grad(), _no_tf32():
            for i, layer in zip(indices, layers, strict=False):
                rounded = {
                    k: v.to(torch_dtype(layer.dtype)).to(dev, dtype)
                    for k, v in self.weights(i).items()
                }
                x = get_op(layer.op).forward(x, rounded, layer)
                if i != indices[-1]:
                    # Between fused layers, the unfused model would round to the layer dtype too.
                    x = x.to(torch_dtype(layer.dtype)).to(dtype)
        self._refs = {indices: (x, kind)}  # keep one: references of large layers are big
        return x, kind


class _no_tf32:
    def __enter__(self):
        import torch

        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _base_result(item: WorkItem, device: str, gpu: str | None = None) -> LayerResult:
    layers = item.layers
    first, last = layers[0], layers[-1]
    ops = [get_op(layer.op) for layer in layers]
    flops = sum(
        op.flops(la.input_shape, la.output_shape, la.params)
        for op, la in zip(ops, layers, strict=False)
    )
    if len(layers) == 1:
        nbytes = ops[0].min_bytes(first.input_shape, first.output_shape, first.params, first.dtype)
    else:
        # A fused group moves its input, output and weights once; intermediates never touch memory.
        nbytes = sum(
            op.min_bytes(la.input_shape, la.output_shape, la.params, la.dtype)
            for op, la in zip(ops, layers, strict=False)
        )
        inner = sum(_numel(la.output_shape) for la in layers[:-1]) * 2 * _itemsize(first.dtype)
        nbytes -= inner
    return LayerResult(
        model=item.model.name,
        layer=first.name,
        op="+".join(layer.op for layer in layers),
        backend=item.backend,
        status=Status.OK,
        dtype=first.dtype,
        quant=first.quant,
        input_shape=first.input_shape,
        output_shape=last.output_shape,
        flops=flops,
        bytes=nbytes,
        covers=tuple(layer.name for layer in layers) if len(layers) > 1 else (),
        reference_name=first.reference_name,
        target_speedup=first.target_speedup,
        regression_threshold=first.regression_threshold,
        device=device,
        gpu=gpu,
        interpreted=item.backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1",
    )


def _itemsize(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def _timing_for(layer: LayerSpec, options: RunOptions, interpreted: bool) -> TimingSpec:
    timing = layer.timing.quick() if options.quick else layer.timing
    if options.rounds:
        timing = timing.with_rounds(options.rounds)
    if interpreted:
        # The interpreter is for correctness; a few calls show it runs, nothing more.
        timing = TimingSpec(warmup_ms=0.0, rep_ms=0.0, rounds=min(timing.rounds, 2), flush_l2=False)
    return timing


def measure_item(
    item: WorkItem,
    data: ModelData,
    backend: Backend,
    options: RunOptions,
    built_cache: dict | None = None,
) -> LayerResult:
    """Build, check and time one work item. Never raises for a layer's own failure."""
    import torch

    result = _base_result(item, options.device, options.gpu_label)
    layers = item.layers
    try:
        weights = [data.weights(i) for i in item.indices]
        start = time.perf_counter()
        built: Built = backend.build(layers, weights, options.device)
        build_s = time.perf_counter() - start
    except Unsupported as exc:
        return replace(result, status=Status.UNSUPPORTED, message=str(exc))
    except Exception as exc:  # a compile error or OOM in one layer must not end the run
        _recover(options.device)
        return replace(result, status=Status.ERROR, message=f"build failed: {_error_message(exc)}")
    try:
        x = data.input(item.indices[0])
        if built.prepare_input is not None:
            x = built.prepare_input(x)
        out = built.fn(x)
        if options.device.startswith("cuda"):
            torch.cuda.synchronize()
        ref, kind = data.reference(item.indices)
        correctness = compare_outputs(out, ref, layers[-1].effective_tolerance, kind)
        del out
        timing = _timing_for(layers[0], options, result.interpreted)
        fn = built.fn
        with options.timing_guard():
            measurement = time_callable(lambda: fn(x), timing, options.device)
    except Unsupported as exc:
        return replace(result, status=Status.UNSUPPORTED, message=str(exc))
    except Exception as exc:
        _recover(options.device)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return replace(
            result,
            status=Status.ERROR,
            message=f"{_error_message(exc)} (at {Path(where.filename).name}:{where.lineno})",
        )
    if built_cache is not None and correctness.passed:
        built_cache[item.indices] = built
    tuning = built.tuning_s if built.tuning_s is not None else (build_s if build_s > 1.0 else None)
    return replace(
        result,
        samples_ms=measurement.rounds,
        timer=measurement.timer,
        correctness=correctness,
        note=built.note,
        tuning_s=tuning,
    )


def _recover(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        torch.cuda.empty_cache()


def time_end_to_end(
    model: ModelSpec,
    backend: str,
    built: dict[tuple[int, ...], Built],
    data: ModelData,
    options: RunOptions,
) -> EndToEnd:
    """The whole forward, layer to layer. Layers that start a new chain take their own input."""
    interpreted = backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1"
    groups = sorted(built)
    covered = [i for g in groups for i in g]
    if covered != list(range(len(model.layers))):
        return EndToEnd(
            model.name,
            backend,
            Status.UNSUPPORTED,
            message="not every layer was built on this backend",
        )
    try:
        chain_inputs = {g: data.input(g[0]) for g in groups if model.layers[g[0]].starts_chain}

        dtypes = {g: torch_dtype(model.layers[g[0]].dtype) for g in groups}

        def forward():
            x = None
            for g in groups:
                if g in chain_inputs:
                    x = chain_inputs[g]
                    if built[g].prepare_input is not None:
                        x = built[g].prepare_input(x)
                elif x.dtype != dtypes[g]:
                    # The suite changes dtype here; a real model would cast at this point too.
                    x = x.to(dtypes[g])
                x = built[g].fn(x)
            return x

        timing = _timing_for(model.layers[0], options, interpreted)
        with options.timing_guard():
            measurement = time_callable(forward, timing, options.device)
    except Exception as exc:
        _recover(options.device)
        return EndToEnd(
            model.name, backend, Status.ERROR, message=_error_message(exc), interpreted=interpreted
        )
    return EndToEnd(
        model.name, backend, Status.OK, measurement.rounds, measurement.timer, interpreted
    )


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def planned_results(suite: SuiteSpec, options: RunOptions) -> list[LayerResult]:
    """Every result the (unsharded) run would produce, as empty results in plan order."""
    backends = {name: get_backend(name) for name in BACKEND_NAMES}
    return [
        _base_result(item, options.device, options.gpu_label)
        for item in plan_work(suite, options, backends)
    ]


def gpu_label(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index or 0
    return f"{torch.cuda.get_device_name(index)} #{index}"


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
    backends: dict[str, Backend] = {name: get_backend(name) for name in BACKEND_NAMES}
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
        data = ModelData(suite, model, options.device)
        for backend_name in dict.fromkeys(item.backend for item in model_items):
            built: dict[tuple[int, ...], Built] = {}
            for item in (i for i in model_items if i.backend == backend_name):
                notify("start", item)
                reason = unavailable[backend_name]
                if reason:
                    result = replace(
                        _base_result(item, options.device, options.gpu_label),
                        status=Status.UNSUPPORTED,
                        message=reason,
                    )
                else:
                    result = measure_item(item, data, backends[backend_name], options, built)
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
                e2e = time_end_to_end(model, backend_name, built, data, options)
                run = replace(run, end_to_end=run.end_to_end + (e2e,))
                save()
            built.clear()
        del data
        _recover(options.device)
    finished_env = dict(run.env)
    if options.device.startswith("cuda"):
        import torch

        from opbench.measure.env import gpu_clocks

        finished_env["clocks_end"] = gpu_clocks(torch.device(options.device).index or 0)
    run = replace(run, env=finished_env, finished_at=now_iso(), complete=True)
    save()
    return run
