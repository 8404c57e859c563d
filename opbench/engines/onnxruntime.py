"""Reference timings from ONNX Runtime for a suite: export, profile, write ORT's own profile.

What `opbench reference onnxruntime SUITE` does:

1. writes every selected model instance of the suite, side by side, as one float32 ONNX graph
   with the same export as `opbench export onnx` (opbench/export: the suite's seeded weights
   from ModelData, one ONNX form per op), its nodes named ``/<model>/<layer>/<OpType>[_k]``
   so the names in the profile carry the suite's model and layer names;
2. leaves out, and lists, layers whose op has no ONNX form or that ONNX Runtime cannot run
   alone; the layer after a gap takes a fresh graph input;
3. runs it with ONNX Runtime (CUDA where that provider is installed, else CPU; default graph
   optimisations; `--threads` intra-op threads, by default as many as `opbench run` times the
   CPU with) with profiling on: `warmup` runs and then `runs` runs, each one ``model_run``
   in the profile;
4. writes ORT's profile JSON unchanged to OUT, and OUT with suffix ``.meta.json`` beside it
   (how, where and when it was produced; which layers could not be exported).

`opbench compare --reference OUT` reads the profile with the onnxruntime reader, which drops
the first run as warm-up by default (`--skip-runs`), and matches each node to its model and
layer by name. Layers that cannot be exported or run are listed in the sidecar and left out.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from opbench.errors import ExitCode, InputError, OpbenchError
from opbench.export.files import select_models
from opbench.export.graph import PATH_NAMES, BuiltGraph, Part, SeededData, build_graph
from opbench.reference.sidecar import meta_path_for
from opbench.spec.model import LayerSpec, ModelSpec, SuiteSpec

__all__ = [
    "OrtReference",
    "Skipped",
    "pick_provider",
    "profile_graph",
    "profile_suite",
    "select_models",
]

DEFAULT_RUNS = 20
DEFAULT_WARMUP = 1


@dataclass(frozen=True)
class Skipped:
    """A layer left out of the reference, and why."""

    model: str
    layer: str
    op: str
    reason: str


@dataclass(frozen=True)
class OrtReference:
    """What `profile_suite` wrote."""

    profile: Path
    meta: Path
    models: tuple[str, ...]
    layers: int
    skipped: tuple[Skipped, ...]
    provider: str
    runs: int
    warmup: int
    nodes: int
    meta_data: dict[str, Any] = field(default_factory=dict)


# ---- ONNX Runtime side ------------------------------------------------------------------------


def pick_provider() -> tuple[list[str], str]:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"], "cuda"
    return ["CPUExecutionProvider"], "cpu"


def _session(
    model, providers: list[str], profile_prefix: str | None = None, threads: int | None = None
):
    """A session of `model` (a ModelProto, or its bytes)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options=options, providers=providers)


def _why_not(
    data: SeededData, model: ModelSpec, layer: LayerSpec, providers: list[str]
) -> str | None:
    """Why this layer alone cannot be written to ONNX or run by ONNX Runtime, or None."""
    try:
        built = build_graph([Part(model, (layer,))], data, PATH_NAMES, "probe")
        _session(built.proto, providers).run(None, built.feeds)
    except InputError as exc:
        return exc.message
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot be a reference layer"
        return _one_line(exc)
    return None


