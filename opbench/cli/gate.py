"""The regression gate inside `opbench compare`: baseline, --confirm re-run, CI outputs.

compare.py reads the run (and the reference); this module adds what concerns the baseline,
in the order the command runs it:

    read     prepare_gate: parse --threshold, read BASE, pick where --update-baseline writes
             (bad input raises before anything is written: exit 2)
    judge    gate_confirm.judge: gate(); with --confirm, re-time the inconclusive layers
    show     gate_outputs.print_gate: the verdict table, environment differences, notes
    CI       gate_outputs: write_junit_file, summaries, annotation_lines
    refresh  write_updated_baseline

Every part returns an exit code; `combine_exit_codes` keeps the most important one:
2 (bad input) > 3 (crash) > 4 (baseline missing or incomparable) > 1 (regression or missed
target) > 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from opbench.cli.console import console
from opbench.cli.gate_confirm import judge
from opbench.cli.gate_outputs import (
    annotation_lines,
    append_summaries,
    print_gate,
    summaries,
    write_junit_file,
)
from opbench.compare.baseline import (
    Baseline,
    BaselineError,
    load_baseline,
    update_baseline_file,
)
from opbench.compare.gate import GateOptions, GateReport, parse_threshold
from opbench.errors import ExitCode, InputError, Location, OpbenchError
from opbench.results.io import RUN_FILE
from opbench.results.model import RunResult, crashed_results

PRECEDENCE = (
    ExitCode.BAD_INPUT,
    ExitCode.LAYER_ERROR,
    ExitCode.BASELINE,
    ExitCode.FAILED_GATE,
    ExitCode.OK,
)
BASELINES_DIR = Path("baselines")


def combine_exit_codes(*codes: int) -> int:
    """The one exit code of several checks: 2 > 3 > 4 > 1 > 0."""
    for code in PRECEDENCE:
        if code in codes:
            return code
    return ExitCode.OK


@dataclass(frozen=True)
class GateRequest:
    """The gate's options of `opbench compare`, as given."""

    baseline: Path | None = None
    threshold: str | None = None
    confirm: bool = False
    junit: Path | None = None
    bmf: Path | None = None
    update_baseline: bool = False
    baseline_out: Path | None = None
    allow_env_change: bool = False


@dataclass
class GateInputs:
    """Everything read for the gate before anything is written.

    baseline: what BASE holds; None without --baseline or when it cannot be used.
    problem: why BASE cannot be used (missing, unsupported schema): exit 4 unless updating.
    destination: where --update-baseline writes (None: not asked).
    """

    options: GateOptions
    baseline: Baseline | None = None
    problem: BaselineError | None = None
    destination: Path | None = None
    notes: list[str] = field(default_factory=list)


def prepare_gate(request: GateRequest, run: RunResult) -> GateInputs:
    """Parse and read; raises InputError (exit 2) for bad input, writes nothing."""
    threshold = None
    if request.threshold is not None:
        try:
            threshold = parse_threshold(request.threshold)
        except InputError as exc:
            raise InputError(exc.message, Location(field="--threshold")) from None
    inputs = GateInputs(GateOptions(threshold=threshold, allow_env_change=request.allow_env_change))
    if request.baseline is not None:
        try:
            inputs.baseline = load_baseline(request.baseline)
        except BaselineError as exc:
            inputs.problem = exc
    if request.update_baseline or request.baseline_out is not None:
        inputs.destination = _destination(request, run, inputs.baseline)
    return inputs


def _is_run_file(path: Path, loaded: Baseline | None) -> bool:
    if path.is_dir() or path.name == RUN_FILE:
        return True
    return loaded is not None and loaded.source == "run"


