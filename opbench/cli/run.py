"""`opbench run SUITE`: build, check and time every layer; write run.json; print the table."""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from opbench.cli.console import console, handles_errors
from opbench.cli.plugins import load_plugins, plugin_option
from opbench.cli.run_output import device_peaks, finish, report_plans
from opbench.cli.runs import check_out_folder
from opbench.errors import InputError, Location
from opbench.results.io import RUN_FILE, new_run_dir, point_latest, read_run
from opbench.spec.load import load_suite


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise InputError(
            f"--shard takes K/N, e.g. 2/4; got {text!r}", Location(field="--shard")
        ) from None
    if not (n >= 1 and 1 <= k <= n):
        raise InputError(f"--shard K/N needs 1 <= K <= N; got {text!r}", Location(field="--shard"))
    return (k, n)


def load_run_suite(suite_path: Path, batch: int | None, dtype: str | None, backends: list[str]):
    """The suite to run, and for an ONNX file the model-data maker and the import's record.

    An ONNX file is its own suite: its graph imported (docs/onnx.md), run with its own weights,
    each backend's whole-model output checked against ONNX Runtime's."""
    if suite_path.suffix.lower() != ".onnx":
        if batch is not None or dtype is not None:
            raise InputError(
                "--batch and --dtype are for an ONNX model; a suite sets its own",
                Location(file=str(suite_path)),
            )
        return load_suite(suite_path), None, {}
    from opbench.cli.export import require_onnx

    require_onnx("onnx", "onnxscript", "onnxruntime")
    from opbench.importers.onnx.as_suite import onnx_suite
    from opbench.pipeline.file_data import file_model_data
    from opbench.spec.model import DTYPES

    if dtype is not None and dtype not in DTYPES:
        raise InputError(
            f"--dtype {dtype!r}: one of {', '.join(DTYPES)}", Location(field="--dtype")
        )
    suite, imported = onnx_suite(
        suite_path, batch=batch, dtype=dtype or "float32", backends=backends
    )
    counts = imported.record()
    console.print(
        f"{suite_path.name}: {len(imported.layers)} layers from {imported.node_count} nodes "
        f"({len(counts['absorbed'])} absorbed as views or constants), the file's own weights; "
        f"whole-model outputs checked against {whole_model_check(imported, dtype)}",
        markup=False,
    )
    return suite, file_model_data(imported, str(suite_path)), {"onnx_import": counts}


def whole_model_check(imported, dtype: str | None) -> str:
    """What the whole model's outputs are checked against, and why not ONNX Runtime where it
    cannot be (pipeline/file_data.py decides the same way)."""
    if imported.static_batch and imported.file_batch != imported.batch:
        return (
            f"float64 (ONNX Runtime not run: the file fixes its batch at {imported.file_batch}, "
            f"the run is at batch {imported.batch})"
        )
    if dtype not in (None, "float32"):
        return (
            f"float64 rounded as the {dtype} run rounds (ONNX Runtime's float32 output beside it)"
        )
    return "ONNX Runtime"


