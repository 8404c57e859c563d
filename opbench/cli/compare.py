"""`opbench compare [RUN]`: a run against another engine's timings (--reference, the speed-up
target) and/or against a baseline (--baseline, the CI regression gate), in one command.

Reads everything first (run, reference, map, baseline), then compares, prints, and writes
every output at once: bad input stops before anything is written (exit 2). Two gates, each
giving an exit code, combined by `combine_exit_codes` (2 > 3 > 4 > 1 > 0):

    target      exit 1 when a row of the gated backend FAILs its target (unless --no-gate);
                exit 3 when a layer of that backend crashed or failed correctness
    regression  opbench/cli/gate.py: exit 1 regression, 3 crash, 4 baseline missing or taken
                on another environment (docs/ci.md)
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import typer

from opbench.cli.console import console, err_console, handles_errors
from opbench.cli.plugins import load_plugins, plugin_option
from opbench.compare.model import Comparison, Verdict
from opbench.errors import ExitCode, InputError
from opbench.results.io import find_latest_run, read_run
from opbench.results.model import RunResult

REPORTS_ROOT = Path("reports")
# --wide, for the command being run: every column, whatever the width (a display preference,
# read where the table is printed).
FULL_TABLES: ContextVar[bool] = ContextVar("full_tables", default=False)
FORMATS_HELP = "auto|sas|sas-prefix|onnxruntime|tensorrt|openvino|torch-profiler"


def resolve_run_path(run: Path | None) -> Path:
    """RUN as given (a run folder or its run.json), else the newest run under reports/."""
    if run is not None:
        return run
    latest = find_latest_run(REPORTS_ROOT)
    if latest is None:
        raise InputError(
            f"no run found under {REPORTS_ROOT}/: run `opbench run SUITE` first, or name a run folder"
        )
    return latest


def run_folder(run: Path) -> Path:
    """The folder of a run; `<suite>/latest` is followed to the run it names."""
    folder = run if run.is_dir() else run.parent
    if folder.is_symlink():
        folder = folder.parent / os.readlink(folder)
    return folder


@dataclass(frozen=True)
class CompareRequest:
    """Everything `compare` was asked, parsed."""

    run: Path | None
    reference: Path | None
    format: str = "auto"
    time_column: str | None = None
    unit: str | None = None
    skip_runs: int | None = None
    map_path: Path | None = None
    backend: str = "triton"
    target: float | None = None
    model: str | None = None
    out: Path | None = None
    gate: bool = True
    allow_missing: bool = False
    allow_cpu_times: bool = False


def load_and_compare(request: CompareRequest) -> tuple[Comparison, RunResult, Path]:
    """Read run, reference and map; compare. Raises InputError on bad input; writes nothing."""
    from opbench.compare.compare import compare_run
    from opbench.match.namemap import read_name_map
    from opbench.reference.interface import ReaderOptions
    from opbench.reference.registry import read_reference

    run_path = resolve_run_path(request.run)
    run = read_run(run_path)
    given = {
        "time_column": request.time_column,
        "unit": request.unit,
        "skip_runs": request.skip_runs,
    }
    options = ReaderOptions(**{key: value for key, value in given.items() if value is not None})
    profile = read_reference(request.reference, request.format, options)
    name_map = read_name_map(request.map_path) if request.map_path else None
    comparison = compare_run(
        run,
        profile,
        backend=request.backend,
        target=request.target,
        model=request.model,
        name_map=name_map,
        allow_missing=request.allow_missing,
        allow_cpu_times=request.allow_cpu_times,
        run_label=str(run_folder(run_path)),
        detected=request.format.strip().lower() == "auto",
    )
    return comparison, run, run_folder(run_path)


def speedup_gate(comparison: Comparison) -> list[str]:
    """Every row of the gated backend that FAILs its target (NOT-MEASURED, MISSING and
    UNCERTAIN rows never do: they are no measured miss)."""
    return [
        f"{row.model}/{row.label}: {row.primary.reason or 'below target'}"
        for row in comparison.rows
        if row.primary.verdict == Verdict.FAIL
    ]


def gate_exit_code(comparison: Comparison, gate: bool = True) -> int:
    """The target gate's exit 1 (--no-gate turns it off)."""
    if speedup_gate(comparison) and gate:
        return ExitCode.FAILED_GATE
    return ExitCode.OK


def target_exit_code(comparison: Comparison, run: RunResult, gate: bool = True) -> int:
    """Exit 3 when a compared layer of the gated backend crashed or failed correctness, whatever
    --no-gate says; else the target gate's code."""
    from opbench.results.model import crashed_results

    models = {row.model for row in comparison.rows}
    crashed = [r for r in crashed_results(run, comparison.backend) if r.model in models]
    if crashed:
        names = ", ".join(f"{r.model}/{'+'.join(r.members)}" for r in crashed[:5])
        err_console.print(
            f"{len(crashed)} {comparison.backend} result(s) crashed or failed correctness: {names}",
            style="bold red",
            markup=False,
        )
        return ExitCode.LAYER_ERROR
    return gate_exit_code(comparison, gate)


def announce_reference(comparison: Comparison) -> None:
    ref = comparison.reference
    how = "detected" if ref.detected else "given"
    console.print(
        f"reference: {ref.source} · format [bold]{ref.format}[/] ({how}) · engine {ref.engine} · {ref.layers} rows",
        markup=True,
        highlight=False,
    )