def _build_all(
    chosen: Sequence[ModelSpec],
    data: SeededData,
    providers: list[str],
    log: Callable[[str], None],
) -> tuple[BuiltGraph, list[Skipped]]:
    """One graph of every chosen model; layers that cannot be in it are left out and listed."""
    parts = [Part(m, m.layers) for m in chosen]
    try:
        built = build_graph(parts, data, PATH_NAMES, "opbench_suite")
        _session(built.proto, providers)
        return built, []
    except Exception:  # noqa: BLE001 - find the layers that fail, leave them out, retry
        log("the whole suite does not export or load: trying each layer alone")
    skipped: list[Skipped] = []
    kept_parts = []
    for model in chosen:
        kept = []
        for layer in model.layers:
            reason = _why_not(data, model, layer, providers)
            if reason is None:
                kept.append(layer)
            else:
                skipped.append(Skipped(model.name, layer.name, layer.op, reason))
                log(f"  left out {model.name}/{layer.name} ({layer.op}): {reason}")
        if kept:
            kept_parts.append(Part(model, tuple(kept)))
    if not kept_parts:
        raise InputError("no layer of the chosen models can be exported to ONNX")
    try:
        return build_graph(kept_parts, data, PATH_NAMES, "opbench_suite"), skipped
    except Exception as exc:  # noqa: BLE001 - each layer exports alone, together they do not
        raise _engine_error("exporting the suite failed", exc) from exc


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def profile_suite(
    suite: SuiteSpec,
    out: Path,
    *,
    runs: int = DEFAULT_RUNS,
    warmup: int = DEFAULT_WARMUP,
    threads: int | None = None,
    models: Sequence[str] = (),
    log: Callable[[str], None] = lambda _msg: None,
) -> OrtReference:
    """Export the suite's models, profile them with ONNX Runtime, write OUT and OUT.meta.json."""
    if runs < 1:
        raise InputError(f"--runs must be at least 1, not {runs}")
    chosen = select_models(suite, models)
    providers, _device = pick_provider()
    log(f"writing {sum(len(m.layers) for m in chosen)} layers of {len(chosen)} model(s) to ONNX")
    built, skipped = _build_all(chosen, SeededData(suite), providers, log)
    meta = {
        "suite": suite.name,
        "suite_source": suite.source,
        "models": [m.name for m in chosen],
        "batch": {m.name: m.batch for m in chosen},
        "exporter": "opbench.export (onnx.helper, one ONNX form per op)",
        "weights": "the suite's seeded weights",
        "opset": built.opset,
        "node_names": "/<model>/<layer>/<OpType>[_k]",
        "nodes": len(built.owners),
        "skipped_layers": [asdict(s) for s in skipped],
    }
    return profile_graph(
        built.proto.SerializeToString(),
        built.feeds,
        out,
        meta,
        layers=len(set(built.owners.values())),
        skipped=tuple(skipped),
        runs=runs,
        warmup=warmup,
        threads=threads,
        log=log,
    )


def profile_graph(
    model: bytes,
    feeds: dict[str, Any],
    out: Path,
    meta: dict[str, Any],
    *,
    layers: int,
    skipped: tuple[Skipped, ...] = (),
    runs: int = DEFAULT_RUNS,
    warmup: int = DEFAULT_WARMUP,
    threads: int | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> OrtReference:
    """Profile one ONNX graph with ONNX Runtime on `threads` intra-op threads (default: the
    thread count `opbench run` times the CPU with, so the two are timed alike), write ORT's
    profile to OUT and how it was made to OUT.meta.json (`meta` completed)."""
    import onnxruntime as ort
    import torch

    from opbench.measure.timer_cpu import default_threads

    if runs < 1:
        raise InputError(f"--runs must be at least 1, not {runs}")
    threads = threads or default_threads()
    providers, device = pick_provider()
    work = Path(tempfile.mkdtemp(prefix="opbench-ort-"))
    try:
        log(
            f"profiling with ONNX Runtime {ort.__version__} ({device}, {threads} thread(s)): "
            f"{warmup} warm-up + {runs} runs"
        )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        try:
            session = _session(
                model, providers, profile_prefix=str(work / "ort_profile"), threads=threads
            )
            started = time.perf_counter()
            for _ in range(warmup + runs):
                session.run(None, feeds)
            wall_s = time.perf_counter() - started
            produced = Path(session.end_profiling())
        except Exception as exc:  # noqa: BLE001 - one line for the user, not a traceback
            raise _engine_error("ONNX Runtime failed to run the model", exc) from exc
        out.parent.mkdir(parents=True, exist_ok=True)
        meta_path = meta_path_for(out)
        meta = {
            "opbench_reference": "onnxruntime",
            **meta,
            "profile": out.name,
            "produced_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "onnxruntime": ort.__version__,
            "providers": providers,
            "device": device,
            "graph_optimization": "ORT_ENABLE_ALL (default)",
            "intra_op_threads": threads,
            "cpu": _cpu_name(),
            "cpu_count": os.cpu_count(),
            "load_average_1m_at_start": round(load, 2) if load is not None else None,
            "python": platform.python_version(),
            "dtype": "float32",
            "warmup_runs": warmup,
            "runs": runs,
            "skip_runs_for_compare": warmup,
            "wall_s": round(wall_s, 4),
            "torch": torch.__version__,
        }
        _write_atomic(out, produced.read_bytes())
        _write_atomic(meta_path, (json.dumps(meta, indent=1) + "\n").encode("utf-8"))
        return OrtReference(
            profile=out,
            meta=meta_path,
            models=tuple(meta.get("models", ())),
            layers=layers,
            skipped=skipped,
            provider=device,
            runs=runs,
            warmup=warmup,
            nodes=int(meta.get("nodes", 0)),
            meta_data=meta,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(exc: Exception) -> str:
    """An exception as one plain line (exporter messages carry colour codes and tracebacks)."""
    lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else 'no message'}"


def _engine_error(what: str, exc: Exception) -> OpbenchError:
    return OpbenchError(f"{what}: {_one_line(exc)}", exit_code=ExitCode.LAYER_ERROR)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