@handles_errors
def run_command(
    suite_path: Path = typer.Argument(
        ..., metavar="SUITE", help="Suite YAML file, or an ONNX model (its own suite)."
    ),
    backend: list[str] = typer.Option(
        [],
        "--backend",
        "-b",
        help="Run these backends (repeatable), on every layer, instead of the suite's lists.",
    ),
    model: list[str] = typer.Option([], "--model", "-m", help="Only these models (repeatable)."),
    layer: list[str] = typer.Option([], "--layer", "-l", help="Only these layers (repeatable)."),
    device: str | None = typer.Option(
        None, "--device", help="cuda or cpu; default cuda when a GPU is present."
    ),
    out: Path = typer.Option(
        Path("reports"), "--out", help="Folder that receives <suite>/<timestamp>/run.json."
    ),
    quick: bool = typer.Option(False, "--quick", help="Short timing schedule, for smoke runs."),
    rounds: int | None = typer.Option(
        None, "--rounds", min=1, help="Override the number of timing rounds."
    ),
    shard: str | None = typer.Option(
        None, "--shard", help="Run share K of N (K/N) and write a partial run."
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        min=1,
        help="CPU threads for torch (default on the CPU: OMP_NUM_THREADS, else half the cores).",
    ),
    exclusive_timing: bool = typer.Option(
        False,
        "--exclusive-timing",
        help="Under torchrun: the ranks of a host take turns for the timed loops.",
    ),
    plugin: list[str] = plugin_option(),
    plans: Path | None = typer.Option(
        None,
        "--plans",
        help="Reuse the tuned plans of a plan file or run.json (kept beside a CI baseline).",
    ),
    plans_out: Path | None = typer.Option(
        None, "--plans-out", help="Write this run's tuned plans to FILE."
    ),
    batch: int | None = typer.Option(
        None, "--batch", min=1, help="ONNX model: the batch size (the file's by default)."
    ),
    dtype: str | None = typer.Option(
        None, "--dtype", help="ONNX model: float32 (default), float16 or bfloat16."
    ),
    wide: bool = typer.Option(
        False,
        "--wide",
        help="Every column and whole layer names; one line per result even without a terminal.",
    ),
) -> None:
    """Build every layer with each backend, check it against the reference, and time it."""
    load_plugins(plugin)
    suite, model_data, origin = load_run_suite(suite_path, batch, dtype, backend)
    check_out_folder(out)  # before any GPU work: a bad --out must not cost a run
    shard_kn = parse_shard(shard)
    from opbench.backends.registry import backend_names
    from opbench.ops.registry import suggest
    from opbench.vocabulary import unknown_backend

    for name in backend:
        if name not in backend_names():
            raise InputError(
                unknown_backend(name, backend_names(), suggest(name, backend_names())),
                Location(field="--backend"),
            )
    known_models = {m.name for m in suite.models} | {m.base_name for m in suite.models}
    for name in model:
        if name not in known_models:
            raise InputError(
                f"no model {name!r} in the suite{suggest(name, known_models)}",
                Location(file=str(suite_path), field="--model"),
            )
    known_layers = {la.name for m in suite.models for la in m.layers}
    for name in layer:
        if name not in known_layers:
            raise InputError(
                f"no layer {name!r} in the suite{suggest(name, known_layers)}",
                Location(file=str(suite_path), field="--layer"),
            )
    if device is not None and device != "cpu" and not device.startswith("cuda"):
        raise InputError(
            f"--device must be cuda or cpu, got {device!r}", Location(field="--device")
        )

    from opbench.pipeline import RunOptions, default_device, prepare_device
    from opbench.pipeline.plans import RecordedPlans, read_plans

    recorded = read_plans(plans) if plans is not None else RecordedPlans()

    chosen = device or default_device()
    if chosen.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(
                "--device cuda was asked for, but no GPU is visible", Location(field="--device")
            )
    prepare_device(chosen)
    note = (
        ""
        if device
        else " (default: " + ("a GPU is present)" if chosen.startswith("cuda") else "no GPU found)")
    )
    console.print(f"device: [bold]{chosen}[/]{note}")
    _set_threads(chosen, threads)
    if chosen == "cpu":
        console.print(
            "[dim]on the CPU, Triton kernels run in Triton's interpreter: their times are not performance figures[/]"
        )

    options = RunOptions(
        device=chosen,
        backends=backend,
        models=model,
        layers=layer,
        quick=quick,
        rounds=rounds,
        shard=shard_kn,
        plans=recorded.plans,
        costs=recorded.costs,
        model_data=model_data,
        origin=origin,
    )
    _check_selection(suite, options, suite_path)
    from opbench.distributed import current_world

    world = current_world()
    if world is not None:
        from opbench.cli.run_distributed import run_distributed

        run_distributed(
            suite, options, out, world, exclusive_timing=exclusive_timing, plans_out=plans_out
        )
        return
    if exclusive_timing:
        console.print(
            "[dim]--exclusive-timing has no effect outside torchrun: one process times alone[/]"
        )
    run_with_progress(suite, options, out, plans_out, wide=wide)


