"""What `opbench run` shows and checks once results exist: the tables, timing warnings, the
plans that were not reused, and exit 3 for a result that errored or failed correctness. Shared
by a single-process run (cli/run.py) and a torchrun run (cli/run_distributed.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from opbench.cli.console import console
from opbench.errors import ExitCode
from opbench.results.model import Status


def device_peaks(device: str) -> dict | None:
    """The GPU's measured ceilings for the roofline (about a second); None on the CPU."""
    if not device.startswith("cuda"):
        return None
    from opbench.measure.peaks import measure_peaks

    try:
        return measure_peaks(device)
    except Exception as exc:  # an OOM here must not stop the run: the roofline goes without
        console.print(f"[dim]device peaks not measured: {type(exc).__name__}: {exc}[/]")
        return None


def time_split(run, wall_s: float | None = None) -> str | None:
    """Where the wall time went: building, tuning, checking and timing, summed over results."""
    from opbench.results.stats import median

    phases = [r.phases_s for r in run.layers if r.phases_s]
    if not phases:
        return None
    totals = {k: sum(p.get(k, 0.0) for p in phases) for k in ("build", "tune", "check", "time")}
    parts = [f"{k} {v:.1f} s" for k, v in totals.items()]
    # Name who tuned: a torch peer that picks eager or torch.compile at build (torch-int8,
    # torch-fp8) counts here too, and is not a Triton plan the shipped table lacks.
    by_backend: dict[str, float] = {}
    for r in run.layers:
        if r.phases_s and r.phases_s.get("tune", 0.0) > 0.0:
            by_backend[r.backend] = by_backend.get(r.backend, 0.0) + r.phases_s["tune"]
    named = [f"{b} {s:.1f} s" for b, s in sorted(by_backend.items()) if s >= 0.05]
    if named:
        parts[1] += f" ({', '.join(named)})"
    text = "time split: " + " · ".join(parts)
    if wall_s is not None:
        other = wall_s - sum(totals.values())
        text += (
            f" · other (data, end to end, writing) {max(other, 0.0):.1f} s of {wall_s:.1f} s wall"
        )
    per_result = median([sum(p.values()) for p in phases])
    return text + f"; {len(phases)} results, median {per_result:.2f} s per result"


def timing_warnings(run) -> list[tuple[str, str]]:
    """(result, note) of the results whose timer said their samples look pre-empted or the
    machine was loaded."""
    from opbench.measure.stopping import WARNING_MARKERS

    return [
        (f"{r.model}/{'+'.join(r.members)}/{r.backend}", r.note)
        for r in run.layers
        if r.note and any(marker in r.note for marker in WARNING_MARKERS)
    ]


def report_plans(run, reused: bool, plans_out: Path | None) -> None:
    """Say which handed-in plans did not fit (tuned again), and write --plans-out."""
    if reused:
        for result in run.layers:
            for choice in (result.plan or {}).get("choices", []):
                if choice.get("source") == "retuned":
                    console.print(
                        f"[yellow]plan not reused[/] for {escape(result.model)}/"
                        f"{escape(result.layer)}/{result.backend} ({choice['kernel']}): "
                        f"{escape(choice.get('note', ''))}; tuned again"
                    )
    if plans_out is not None:
        from opbench.pipeline.plans import write_plans

        count = write_plans(run.layers, plans_out)
        console.print(f"{count} plan(s) written to [bold]{escape(str(plans_out))}[/]")


# Without a terminal (a CI log, a pipe), a run of more results than this prints a summary
# instead of one line per result; --wide prints every line and column.
SUMMARY_OVER = 40


def print_wide(table, wide: bool) -> None:
    """The table; with `wide`, at its natural width even where that is wider than the terminal
    (rich never prints wider than its console, so the console widens for it)."""
    width = console.width
    if wide:
        console.width = max(width, table.natural_width())
    try:
        console.print(table)
    finally:
        console.width = width


def _name_whole_models(runs: list, what: str) -> None:
    if runs:
        names = escape(", ".join(f"{e.model}/{e.backend}/{e.mode}" for e in runs[:5]))
        console.print(f"[bold red]{len(runs)} whole-model run(s) {what}:[/] {names}")


def finish(run, run_path: Path, wall_s: float | None = None, wide: bool = False) -> None:
    """Print the tables and exit 3 when a layer errored or failed correctness, or a whole
    model's output failed its check."""
    from opbench.report.grouped import group_notes
    from opbench.report.run_table import end_to_end_table, failures, run_summary, run_table

    if not wide and not console.is_terminal and len(run.layers) > SUMMARY_OVER:
        for line in run_summary(run):
            console.print(line, markup=False)
        console.print(
            f"({len(run.layers)} results: `opbench run … --wide` prints one line each)",
            markup=False,
        )
    else:
        print_wide(run_table(run, full=wide, wide=wide), wide)
    e2e = end_to_end_table(run)
    if e2e is not None:
        console.print(e2e)
    warned = timing_warnings(run)
    if warned:
        console.print(
            f"[bold yellow]{len(warned)} timing(s) may be inflated[/] (pre-empted or loaded):"
        )
        for line in group_notes(warned):
            console.print(f"  {escape(line)}")
    split = time_split(run, wall_s)
    if split:
        console.print(f"[dim]{split}[/]")
    console.print(f"run written to [bold]{run_path}[/]")
    bad = failures(run)
    if bad:
        names = escape(", ".join(f"{r.model}/{'+'.join(r.members)}/{r.backend}" for r in bad[:5]))
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        console.print(
            f"[bold red]{len(bad)} layer result(s) errored or failed correctness:[/] {names}{more}"
        )
    wrong = [e for e in run.end_to_end if e.correctness is not None and not e.correctness.passed]
    _name_whole_models(wrong, "failed their output check")
    # An errored whole-model run (its forward, or the reference it is checked against: ONNX
    # Runtime refusing the file) checked nothing, so the run cannot exit 0 on it.
    errored = [e for e in run.end_to_end if e.status == Status.ERROR]
    _name_whole_models(errored, "errored, their output unchecked")
    if bad or wrong or errored:
        raise typer.Exit(ExitCode.LAYER_ERROR)
