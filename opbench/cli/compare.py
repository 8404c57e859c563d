"""`opbench compare [RUN]`: a run against another engine's timings (--reference, the speed-up
target) and/or against a baseline (--baseline, the CI regression gate), in one command.

Reads everything first (run, reference, map, baseline), then judges, writes every file, and
only then prints: bad input stops before anything is written (exit 2), and a closed stdout
(`| head -1`) loses no file and changes no exit code. Two gates, each giving an exit code,
combined by `combine_exit_codes` (2 > 3 > 4 > 1 > 0):

    target      cli/target.py: exit 1 when a row or a model of the gated backend FAILs its
                target (unless --no-gate); exit 3 when one is ERROR or failed correctness
    regression  cli/gate.py: exit 1 regression, 3 crash, 4 baseline missing or taken on
                another environment or another way of timing (docs/ci.md)
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from opbench.cli.console import console, err_console, handles_errors, write_line
from opbench.cli.gate import (
    GateRequest,
    baseline_written_line,
    combine_exit_codes,
    gate_exit_code,
    prepare_gate,
    write_updated_baseline,
)
from opbench.cli.plugins import load_plugins, plugin_option
from opbench.cli.runs import check_out_folder, judged_run_line, resolve_run_path, run_folder
from opbench.cli.target import (
    FULL_TABLES,
    CompareRequest,
    announce_outcome,
    comparison_outcome,
    load_and_compare,
    show_comparison,
    write_comparison,
)
from opbench.compare.completeness import incomplete_reason
from opbench.errors import ExitCode, InputError
from opbench.results.io import read_run

FORMATS_HELP = "auto|sas|sas-prefix|onnxruntime|tensorrt|openvino|torch-profiler"


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
    backend: str | None = typer.Option(
        None,
        "--backend",
        help="The backend the speed-up verdicts (--reference) are about (default: triton). "
        "With --baseline it also limits the gate to this backend; without --backend the gate "
        "judges every backend of the run and the baseline, torch included.",
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
    partial: bool = typer.Option(
        False,
        "--partial",
        help="The suite times part of the profiled model: reference rows that match no layer "
        "are expected (else most rows matching nothing is another model's profile, exit 2).",
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
        help="Gate even when the environment (GPU, driver, torch, triton, kernel code, CPU "
        "threads) or how the layers were timed (timer, fixed rounds or stopping rule) differs "
        "from the baseline's.",
    ),
    plugin: list[str] = plugin_option(),
) -> None:
    """Compare a run with another engine's timings and/or gate it against a baseline."""
    load_plugins(plugin)
    request = CompareRequest(
        run=run,
        reference=reference,
        format=format,
        time_column=time_column,
        unit=unit,
        skip_runs=skip_runs,
        map_path=map_path,
        backend=backend or "triton",
        target=target,
        model=model,
        out=out,
        gate=not no_gate,
        allow_missing=allow_missing,
        allow_cpu_times=allow_cpu_times,
        partial=partial,
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
        backends=(backend,) if backend else None,
    )
    code = compare_and_gate(request, gate_request)
    if code != ExitCode.OK:
        raise typer.Exit(code)


def compare_and_gate(request: CompareRequest, gate_request: GateRequest) -> int:
    """`opbench compare` from its parsed options: read everything, judge, write every file,
    then print; return the exit code."""
    from opbench.cli.gate_confirm import judge
    from opbench.cli.gate_outputs import (
        annotation_lines,
        append_summaries,
        print_gate,
        summaries,
        write_junit_file,
    )

    gating = gate_request.baseline is not None or gate_request.update_baseline
    if request.out is not None:
        check_out_folder(request.out)
    if request.reference is None and not gating:
        raise InputError(
            "nothing to compare: give --reference FILE (speed-up target), --baseline BASE "
            "(regression gate) or --update-baseline"
        )
    if request.reference is not None:
        comparison, run, folder = load_and_compare(request)
    else:
        comparison, run_path = None, resolve_run_path(request.run)
        run, folder = read_run(run_path), run_folder(run_path)
    inputs = prepare_gate(gate_request, run) if gating else None
    if inputs is None and gate_request.threshold is not None:
        prepare_gate(gate_request, run)  # a bad --threshold is bad input even when unused
    # Everything is read. Judge; then write every file; only then print.

    codes: dict[str, int] = {}
    outcome = None
    if comparison is not None:
        outcome = comparison_outcome(comparison, run, request.gate)
        codes["target"] = outcome.code
    report = None
    if inputs is not None and inputs.baseline is not None:
        report = judge(
            inputs.baseline,
            inputs.options,
            run,
            model=request.model,
            confirm_layers=gate_request.confirm,
        )
    if inputs is not None:
        codes["regression gate"] = gate_exit_code(report, inputs, run)

    out_dir = request.out or folder
    written = write_comparison(comparison, out_dir) if comparison is not None else []
    if gate_request.junit is not None:
        write_junit_file(gate_request.junit, run, report, inputs, comparison)
    bmf_count = None
    if gate_request.bmf is not None:
        from opbench.report.bmf import write_bmf

        bmf_count = len(write_bmf(gate_request.bmf, run))
    new_baseline = write_updated_baseline(inputs, run) if inputs is not None else None
    summary_path = append_summaries(summaries(run, report, inputs, comparison, new_baseline))

    console.print(
        judged_run_line(run, folder, request.run), markup=False, highlight=False, soft_wrap=True
    )
    if comparison is not None and outcome is not None:
        show_comparison(comparison, written, out_dir)
        announce_outcome(outcome, request.gate)
    if gate_request.confirm and gate_request.baseline is None:
        err_console.print("warning: --confirm needs --baseline; ignored", style="yellow")
    if inputs is not None:
        if inputs.problem is not None and inputs.destination is None:
            err_console.print("error: ", style="bold red", end="")
            err_console.print(str(inputs.problem), markup=False, soft_wrap=True)
        elif inputs.problem is not None:
            console.print(
                f"no usable baseline ({inputs.problem}): not gated; --update-baseline writes one",
                style="yellow",
                markup=False,
            )
        if report is not None:
            print_gate(report, waived=inputs.destination is not None)
        elif comparison is None and incomplete_reason(run):
            err_console.print(f"error: {incomplete_reason(run)}", style="bold red", markup=False)
    if gate_request.junit is not None:
        console.print(f"JUnit: {gate_request.junit}", markup=False)
    if bmf_count is not None:
        console.print(f"BMF: {gate_request.bmf} ({bmf_count} benchmarks)", markup=False)
    if new_baseline is not None and inputs is not None:
        console.print(baseline_written_line(inputs, run, new_baseline), markup=False, style="bold")
    if summary_path is not None:
        console.print("step summary appended to $GITHUB_STEP_SUMMARY", markup=False)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in annotation_lines(report, inputs, comparison, run):
            write_line(line)  # one physical line each: never through rich's wrapping

    code = combine_exit_codes(*codes.values())
    if len(codes) > 1:
        parts = ", ".join(f"{name} {value}" for name, value in codes.items())
        console.print(f"exit {code} ({parts}; precedence 2 > 3 > 4 > 1 > 0)", markup=False)
    return code
