"""report.md: GitHub-flavoured Markdown, small enough for a pull-request comment.

Every name from a suite or a reference file is escaped: Markdown punctuation is
backslash-escaped and < > & become entities, so a layer name cannot inject HTML.
"""

from __future__ import annotations

import re

from opbench.compare.model import Comparison, ComparisonRow, Verdict
from opbench.report.style import VERDICT_SYMBOLS, fmt_ms, fmt_x, row_label, whole_run_sentence

# GitHub refuses comments over 65,536 characters; stay well below with the layer table.
MAX_ROWS = 150
MAX_LISTED = 40

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~])")


def md(text: object) -> str:
    """Escape text for a Markdown table cell."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return s.replace("\r", " ").replace("\n", " ")


def code(text: object) -> str:
    """A code span: Markdown escapes do not work inside one, so backticks are replaced."""
    return "`" + str(text).replace("`", "'").replace("\n", " ") + "`"


def _first_names(names: tuple[str, ...]) -> str:
    return names[0] + (f" (+{len(names) - 1} more)" if len(names) > 1 else "") if names else ""


def _speedup_cell(row: ComparisonRow) -> str:
    s = row.primary.speedup
    if s is None:
        return "–"
    return f"{fmt_x(s.value)} [{fmt_x(s.lo)}, {fmt_x(s.hi)}]"


def _verdict_cell(row: ComparisonRow) -> str:
    verdict = row.primary.verdict
    text = f"{VERDICT_SYMBOLS.get(verdict, '')} {verdict}"
    if row.primary.reason and verdict in (Verdict.FAIL, Verdict.ERROR):
        text += f": {md(row.primary.reason)}"
    return text


def render_markdown(comparison: Comparison) -> str:
    c = comparison
    several = len(c.models) > 1
    counts = c.counts()
    lines: list[str] = []
    lines.append(f"## opbench: {md(c.suite)}, {md(c.backend)} vs {md(c.reference.engine)}")
    lines.append("")
    target = f"{c.target:g}×" if c.target is not None else "per layer (suite)"
    lines.append(
        f"**{counts[Verdict.PASS]} PASS · {counts[Verdict.FAIL]} FAIL · {counts[Verdict.UNCERTAIN]} UNCERTAIN · "
        f"{counts[Verdict.ERROR]} ERROR** — target {target}; PASS needs the lower 95% bound of the speedup "
        "at or above the target."
    )
    lines.append("")
    detected = ", detected" if c.reference.detected else ""
    lines.append(
        f"Run {code(c.run)} on {md(c.device)} · reference {code(c.reference.source)} "
        f"(format {md(c.reference.format)}{detected}) · matched by {md(c.how_matched)}"
    )
    lines.append("")
    lines.append(
        "| model | rows | at target | geomean speedup | matched: reference ms | matched: opbench ms "
        "| total speedup | all layers: opbench ms | reference total ms |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in c.models:
        lines.append(
            f"| {md(m.model)} | {m.rows} | {m.at_target}/{m.compared} | {fmt_x(m.geomean_speedup)} "
            f"| {fmt_ms(m.matched_reference_ms)} | {fmt_ms(m.matched_opbench_ms)} | {fmt_x(m.total_speedup)} "
            f"| {fmt_ms(m.opbench_total_ms)} | {fmt_ms(m.reference_total_ms)} |"
        )
    lines.append("")
    lines.append(md(whole_run_sentence(c)) + ".")
    lines.append("")
    others = [b for b in c.backends if b != c.backend]
    header = [
        "layer",
        "op",
        "reference",
        "ref ms",
        f"{md(c.backend)} ms",
        *(f"{md(b)} ms" for b in others),
    ]
    header += ["speedup [95%]", "target", "verdict"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * 3 + "---:|" * (2 + len(others)) + "---:|---:|---|")
    for row in c.rows[:MAX_ROWS]:
        times = [fmt_ms(t.time.value if t.time else None) for t in row.timings]
        cells = [
            md(row_label(row.model, row.layers, several)),
            md(" + ".join(row.ops)),
            md(_first_names(row.reference_names)),
            fmt_ms(row.reference.value if row.reference else None),
            *times,
            _speedup_cell(row),
            f"{row.target:g}×",
            _verdict_cell(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if len(c.rows) > MAX_ROWS:
        lines.append("")
        lines.append(f"… {len(c.rows) - MAX_ROWS} more rows in report.html and comparison.csv.")
    lines.append("")
    lines.extend(_details(c))
    return "\n".join(lines).rstrip() + "\n"


def _listing(title: str, items: list[str]) -> list[str]:
    if not items:
        return []
    out = ["<details>", f"<summary>{title} ({len(items)})</summary>", ""]
    out += [f"- {item}" for item in items[:MAX_LISTED]]
    if len(items) > MAX_LISTED:
        out.append(f"- … {len(items) - MAX_LISTED} more in report.html")
    out += ["", "</details>", ""]
    return out


def _details(c: Comparison) -> list[str]:
    out: list[str] = []
    ref_side = [u for u in c.unmatched if u.side == "reference"]
    suite_side = [u for u in c.unmatched if u.side == "suite"]
    out += _listing(
        "Unmatched reference layers",
        [f"{md(u.name)} ({md(u.op or '?')}, {fmt_ms(u.time_ms)} ms)" for u in ref_side],
    )
    out += _listing(
        "Unmatched suite layers",
        [
            f"{md(u.model or '')} / {md(u.name)} ({md(u.op or '?')}, {fmt_ms(u.time_ms)} ms)"
            for u in suite_side
        ],
    )
    overhead_ms = sum(o.time_ms or 0.0 for o in c.overhead)
    out += _listing(
        f"Engine overhead, {fmt_ms(overhead_ms)} ms",
        [f"{md(o.name)} ({md(o.status)}, {fmt_ms(o.time_ms)} ms)" for o in c.overhead],
    )
    notes = list(c.notes) + list(c.reference.notes)
    if c.peaks is not None and not c.peaks.measured:
        notes.append(f"roofline peaks: {c.peaks.label}")
    if notes:
        out.append("Notes:")
        out += [f"- {md(n)}" for n in notes]
        out.append("")
    return out
