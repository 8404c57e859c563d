"""Build, check and time one work item. A layer's own failure becomes its result, never a crash."""

from __future__ import annotations

import gc
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from opbench.backends.base import Backend, Built, Unsupported, torch_dtype
from opbench.backends.registry import runs_triton
from opbench.measure.measurement import Measurement
from opbench.measure.timer import time_callable
from opbench.measure.timer_cpu import time_once
from opbench.ops.base import numel
from opbench.ops.registry import get_op
from opbench.pipeline.checks import Checks, WrongOutput
from opbench.pipeline.data import ModelData
from opbench.pipeline.options import RunOptions, WorkItem
from opbench.results.model import LayerResult, Status
from opbench.spec.model import LayerSpec, TimingSpec


def error_message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


def base_result(item: WorkItem, device: str, gpu: str | None = None) -> LayerResult:
    layers = item.layers
    first, last = layers[0], item.output_layer
    ops = [get_op(layer.op) for layer in layers]
    flops = sum(op.layer_flops(la) for op, la in zip(ops, layers, strict=True))
    nbytes = sum(op.layer_bytes(la) for op, la in zip(ops, layers, strict=True))
    if len(layers) > 1:
        # A fused group moves its inputs, output and weights once; the values that stay inside
        # the group (written once, read by each reader inside) never touch memory.
        graph = item.model.graph
        members = set(item.indices)
        for i, layer in zip(item.indices, layers, strict=True):
            if layer is not last:
                readers = sum(1 for c in graph.consumers[i] if c in members)
                nbytes -= numel(layer.output_shape) * (1 + readers) * _itemsize(layer.dtype)
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
        interpreted=runs_triton(item.backend) and os.environ.get("TRITON_INTERPRET") == "1",
    )


def _itemsize(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def timing_for(layer: LayerSpec, options: RunOptions) -> TimingSpec:
    timing = layer.timing.quick() if options.quick else layer.timing
    if options.rounds:
        timing = timing.with_rounds(options.rounds)
    return timing


def time_call(
    fn: Callable[[], Any], timing: TimingSpec, device: str, interpreted: bool, hold: bool = True
) -> Measurement:
    """`fn` timed as `timing` says; interpreted Triton by one call (timer_cpu.time_once):
    the interpreter is for correctness, its rows are marked and no table reads their time,
    and each further call would cost seconds of the tests' time for nothing."""
    if interpreted:
        return time_once(fn)
    return time_callable(fn, timing, device, hold=hold)


def measure_item(
    item: WorkItem,
    data: ModelData,
    backend: Backend,
    options: RunOptions,
    built_cache: dict | None = None,
) -> LayerResult:
    """Build, check and time one work item. Never raises for a layer's own failure.
    A plan recorded for this item (`--plans`) is handed to the kernels' tuner."""
    recorded = options.plans.get((item.model.name, item.layers[0].name, item.backend))
    if recorded is None:
        return _measure_item(item, data, backend, options, built_cache)
    from opbench.kernels.tuning import reuse

    with reuse(recorded):
        return _measure_item(item, data, backend, options, built_cache)


def _measure_item(
    item: WorkItem,
    data: ModelData,
    backend: Backend,
    options: RunOptions,
    built_cache: dict | None,
) -> LayerResult:

    result = base_result(item, options.device, options.gpu_label)
    layers = item.layers
    clock = time.perf_counter
    try:
        start = clock()
        weights = [data.weights(i) for i in item.indices]
        built: Built = backend.build(layers, weights, options.device)
        build_s = clock() - start
    except Unsupported as exc:
        return replace(result, status=Status.UNSUPPORTED, message=str(exc))
    except Exception as exc:  # a compile error or OOM in one layer must not end the run
        recover(options.device)
        return replace(result, status=Status.ERROR, message=f"build failed: {error_message(exc)}")
    check_start = clock()
    tuned_at_build = built.tuning_s or 0.0
    try:
        checks = Checks(
            item,
            data,
            built,
            options.device,
            validate=lambda out: output_problem(out, item.output_layer, options.device),
        )
        bound = checks.first_call()
        checks.second_input()
        # A backend that tunes when it binds (the first call) reports it in built.tuning_s.
        check_s = clock() - check_start - ((built.tuning_s or 0.0) - tuned_at_build)
        timing = timing_for(layers[0], options)
        with options.timing_guard():
            time_start = clock()
            measurement = time_call(bound.launch, timing, options.device, result.interpreted)
            time_s = clock() - time_start
        after = clock()
        checks.after_timing(bound)
        correctness = checks.result()
        check_s += clock() - after
    except Unsupported as exc:
        return replace(result, status=Status.UNSUPPORTED, message=str(exc))
    except WrongOutput as exc:
        return replace(result, status=Status.ERROR, message=f"wrong output: {exc}")
    except Exception as exc:
        recover(options.device)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return replace(
            result,
            status=Status.ERROR,
            message=f"{error_message(exc)} (at {Path(where.filename).name}:{where.lineno})",
        )
    if built_cache is not None and correctness.passed:
        built_cache[item.indices] = built
    # Tuning at build is part of build_s (a slow build with no figure of its own counts as
    # tuning: a compile); tuning at bind, during the checks' first calls, is not.
    tuned_at_bind = (built.tuning_s or 0.0) - tuned_at_build
    tuned_in_build = min(
        tuned_at_build if built.tuning_s is not None else (build_s if build_s > 1.0 else 0.0),
        build_s,
    )
    tune_s = tuned_in_build + tuned_at_bind
    tuning = tune_s or None
    # A CPU result's spread or the load may say it was pre-empted; the interpreter's few
    # calls are no performance figure, so nothing to warn about there.
    warning = None if result.interpreted else measurement.warning
    return replace(
        result,
        samples_ms=measurement.rounds,
        timer=measurement.timer,
        correctness=correctness,
        note="; ".join(n for n in (built.note, warning) if n) or None,
        tuning_s=tuning,
        plan=dict(built.plan) if built.plan else None,
        host_ms=measurement.host_ms,
        stream_ms=measurement.stream_ms,
        stop_reason=measurement.stop_reason,
        phases_s={
            "build": round(build_s - tuned_in_build, 4),
            "tune": round(tune_s, 4),
            "check": round(check_s, 4),
            "time": round(time_s, 4),
        },
    )


def output_problem(out: object, layer: LayerSpec, device: str) -> str | None:
    """Why `out` cannot be the layer's output (not a tensor; wrong shape, dtype or device),
    else None. Plugin backends are held to this like the built-in ones."""
    import torch

    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(layer.output_shape):
        return f"shape {list(out.shape)}, expected {list(layer.output_shape)}"
    if out.dtype != torch_dtype(layer.dtype):
        return f"dtype {str(out.dtype).removeprefix('torch.')}, expected {layer.dtype}"
    want = torch.device(device)
    if out.device.type != want.type or want.index not in (None, out.device.index):
        return f"on device {out.device}, expected {device}"
    return None


def recover(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        torch.cuda.empty_cache()