def log_progress(result, done: int, planned: int, every: bool) -> None:
    """Progress without a terminal (a CI log): a result that did not end ok, and a count at
    each tenth of the run; with `every` (--wide) one line per result."""
    step = max(1, planned // 10)
    if every or result.outcome != "ok":
        console.print(
            f"  {result.model} · {'+'.join(result.members)} · {result.backend}: {result.outcome}",
            markup=False,
        )
    elif done % step == 0 or done == planned:
        console.print(f"  {done}/{planned} results", markup=False)


def _set_threads(device: str, threads: int | None) -> None:
    """CPU timing with a sane thread count (see default_threads); on a GPU run only if asked."""
    from opbench.distributed import current_world
    from opbench.measure.timer_cpu import default_threads, load_warning

    world = current_world()
    if threads is None and device != "cpu" and world is None:
        return
    import torch

    if threads is None and world is not None and device != "cpu":
        # The GPU ranks of a host share its cores: each gets its share for the CPU-side work
        # (references, weights), so the checks of N ranks neither fight over the same cores
        # nor run on the one thread torchrun's OMP_NUM_THREADS=1 leaves them.
        from opbench.measure.timer_cpu import usable_cores

        threads = max(1, usable_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(threads or default_threads())
    if device == "cpu":
        loaded = load_warning()
        console.print(
            f"[dim]CPU timing with {torch.get_num_threads()} thread(s) (--threads to change)[/]"
            + (f"; [bold yellow]{loaded}[/]: CPU times may be inflated" if loaded else "")
        )


def _check_selection(suite, options, suite_path: Path) -> None:
    """A --model/--layer combination that selects no layer is a mistake, not a run.
    (--backend replaces the suite's backend lists, so it never empties the selection.)"""
    from opbench.pipeline import select_models

    for model in select_models(suite, options):
        for layer in model.layers:
            if not options.layers or layer.name in options.layers:
                return
    raise InputError(
        "the --model/--layer selection matches no layer of the suite",
        Location(file=str(suite_path)),
    )


def run_with_progress(
    suite, options, out: Path, plans_out: Path | None = None, wide: bool = False
) -> None:
    from opbench.measure.env import fingerprint
    from opbench.pipeline import gpu_label, run_suite
    from opbench.plugins import provenance as plugin_provenance
    from opbench.report.run_table import run_table

    try:
        run_dir = new_run_dir(out, suite.name)
    except OSError as exc:
        raise InputError(
            f"cannot create a run folder here: {exc.strerror or exc}",
            Location(file=str(out), field="--out"),
        ) from None
    run_path = run_dir / RUN_FILE
    env = {**fingerprint(options.device), "plugins": plugin_provenance()}
    env["peaks"] = device_peaks(options.device)
    options.gpu_label = gpu_label(options.device)
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal and os.environ.get("OPBENCH_PROGRESS") != "1",
    )
    task = None
    counts = {"planned": 0, "done": 0}

    def on_event(event: str, payload) -> None:
        nonlocal task
        if event == "plan":
            task = progress.add_task("layers × backends", total=payload)
            counts["planned"] = payload
        elif event == "start":
            names = "+".join(layer.name for layer in payload.layers)
            progress.update(task, description=f"{payload.model.name} · {names} · {payload.backend}")
        elif event == "done":
            progress.advance(task)
            counts["done"] += 1
            if not console.is_terminal:
                log_progress(payload, counts["done"], counts["planned"], wide)

    started = time.perf_counter()
    try:
        with progress:
            run = run_suite(suite, options, run_path=run_path, env=env, progress=on_event)
    except KeyboardInterrupt:
        point_latest(run_dir)
        partial = read_run(run_path)
        console.print(run_table(partial))
        console.print(
            f"[bold yellow]interrupted[/]: kept {len(partial.layers)} of {partial.planned} results, "
            f"marked incomplete in {run_path}"
        )
        raise typer.Exit(130) from None
    point_latest(run_dir)
    report_plans(run, bool(options.plans), plans_out)
    finish(run, run_path, wall_s=time.perf_counter() - started, wide=wide)