@handles_errors
def compare_command(
    run: Path | None = typer.Argument(
        None, metavar="[RUN]", help="Run folder or run.json (default: the latest run)."
    ),
    reference: Path | None = typer.Option(
        None,
        "--reference",
        "-r",
        help="Reference timing file from another engine (the speed-up target).",
    ),
    format: str = typer.Option("auto", "--format", help=f"Reference format: {FORMATS_HELP}."),
    time_column: str | None = typer.Option(
        None, "--time-column", help="Column or statistic holding the time."
    ),
    unit: str | None = typer.Option(
        None, "--unit", help="Unit of the times where the file does not say (s|ms|us|ns)."
    ),
    skip_runs: int | None = typer.Option(
        None,
        "--skip-runs",
        min=0,
        help="Leading whole-model runs to drop as warm-up (reader default: 1).",
    ),
    map_path: Path | None = typer.Option(
        None, "--map", help="YAML: reference name -> suite layer (or list, or model/layer)."
    ),
    backend: str = typer.Option(
        "triton", "--backend", help="The backend the verdicts and the gate are about."
    ),
    target: float | None = typer.Option(
        None, "--target", help="Speedup every layer must reach (default: the suite's)."
    ),
    model: str | None = typer.Option(None, "--model", help="Compare this model of the run only."),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for the reports (default: the run's folder)."
    ),
    no_gate: bool = typer.Option(
        False,
        "--no-gate",
        help="No exit 1 for a missed target (the regression gate still applies).",
    ),
    allow_missing: bool = typer.Option(
        False,
        "--allow-missing",
        help="A model may PASS although some of its timed layers have no reference row.",
    ),
    allow_cpu_times: bool = typer.Option(
        False,
        "--allow-cpu-times",
        help="Judge CPU-timed results against a GPU engine's times (else NOT-MEASURED).",
    ),
    wide: bool = typer.Option(
        False, "--wide", help="Print every column of the tables, whatever the terminal width."
    ),
    baseline: Path | None = typer.Option(
        None,
        "--baseline",
        help="Regression gate: a baseline file, or a previous run (run.json or its folder).",
    ),
    threshold: str | None = typer.Option(
        None,
        "--threshold",
        help="Slowdown the gate tolerates, '5%' or '0.05' (default 5%; a layer's own "
        "regression_threshold wins).",
    ),
    confirm: bool = typer.Option(
        False,
        "--confirm",
        help="Time inconclusive layers again (twice the rounds, same device) and decide again.",
    ),
    junit: Path | None = typer.Option(
        None, "--junit", help="Write a JUnit XML file: one test case per layer and backend."
    ),
    bmf: Path | None = typer.Option(
        None, "--bmf", help="Write the run's timings in Bencher Metric Format (JSON)."
    ),
    update_baseline: bool = typer.Option(
        False,
        "--update-baseline",
        help="Write this run as the baseline: to --baseline-out, else BASE (when it is a "
        "baseline file), else baselines/<suite>.json.",
    ),
    baseline_out: Path | None = typer.Option(
        None, "--baseline-out", help="Where --update-baseline writes (implies it)."
    ),
    allow_env_change: bool = typer.Option(
        False,
        "--allow-env-change",
        help="Gate even when GPU, driver, torch, triton or kernel code differ from the baseline.",
    ),
    plugin: list[str] = plugin_option(),
) -> None:
    """Compare a run with another engine's timings and/or gate it against a baseline."""
    from opbench.cli.gate import GateRequest, compare_and_gate

    load_plugins(plugin)
    request = CompareRequest(
        run=run,
        reference=reference,
        format=format,
        time_column=time_column,
        unit=unit,
        skip_runs=skip_runs,
        map_path=map_path,
        backend=backend,
        target=target,
        model=model,
        out=out,
        gate=not no_gate,
        allow_missing=allow_missing,
        allow_cpu_times=allow_cpu_times,
    )
    FULL_TABLES.set(wide)
    gate_request = GateRequest(
        baseline=baseline,
        threshold=threshold,
        confirm=confirm,
        junit=junit,
        bmf=bmf,
        update_baseline=update_baseline or baseline_out is not None,
        baseline_out=baseline_out,
        allow_env_change=allow_env_change,
    )
    code = compare_and_gate(request, gate_request)
    if code != ExitCode.OK:
        raise typer.Exit(code)


def show_comparison(comparison: Comparison, out_dir: Path, *, with_json: bool = True) -> None:
    """Print the comparison and write every report file."""
    from opbench.report.files import write_reports
    from opbench.report.table import print_comparison

    announce_reference(comparison)
    print_comparison(console, comparison, full=FULL_TABLES.get())
    written = write_reports(comparison, out_dir, with_json=with_json)
    console.print(
        f"reports: {out_dir}/ ({', '.join(p.name for p in written)})", highlight=False, markup=False
    )


def announce_target(comparison: Comparison, gate: bool) -> None:
    failures = speedup_gate(comparison)
    if failures:
        label = "gate failed" if gate else "below target (not gated)"
        err_console.print(
            f"{label}: {len(failures)} layer(s) FAIL", style="bold red" if gate else "yellow"
        )


def finish(comparison: Comparison, out_dir: Path, *, gate: bool, with_json: bool = True) -> None:
    """Print, write every report file, and exit with the target gate's code (`opbench report`)."""
    show_comparison(comparison, out_dir, with_json=with_json)
    code = gate_exit_code(comparison, gate)
    announce_target(comparison, gate)
    if code != ExitCode.OK:
        raise typer.Exit(code)
