"""Reference timings from ONNX Runtime for a suite: export, profile, write ORT's own profile.

What `opbench reference onnxruntime SUITE` does:

1. builds every selected model instance of the suite in float32 with the ops' own torch
   computation (`op.forward`) and the same seeded weights as `opbench run`, each layer wrapped
   in a submodule, and all models side by side in one module;
2. exports that module to ONNX (torch.onnx, the torch.export-based exporter) and renames every
   ONNX node ``/<model>/<layer>/<OpType>`` from the module scope it came from, so the names in
   the profile carry the suite's model and layer names;
3. runs it with ONNX Runtime (CUDA where that provider is installed, else CPU; default graph
   optimisations) with profiling on: `warmup` runs and then `runs` runs, each one
   ``model_run`` in the profile;
4. writes ORT's profile JSON unchanged to OUT, and OUT with suffix ``.meta.json`` beside it
   (how, where and when it was produced; which layers could not be exported).

`opbench compare --reference OUT` reads the profile with the onnxruntime reader, which drops
the first run as warm-up by default (`--skip-runs`), and matches each node to its model and
layer by name. Layers that cannot be exported or run are listed in the sidecar and left out.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import platform
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from opbench.errors import ExitCode, InputError, OpbenchError
from opbench.spec.model import LayerSpec, ModelSpec, SuiteSpec

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


def select_models(suite: SuiteSpec, wanted: Sequence[str]) -> tuple[ModelSpec, ...]:
    """Model instances named by --model (instance or base name), or all of them."""
    if not wanted:
        return suite.models
    chosen: list[ModelSpec] = []
    for name in wanted:
        hits = [m for m in suite.models if name in (m.name, m.base_name)]
        if not hits:
            known = ", ".join(m.name for m in suite.models)
            raise InputError(f"no model {name!r} in suite {suite.name!r} (models: {known})")
        chosen.extend(m for m in hits if m not in chosen)
    return tuple(chosen)


# ---- torch side: the module that is exported ----------------------------------------------------


def _layer_module(suite: SuiteSpec, model: ModelSpec, layer: LayerSpec):
    import torch

    from opbench.ops.inputs import generator, seed_for
    from opbench.ops.registry import get_op

    op = get_op(layer.op)
    gen = generator(seed_for(suite.name, model.base_name, layer.name, "weights"))
    weights = op.make_weights(layer, gen)

    class LayerModule(torch.nn.Module):
        """One suite layer; its weights are buffers, so they become ONNX initializers."""

        def __init__(self) -> None:
            super().__init__()
            self.names = list(weights)
            for key, value in weights.items():
                self.register_buffer(key, value.to(torch.float32).contiguous())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return op.forward(x, {key: getattr(self, key) for key in self.names}, layer)

    return LayerModule()


@dataclass(frozen=True)
class _Plan:
    """Which layers of which models go into the exported graph; where chains start."""

    models: tuple[ModelSpec, ...]
    keep: tuple[tuple[LayerSpec, ...], ...]

    def inputs(self) -> list[tuple[int, int, LayerSpec]]:
        """(model index, layer index, layer) of every layer that takes a fresh graph input."""
        out = []
        for i, (model, kept) in enumerate(zip(self.models, self.keep, strict=True)):
            previous: LayerSpec | None = None
            for layer in kept:
                j = model.layers.index(layer)
                follows = previous is not None and model.layers.index(previous) == j - 1
                if layer.starts_chain or j == 0 or not follows:
                    out.append((i, j, layer))
                previous = layer
        return out


def _build_root(suite: SuiteSpec, plan: _Plan):
    """One module holding every model ("m<i>") and its kept layers ("l<j>")."""
    import torch

    starts = {(i, j) for i, j, _ in plan.inputs()}

    class ModelModule(torch.nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            self.order = []
            for layer in plan.keep[i]:
                j = plan.models[i].layers.index(layer)
                self.add_module(f"l{j}", _layer_module(suite, plan.models[i], layer))
                self.order.append((j, (i, j) in starts))

        def forward(self, *fresh: torch.Tensor) -> tuple[torch.Tensor, ...]:
            feeds = iter(fresh)
            ends: list[torch.Tensor] = []
            x: torch.Tensor | None = None
            for j, starts_here in self.order:
                if starts_here:
                    if x is not None:
                        ends.append(x)
                    x = next(feeds)
                x = getattr(self, f"l{j}")(x)
            if x is not None:
                ends.append(x)
            return tuple(ends)

    class Root(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.counts = []
            for i in range(len(plan.models)):
                self.add_module(f"m{i}", ModelModule(i))
                self.counts.append(sum(1 for mi, _, _ in plan.inputs() if mi == i))

        def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            outputs: list[torch.Tensor] = []
            k = 0
            for i, count in enumerate(self.counts):
                outputs.extend(getattr(self, f"m{i}")(*inputs[k : k + count]))
                k += count
            return tuple(outputs)

    return Root().eval()


def _example_inputs(suite: SuiteSpec, plan: _Plan):
    from opbench.ops.inputs import make_input, seed_for

    return tuple(
        make_input(
            layer.input_shape, seed_for(suite.name, plan.models[i].name, layer.name, "input")
        )
        for i, _j, layer in plan.inputs()
    )


def _export(root, inputs, path: Path) -> str:
    """Export to ONNX; returns the exporter used. Exporter chatter is swallowed."""
    import torch

    sink = io.StringIO()
    chatty = logging.getLogger("torch.onnx")
    level = chatty.level
    chatty.setLevel(logging.ERROR)
    try:
        with (
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            with torch.no_grad():
                program = torch.onnx.export(root, inputs, dynamo=True, external_data=False)
            program.save(str(path))
    finally:
        chatty.setLevel(level)
    return f"torch.onnx.export(dynamo=True), torch {torch.__version__}"


_SCOPE = re.compile(r"^m(\d+)\.l(\d+)$")


def _scope_of(node) -> tuple[int, int] | None:
    """(model, layer) indices from the exporter's scope metadata (or a legacy /m0/l3/ name)."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = json.loads(prop.value.replace("'", '"'))
            except ValueError:
                scopes = []
            for scope in reversed(scopes):
                match = _SCOPE.match(str(scope))
                if match:
                    return int(match.group(1)), int(match.group(2))
    legacy = re.match(r"^/m(\d+)/l(\d+)/", node.name)
    return (int(legacy.group(1)), int(legacy.group(2))) if legacy else None


