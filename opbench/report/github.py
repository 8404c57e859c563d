"""GitHub Actions output for the gate: a step summary (markdown) and annotation lines.

`step_summary_markdown(report)` is appended to $GITHUB_STEP_SUMMARY by `append_step_summary`
(when the variable is set). `annotations(report)` returns workflow-command lines
(`::error title=...::message`, `::warning ...`, `::notice ...`) that the CLI prints to stdout;
GitHub shows only the first 10 of each kind per step, so longer lists end with one line
pointing to the summary.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from opbench.compare.gate import DEFAULT_THRESHOLD, GateReport, GateVerdict, Verdict
from opbench.compare.gate_model import format_interval

ANNOTATIONS_PER_LEVEL = 10
SUMMARY_ROWS = 300  # GitHub caps a step summary at 1 MiB
_ORDER = {"error": 0, "warning": 1, "notice": 2, None: 3}


def escape_data(text: str) -> str:
    """A workflow command's message: %, CR and LF must be escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (title=...): also ':' and ','."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def _where(v: GateVerdict) -> str:
    return f"{v.model}/{v.layer} ({v.backend})"


def _row(v: GateVerdict) -> str:
    interval = format_interval(v.ci_low, v.ci_high) if v.ci_low is not None else ""
    threshold = "" if v.threshold is None else f"{v.threshold * 100:.1f}%"
    cells = [
        f"**{v.verdict.value}**" if v.severity == "error" else v.verdict.value,
        v.model,
        v.layer,
        v.backend,
        _num(v.baseline_ms if v.baseline_gm_ms is None else v.baseline_gm_ms, ".4f"),
        _num(v.current_ms if v.current_gm_ms is None else v.current_gm_ms, ".4f"),
        _num(v.ratio, ".3f"),
        interval,
        threshold,
        _num(v.q_value, ".2g"),
        v.message,
    ]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(rows: list[GateVerdict], level: float, limit: int) -> list[str]:
    head = [
        f"| verdict | model | layer | backend | baseline ms | run ms | ratio | {level:.0%} CI "
        "| threshold | BH adj. p | message |",
        "|---|---|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    body = [_row(v) for v in rows[:limit]]
    if len(rows) > limit:
        body.append(
            f"| ... | {len(rows) - limit} more rows: see the JUnit file or run.json |" + " |" * 9
        )
    return head + body


def step_summary_markdown(report: GateReport) -> str:
    """Markdown for $GITHUB_STEP_SUMMARY: status, counts, environment, what needs attention."""
    o = report.options
    default = DEFAULT_THRESHOLD if o.threshold is None else o.threshold
    threshold = f"{default * 100:g}% (a layer's own regression_threshold wins)"
    lines = [
        f"## opbench gate: {_cell(report.suite)}: {report.status} (exit {report.exit_code})",
        "",
        f"Baseline `{report.baseline_path or '?'}` ({report.baseline_source}); threshold {threshold}; "
        f"{o.level:.0%} intervals on the ratio of round medians (the ms columns are the geometric "
        f"means of the round medians it compares); Benjamini-Hochberg q = {o.q:g}.",
        "",
        " · ".join(f"{name}: {n}" for name, n in report.counts().items() if n)
        or "nothing compared",
        "",
    ]
    lines += [f"> {_cell(note)}" for note in report.notes] + ([""] if report.notes else [])
    if report.env_differences:
        state = (
            "comparison refused (exit 4)" if report.incomparable else "compared anyway (allowed)"
        )
        lines += [
            f"### Environment differs from the baseline: {state}",
            "",
            "| key | baseline | this run |",
            "|---|---|---|",
        ]
        lines += [
            f"| {_cell(d.key)} | {_cell(d.baseline)} | {_cell(d.current)} |"
            for d in report.env_differences
        ]
        lines.append("")
    attention = sorted(
        (
            v
            for v in report.verdicts
            if v.severity in ("error", "warning") and v.verdict is not Verdict.INCOMPARABLE
        ),
        key=lambda v: _ORDER[v.severity],
    )
    if attention:
        lines += ["### Needs attention", ""] + _table(attention, o.level, SUMMARY_ROWS) + [""]
    lines += [
        f"<details><summary>All {len(report.verdicts)} layer results</summary>",
        "",
        *_table(list(report.verdicts), o.level, SUMMARY_ROWS),
        "",
        "</details>",
        "",
    ]
    return "\n".join(lines)


def append_step_summary(
    report: GateReport, environ: Mapping[str, str] | None = None
) -> Path | None:
    """Append the summary to $GITHUB_STEP_SUMMARY; None (and nothing written) when it is unset."""
    target = (os.environ if environ is None else environ).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(step_summary_markdown(report) + "\n")
    return path


def _command(level: str, title: str, message: str) -> str:
    return f"::{level} title={escape_property(title)}::{escape_data(message)}"


def annotations(report: GateReport, per_level: int = ANNOTATIONS_PER_LEVEL) -> list[str]:
    """Workflow-command lines: errors (failing regressions, crashes, refused environment),
    warnings (unconfirmed regressions, inconclusive, missing, lost support), notices
    (improvements). At most `per_level` of each, then one line saying how many more."""
    found: dict[str, list[tuple[str, str]]] = {"error": [], "warning": [], "notice": []}
    if report.env_differences:
        diffs = "; ".join(str(d) for d in report.env_differences)
        level = "error" if report.incomparable else "warning"
        found[level].append(("opbench: environment differs from the baseline", diffs))
    for v in report.verdicts:
        level = v.severity
        if level is None or v.verdict in (Verdict.INCOMPARABLE, Verdict.NEW):
            continue
        label = "regression" if v.verdict is Verdict.REGRESSED else v.verdict.value.lower()
        found[level].append((f"opbench {label}: {_where(v)}", v.message or v.verdict.value))
    lines = []
    for level, items in found.items():
        lines += [_command(level, title, message) for title, message in items[:per_level]]
        if len(items) > per_level:
            more = len(items) - per_level
            lines.append(
                _command(
                    level, f"opbench: {more} more", f"{more} more {level}s: see the step summary"
                )
            )
    return lines
