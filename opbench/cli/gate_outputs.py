"""What the regression gate shows and writes: the verdict table in the terminal, JUnit XML,
the GitHub step summary and annotation lines. Everything here renders what was decided
elsewhere (opbench.compare.gate, cli/gate.py); nothing here changes an exit code.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table
from rich.text import Text

from opbench.cli.console import console
from opbench.cli.gate import GateInputs
from opbench.compare.baseline import Baseline
from opbench.compare.completeness import incomplete_reason
from opbench.compare.gate import GateReport, GateVerdict, Verdict
from opbench.compare.gate_model import format_interval
from opbench.compare.model import Comparison
from opbench.compare.model import Verdict as Target
from opbench.errors import ExitCode
from opbench.report.github import escape_data, escape_property
from opbench.report.junit import JUnitCase, Outcome, cases_from_gate, gate_properties, write_junit
from opbench.report.style import fmt_ms, fmt_x
from opbench.results.model import RunResult, crashed_results

# ----------------------------------------------------------------------------------------------
# The terminal
# ----------------------------------------------------------------------------------------------

VERDICT_STYLES = {
    Verdict.REGRESSED: "bold red",
    Verdict.CRASHED: "bold red",
    Verdict.IMPROVED: "bold green",
    Verdict.OK: "green",
    Verdict.INCONCLUSIVE: "yellow",
    Verdict.INCOMPARABLE: "magenta",
    Verdict.MISSING: "yellow",
    Verdict.NEW: "cyan",
    Verdict.UNSUPPORTED: "dim",
}
STATUS_STYLES = {
    "PASS": "bold green",
    "REGRESSED": "bold red",
    "CRASHED": "bold red",
    "INCOMPLETE": "bold red",
    "INCONCLUSIVE": "bold yellow",
}
# What the ms columns hold: the ratio is theirs, not the medians of all samples (those are
# in the JUnit file), so that the ratio always agrees with the two figures beside it.
MS_CAPTION = (
    "baseline/run ms: geometric mean of the round medians, what the ratio compares "
    "(the median of all samples where nothing was compared)"
)


def _note(v: GateVerdict) -> str:
    parts = ["re-run"] if v.confirmed else []
    if v.verdict is Verdict.REGRESSED:
        parts.append(
            f"BH p {v.q_value:.2g}" + ("" if v.significant else ", not significant: warning")
        )
    if v.ratio is None:
        parts.append(v.message)
    elif "short layer" in v.message:
        parts.append("short layer: 3 x CV threshold")
    return "; ".join(p for p in parts if p)


def gate_table(report: GateReport) -> Table:
    level = report.options.level
    table = Table(
        title=f"{report.suite}: regression gate against {report.baseline_path} "
        f"({report.baseline_source})",
        title_justify="left",
        header_style="bold",
    )
    for name in ("verdict", "model", "layer", "backend"):
        table.add_column(name, overflow="fold")
    table.caption = MS_CAPTION
    table.caption_justify = "left"
    for name in ("baseline ms", "run ms", "ratio", f"{level:.0%} CI", "threshold"):
        table.add_column(name, justify="right")
    table.add_column("note", style="dim", overflow="fold")
    for v in report.verdicts:
        style = VERDICT_STYLES.get(v.verdict, "")
        if v.verdict is Verdict.REGRESSED and not v.significant:
            style = "yellow"
        interval = "–" if v.ci_low is None else format_interval(v.ci_low, v.ci_high)
        table.add_row(
            Text(v.verdict.value, style=style),
            Text(v.model),
            Text(v.layer),
            Text(v.backend),
            fmt_ms(v.baseline_ms if v.baseline_gm_ms is None else v.baseline_gm_ms),
            fmt_ms(v.current_ms if v.current_gm_ms is None else v.current_gm_ms),
            "–" if v.ratio is None else Text(f"{v.ratio:.3f}", style=style),
            interval,
            "–" if v.threshold is None else f"{v.threshold * 100:.1f}%",
            Text(_note(v)),
        )
    return table


def print_gate(report: GateReport, waived: bool = False) -> None:
    console.print(gate_table(report))
    if report.env_differences:
        state = (
            "comparison refused (exit 4; --allow-env-change compares anyway)"
            if report.incomparable
            else "compared anyway (--allow-env-change)"
        )
        diffs = Table(
            title=f"environment differs from the baseline: {state}",
            title_justify="left",
            header_style="bold",
        )
        for name in ("key", "baseline", "this run"):
            diffs.add_column(name, overflow="fold")
        for d in report.env_differences:
            diffs.add_row(Text(d.key), Text(str(d.baseline)), Text(str(d.current)))
        console.print(diffs)
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    style = STATUS_STYLES.get(report.status, "bold magenta")
    line = Text("gate: ").append(report.summary(), style=style)
    if waived and report.exit_code in (ExitCode.FAILED_GATE, ExitCode.BASELINE):
        line.append(" (not failing: --update-baseline makes this run the baseline)", style="dim")
    console.print(line)


# ----------------------------------------------------------------------------------------------
# CI outputs
# ----------------------------------------------------------------------------------------------


def _target_outcome(row, run: RunResult) -> Outcome:
    p = row.primary
    crashed = {(r.model, m) for r in crashed_results(run, p.backend) for m in r.members}
    if any((row.model, layer) in crashed for layer in row.layers) or p.correct is False:
        return Outcome.ERROR
    return _OUTCOMES.get(p.verdict, Outcome.SKIPPED)


# A verdict's JUnit outcome follows its exit code: FAIL fails (1), ERROR errors (3), the rest
# never fail.
_OUTCOMES = {Target.PASS: Outcome.PASSED, Target.FAIL: Outcome.FAILURE, Target.ERROR: Outcome.ERROR}


def target_cases(comparison: Comparison, run: RunResult) -> list[JUnitCase]:
    """One case per comparison row of the gated backend, then one per model verdict: PASS
    passes, FAIL fails, a crash or failed correctness errors, UNCERTAIN, NOT-MEASURED and
    MISSING are skipped."""
    cases = []
    for row in comparison.rows:
        p = row.primary
        speedup = p.speedup
        cases.append(
            JUnitCase(
                name=f"{row.label} ({p.backend}) target {row.target:g}x",
                classname=f"{comparison.suite}.{row.model}",
                outcome=_target_outcome(row, run),
                message=p.reason
                or f"{p.verdict}: speed-up {fmt_x(speedup.value if speedup else None)}",
                details=p.reason or "",
                properties={
                    "verdict": p.verdict,
                    "speedup": speedup.value if speedup else None,
                    "speedup_low": speedup.lo if speedup else None,
                    "speedup_high": speedup.hi if speedup else None,
                    "target": row.target,
                    "reference_engine": comparison.reference.engine,
                    "reference_ms": row.reference.value if row.reference else None,
                    "run_ms": p.time.value if p.time else None,
                },
            )
        )
    for m in comparison.models:
        cases.append(
            JUnitCase(
                name=f"model {m.model} ({m.backend}) target {m.target:g}x",
                classname=f"{comparison.suite}.{m.model}",
                outcome=_OUTCOMES.get(m.verdict, Outcome.SKIPPED),
                message=m.reason
                or f"{m.verdict}: speed-up {fmt_x(m.speedup.value if m.speedup else None)}",
                details=m.reason or "",
                properties={
                    "verdict": m.verdict,
                    "basis": m.basis,
                    "speedup": m.speedup.value if m.speedup else None,
                    "speedup_low": m.speedup.lo if m.speedup else None,
                    "speedup_high": m.speedup.hi if m.speedup else None,
                    "target": m.target,
                },
            )
        )
    return cases


def write_junit_file(
    path: Path,
    run: RunResult,
    report: GateReport | None,
    inputs: GateInputs | None,
    comparison: Comparison | None,
) -> None:
    """Gate cases (or one "baseline" case when BASE could not be used), then target cases."""
    cases: list[JUnitCase] = []
    properties: dict = {}
    if report is not None:
        cases += cases_from_gate(report)
        properties.update(gate_properties(report))
    elif inputs is not None and inputs.problem is not None:
        updating = inputs.destination is not None
        cases.append(
            JUnitCase(
                "baseline",
                run.suite,
                Outcome.SKIPPED if updating else Outcome.ERROR,
                str(inputs.problem) + ("; writing a new one" if updating else ""),
            )
        )
    if comparison is not None:
        cases += target_cases(comparison, run)
        properties["reference"] = comparison.reference.source
    incomplete = incomplete_reason(run)
    if incomplete:  # the layers it lacks have no case of their own to fail
        cases.append(JUnitCase("run complete", run.suite, Outcome.ERROR, incomplete))
    kind = "gate" if inputs is not None else "target"
    write_junit(path, f"opbench-{kind}.{run.suite}", cases, properties)


def append_summaries(parts: Sequence[str]) -> Path | None:
    """Append Markdown to $GITHUB_STEP_SUMMARY when it is set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target or not parts:
        return None
    with Path(target).open("a", encoding="utf-8") as fh:
        fh.write("\n".join(parts) + "\n")
    return Path(target)