def rename_nodes(onnx_path: Path, plan: _Plan) -> tuple[dict[str, tuple[str, str]], int]:
    """Rename every node /<model>/<layer>/<OpType>[_k] and every tensor it produces
    <node>_output_<i>. ONNX Runtime names some fused nodes after a tensor (`<tensor>_nchwc`),
    so tensors carry the layer too. Returns (new node name -> (model, layer), opset)."""
    import onnx

    proto = onnx.load(str(onnx_path))
    owners: dict[str, tuple[str, str]] = {}
    used: dict[str, int] = {}
    tensors: dict[str, str] = {}
    for node in proto.graph.node:
        scope = _scope_of(node)
        if scope is None:
            base = f"/{node.op_type}"
        else:
            model = plan.models[scope[0]]
            layer = model.layers[scope[1]]
            base = f"/{model.name}/{layer.name}/{node.op_type}"
        count = used.get(base, 0)
        used[base] = count + 1
        node.name = base if count == 0 else f"{base}_{count}"
        if scope is not None:
            owners[node.name] = (model.name, layer.name)
        for k, value in enumerate(node.output):
            if value:
                tensors[value] = f"{node.name}_output_{k}"
    _rename_tensors(proto.graph, tensors)
    onnx.save(proto, str(onnx_path))
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return owners, opset


def _rename_tensors(graph, names: dict[str, str]) -> None:
    """Apply old -> new tensor names everywhere a graph refers to a tensor."""
    for node in graph.node:
        node.input[:] = [names.get(v, v) for v in node.input]
        node.output[:] = [names.get(v, v) for v in node.output]
    for value in (*graph.output, *graph.value_info):
        value.name = names.get(value.name, value.name)


# ---- ONNX Runtime side ------------------------------------------------------------------------


def pick_provider() -> tuple[list[str], str]:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"], "cuda"
    return ["CPUExecutionProvider"], "cpu"


