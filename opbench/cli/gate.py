"""The regression gate's inputs inside `opbench compare`: its options, the baseline, where
--update-baseline writes, and the gate's part of the exit code. `opbench compare`
(cli/compare.py) runs the gate in this order:

    read     prepare_gate: parse --threshold, read BASE, pick where --update-baseline writes
             (bad input raises before anything is written: exit 2)
    judge    gate_confirm.judge: gate(); with --confirm, re-time the inconclusive layers
    CI       gate_outputs: write_junit_file, summaries, annotation_lines
    refresh  write_updated_baseline
    show     gate_outputs.print_gate: the verdict table, environment differences, notes

Every part returns an exit code; `combine_exit_codes` keeps the most important one:
2 (bad input) > 3 (crash) > 4 (baseline missing or incomparable) > 1 (regression or missed
target) > 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from opbench.compare.baseline import (
    Baseline,
    BaselineError,
    load_baseline,
    update_baseline_file,
)
from opbench.compare.completeness import incomplete_reason
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
    #: Gate only these backends (`--backend` given); None: every backend on either side.
    backends: tuple[str, ...] | None = None


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
    if request.backends is not None and not set(request.backends) & set(run.backends):
        raise InputError(
            f"no result of backend {', '.join(request.backends)} in this run to gate "
            f"(backends: {', '.join(run.backends) or 'none'})",
            Location(field="--backend"),
        )
    options = GateOptions(
        threshold=threshold, allow_env_change=request.allow_env_change, backends=request.backends
    )
    inputs = GateInputs(options)
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
    this run becomes the baseline. Without a report, crashes and an incomplete run still
    count (exit 3)."""
    if report is not None:
        code = report.exit_code
    elif crashed_results(run) or incomplete_reason(run):
        code = ExitCode.LAYER_ERROR
    elif inputs.problem is not None and inputs.destination is None:
        code = ExitCode.BASELINE
    else:
        code = ExitCode.OK
    if inputs.destination is not None and code in (ExitCode.FAILED_GATE, ExitCode.BASELINE):
        return ExitCode.OK
    return code


def write_updated_baseline(inputs: GateInputs, run: RunResult) -> Baseline | None:
    """--update-baseline: merge with the file there when compatible, and write it."""
    if inputs.destination is None:
        return None
    return update_baseline_file(inputs.destination, run)


def baseline_written_line(inputs: GateInputs, run: RunResult, written: Baseline) -> str:
    left_out = len(crashed_results(run))
    extra = f"; {left_out} crashed or incorrect result(s) left out" if left_out else ""
    return f"baseline written: {inputs.destination} ({len(written.entries)} entries{extra})"