def _destination(request: GateRequest, run: RunResult, loaded: Baseline | None) -> Path:
    """--baseline-out, else BASE when it is a baseline file (or not there yet), else
    baselines/<suite>.json: a run given as BASE is never overwritten."""
    if request.baseline_out is not None:
        path = request.baseline_out
        existing = None
        if path.is_file():
            try:
                existing = load_baseline(path)
            except OpbenchError:
                existing = None
        if _is_run_file(path, existing):
            raise InputError(
                "--baseline-out names a run; a baseline file is a separate .json",
                Location(file=str(path), field="--baseline-out"),
            )
        return path
    if request.baseline is not None and not _is_run_file(request.baseline, loaded):
        return request.baseline
    return BASELINES_DIR / f"{run.suite}.json"


def gate_exit_code(report: GateReport | None, inputs: GateInputs, run: RunResult) -> int:
    """The gate's part of the exit code. With --update-baseline, exit 1 and 4 are waived:
    this run becomes the baseline. Without a report, crashes still count (exit 3)."""
    if report is not None:
        code = report.exit_code
    elif inputs.problem is not None and inputs.destination is None:
        code = ExitCode.BASELINE
    else:
        code = ExitCode.LAYER_ERROR if crashed_results(run) else ExitCode.OK
    if inputs.destination is not None and code in (ExitCode.FAILED_GATE, ExitCode.BASELINE):
        return ExitCode.OK
    return code


def write_updated_baseline(inputs: GateInputs, run: RunResult) -> Baseline | None:
    """--update-baseline: merge with the file there when compatible, write, say where."""
    if inputs.destination is None:
        return None
    written = update_baseline_file(inputs.destination, run)
    left_out = len(crashed_results(run))
    extra = f"; {left_out} crashed or incorrect result(s) left out" if left_out else ""
    console.print(
        f"baseline written: {inputs.destination} ({len(written.entries)} entries{extra})",
        markup=False,
        style="bold",
    )
    return written


# ----------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------


def compare_and_gate(request, gate_request: GateRequest) -> int:
    """`opbench compare` from its parsed options (a CompareRequest and a GateRequest): read
    everything, then compare and gate, print, write the outputs; return the exit code."""
    from opbench.cli.compare import (
        announce_target,
        load_and_compare,
        resolve_run_path,
        run_folder,
        show_comparison,
        target_exit_code,
    )
    from opbench.cli.console import err_console
    from opbench.results.io import read_run

    gating = gate_request.baseline is not None or gate_request.update_baseline
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
    # Everything is read: from here on, outputs.

    codes: dict[str, int] = {}
    if comparison is not None:
        show_comparison(comparison, request.out or folder)
        announce_target(comparison, request.gate)
        codes["target"] = target_exit_code(comparison, run, request.gate)
    report = None
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
        if inputs.baseline is not None:
            report = judge(
                inputs.baseline,
                inputs.options,
                run,
                model=request.model,
                confirm_layers=gate_request.confirm,
            )
            print_gate(report, waived=inputs.destination is not None)
        codes["regression gate"] = gate_exit_code(report, inputs, run)

    if gate_request.junit is not None:
        write_junit_file(gate_request.junit, run, report, inputs, comparison)
        console.print(f"JUnit: {gate_request.junit}", markup=False)
    if gate_request.bmf is not None:
        from opbench.report.bmf import write_bmf

        data = write_bmf(gate_request.bmf, run)
        console.print(f"BMF: {gate_request.bmf} ({len(data)} benchmarks)", markup=False)
    written = write_updated_baseline(inputs, run) if inputs is not None else None
    parts = summaries(run, report, inputs, comparison, written)
    if append_summaries(parts) is not None:
        console.print("step summary appended to $GITHUB_STEP_SUMMARY", markup=False)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in annotation_lines(report, inputs, comparison, run):
            print(line, flush=True)  # one physical line each: never through rich's wrapping

    code = combine_exit_codes(*codes.values())
    if len(codes) > 1:
        parts = ", ".join(f"{name} {value}" for name, value in codes.items())
        console.print(f"exit {code} ({parts}; precedence 2 > 3 > 4 > 1 > 0)", markup=False)
    return code
