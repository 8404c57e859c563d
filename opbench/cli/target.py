"""The speed-up target part of `opbench compare` (and `opbench report`): read the run, the
reference and the map; compare; write the reports; print; give the target gate's exit code.

Reports are written before anything is printed, so a closed stdout (`| head -1`) loses no
file; the exit code comes from the verdicts printed (opbench/compare/outcome.py).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from opbench.cli.console import console, err_console
from opbench.cli.runs import resolve_run_path, run_folder
from opbench.compare.completeness import incomplete_reason
from opbench.compare.model import Comparison
from opbench.compare.outcome import TargetOutcome, target_outcome
from opbench.errors import ExitCode
from opbench.results.io import read_run
from opbench.results.model import RunResult, crashed_results

# --wide, for the command being run: every column, whatever the width (a display preference,
# read where the table is printed).
FULL_TABLES: ContextVar[bool] = ContextVar("full_tables", default=False)


@dataclass(frozen=True)
class CompareRequest:
    """Everything `compare` was asked about the reference, parsed."""

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
    partial: bool = False


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
    profile = _with_sidecar(profile, request.reference, run, request.backend)
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
        partial=request.partial,
        run_label=str(run_folder(run_path)),
        detected=request.format.strip().lower() == "auto",
    )
    return comparison, run, run_folder(run_path)


def _with_sidecar(profile, reference: Path, run: RunResult, backend: str | None):
    """The profile's notes, with a warning for each way the reference ran unlike the run (from
    the .meta.json `opbench reference` writes beside it)."""
    from dataclasses import replace

    from opbench.reference.sidecar import read_sidecar, sidecar_warnings

    meta = read_sidecar(reference)
    if meta is None:
        return profile
    return replace(profile, notes=(*profile.notes, *sidecar_warnings(meta, run, backend)))


def comparison_outcome(
    comparison: Comparison, run: RunResult | None, gate: bool = True
) -> TargetOutcome:
    """The target gate's code: from the verdicts, the gated backend's crashed results, and
    whether the run is complete."""
    if run is None:
        return target_outcome(comparison, (), gate)
    crashed = crashed_results(run, comparison.backend)
    return target_outcome(comparison, crashed, gate, incomplete_reason(run))


def write_comparison(
    comparison: Comparison, out_dir: Path, *, with_json: bool = True
) -> list[Path]:
    from opbench.report.files import write_reports

    return write_reports(comparison, out_dir, with_json=with_json)


def show_comparison(comparison: Comparison, written: list[Path], out_dir: Path) -> None:
    """Print the reference, the tables and where the reports went (already written)."""
    from opbench.report.table import print_comparison

    ref = comparison.reference
    how = "detected" if ref.detected else "given"
    console.print(
        f"reference: {ref.source} · format [bold]{ref.format}[/] ({how}) · engine {ref.engine} · {ref.layers} rows",
        markup=True,
        highlight=False,
    )
    print_comparison(console, comparison, full=FULL_TABLES.get())
    console.print(
        f"reports: {out_dir}/ ({', '.join(p.name for p in written)})", highlight=False, markup=False
    )


def announce_outcome(outcome: TargetOutcome, gate: bool = True) -> None:
    style = "bold red" if outcome.code != ExitCode.OK else "yellow"
    for line in outcome.lines:
        err_console.print(line, style=style, markup=False)


def finish(comparison: Comparison, out_dir: Path, *, gate: bool, with_json: bool = True) -> int:
    """`opbench report`: write every report file, print, and return the verdicts' exit code."""
    written = write_comparison(comparison, out_dir, with_json=with_json)
    show_comparison(comparison, written, out_dir)
    outcome = comparison_outcome(comparison, None, gate)
    announce_outcome(outcome, gate)
    return outcome.code