def _command(level: str, title: str, message: str) -> str:
    return f"::{level} title={escape_property(title)}::{escape_data(message)}"


def annotation_lines(
    report: GateReport | None,
    inputs: GateInputs | None,
    comparison: Comparison | None,
    run: RunResult,
) -> list[str]:
    """Workflow commands for GitHub Actions: the gate's own, then a missing baseline, notes
    that need a look (a --confirm that could not run), missed targets and crashes."""
    from opbench.report.github import annotations

    lines = annotations(report) if report is not None else []
    incomplete = incomplete_reason(run)
    if incomplete:
        lines.append(_command("error", "opbench: incomplete run", incomplete))
    if inputs is not None and inputs.problem is not None and inputs.destination is None:
        lines.append(_command("error", "opbench: no usable baseline", str(inputs.problem)))
    if report is not None:
        lines += [
            _command("warning", "opbench: --confirm", note)
            for note in report.notes
            if note.startswith("--confirm could not")
        ]
    if comparison is not None:
        failing = [row for row in comparison.rows if row.primary.verdict == Target.FAIL]
        for row in failing[:10]:
            lines.append(
                _command(
                    "error",
                    f"opbench missed target: {row.model}/{row.label} ({row.primary.backend})",
                    row.primary.reason
                    or f"speed-up {fmt_x(row.primary.speedup.value if row.primary.speedup else None)}"
                    f" below the target {row.target:g}x",
                )
            )
        if len(failing) > 10:
            more = len(failing) - 10
            lines.append(_command("error", f"opbench: {more} more", f"{more} more missed targets"))
        for m in comparison.models:
            if m.verdict == Target.FAIL:
                lines.append(
                    _command(
                        "error",
                        f"opbench missed target: model {m.model} ({m.backend})",
                        m.reason
                        or f"speed-up {fmt_x(m.speedup.value if m.speedup else None)} "
                        f"({m.basis}) below the target {m.target:g}x",
                    )
                )
    return lines


def summaries(
    run: RunResult,
    report: GateReport | None,
    inputs: GateInputs | None,
    comparison: Comparison | None,
    written: Baseline | None,
) -> list[str]:
    from opbench.report.github import step_summary_markdown
    from opbench.report.markdown import render_markdown

    parts = []
    if report is not None:
        parts.append(step_summary_markdown(report))
    elif inputs is not None and inputs.problem is not None:
        verdict = "writing a new baseline" if inputs.destination else "exit 4"
        parts.append(
            f"## opbench gate: {run.suite}: no usable baseline ({verdict})\n\n`{inputs.problem}`\n"
        )
    if written is not None:
        parts.append(f"Baseline written to `{written.path}` ({len(written.entries)} entries).\n")
    if comparison is not None:
        parts.append(render_markdown(comparison))
    return parts