def _session(onnx_path: Path, providers: list[str], profile_prefix: str | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(str(onnx_path), sess_options=options, providers=providers)


def _try_layer(
    suite: SuiteSpec, model: ModelSpec, layer: LayerSpec, work: Path, providers: list[str]
) -> str | None:
    """Why this layer alone cannot be exported or run by ONNX Runtime, or None if it can."""
    plan = _Plan((model,), ((layer,),))
    path = work / "probe.onnx"
    try:
        _export(_build_root(suite, plan), _example_inputs(suite, plan), path)
        session = _session(path, providers)
        session.run(None, _feeds(session, _example_inputs(suite, plan)))
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot be a reference layer"
        return _one_line(exc)
    return None


def _feeds(session, inputs) -> dict[str, Any]:
    return {
        meta.name: tensor.numpy() for meta, tensor in zip(session.get_inputs(), inputs, strict=True)
    }


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
    models: Sequence[str] = (),
    log: Callable[[str], None] = lambda _msg: None,
) -> OrtReference:
    """Export the suite's models, profile them with ONNX Runtime, write OUT and OUT.meta.json."""
    import onnxruntime as ort
    import torch

    if runs < 1:
        raise InputError(f"--runs must be at least 1, not {runs}")
    chosen = select_models(suite, models)
    providers, device = pick_provider()
    keep = [list(m.layers) for m in chosen]
    skipped: list[Skipped] = []
    work = Path(tempfile.mkdtemp(prefix="opbench-ort-"))
    try:
        onnx_path = work / "suite.onnx"
        plan = _Plan(tuple(chosen), tuple(tuple(k) for k in keep))
        log(f"exporting {sum(len(k) for k in keep)} layers of {len(chosen)} model(s) to ONNX")
        try:
            exporter = _export(_build_root(suite, plan), _example_inputs(suite, plan), onnx_path)
            _session(onnx_path, providers)
        except Exception:  # noqa: BLE001 - find the layers that fail, leave them out, retry
            log("the whole suite does not export or load: trying each layer alone")
            for i, model in enumerate(chosen):
                for layer in model.layers:
                    reason = _try_layer(suite, model, layer, work, providers)
                    if reason is not None:
                        skipped.append(Skipped(model.name, layer.name, layer.op, reason))
                        keep[i].remove(layer)
                        log(f"  left out {model.name}/{layer.name} ({layer.op}): {reason}")
            plan = _Plan(tuple(chosen), tuple(tuple(k) for k in keep))
            if not any(plan.keep):
                raise InputError("no layer of the chosen models can be exported to ONNX") from None
            try:
                exporter = _export(
                    _build_root(suite, plan), _example_inputs(suite, plan), onnx_path
                )
            except Exception as exc:  # noqa: BLE001 - each layer exports alone, together they do not
                raise _engine_error("exporting the suite failed", exc) from exc
        owners, opset = rename_nodes(onnx_path, plan)
        log(
            f"profiling with ONNX Runtime {ort.__version__} ({device}): {warmup} warm-up + {runs} runs"
        )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        try:
            session = _session(onnx_path, providers, profile_prefix=str(work / "ort_profile"))
            feeds = _feeds(session, _example_inputs(suite, plan))
            started = time.perf_counter()
            for _ in range(warmup + runs):
                session.run(None, feeds)
            wall_s = time.perf_counter() - started
            produced = Path(session.end_profiling())
        except Exception as exc:  # noqa: BLE001 - one line for the user, not a traceback
            raise _engine_error("ONNX Runtime failed to run the exported suite", exc) from exc
        out.parent.mkdir(parents=True, exist_ok=True)
        meta_path = meta_path_for(out)
        meta = {
            "opbench_reference": "onnxruntime",
            "suite": suite.name,
            "suite_source": suite.source,
            "models": [m.name for m in chosen],
            "profile": out.name,
            "produced_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "onnxruntime": ort.__version__,
            "providers": providers,
            "device": device,
            "graph_optimization": "ORT_ENABLE_ALL (default)",
            "intra_op_threads": "ONNX Runtime default (one per physical core)",
            "cpu": _cpu_name(),
            "cpu_count": os.cpu_count(),
            "load_average_1m_at_start": round(load, 2) if load is not None else None,
            "python": platform.python_version(),
            "exporter": exporter,
            "opset": opset,
            "dtype": "float32",
            "warmup_runs": warmup,
            "runs": runs,
            "skip_runs_for_compare": warmup,
            "wall_s": round(wall_s, 4),
            "node_names": "/<model>/<layer>/<OpType>[_k]",
            "nodes": len(owners),
            "skipped_layers": [asdict(s) for s in skipped],
            "torch": torch.__version__,
        }
        _write_atomic(out, produced.read_bytes())
        _write_atomic(meta_path, (json.dumps(meta, indent=1) + "\n").encode("utf-8"))
        return OrtReference(
            profile=out,
            meta=meta_path,
            models=tuple(m.name for m in chosen),
            layers=sum(len(k) for k in plan.keep),
            skipped=tuple(skipped),
            provider=device,
            runs=runs,
            warmup=warmup,
            nodes=len(owners),
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


def meta_path_for(profile: Path) -> Path:
    return profile.with_name(profile.stem + ".meta.json")


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
