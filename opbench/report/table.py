"""The comparison in the terminal: a rich table coloured by verdict, then the per-model totals
and what was left unmatched. Names are rich Text, never markup, so `[x]` prints as written."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from opbench.compare.model import Comparison, ComparisonRow, Interval, Verdict
from opbench.report.style import (
    backend_colour,
    fmt_ms,
    fmt_x,
    row_label,
    verdict_colour,
    whole_run_sentence,
)

MAX_LISTED = 12


def _interval(interval: Interval | None, fmt=fmt_ms) -> Text:
    if interval is None:
        return Text("–")
    return Text(f"{fmt(interval.value)} ", style="bold").append(
        f"[{fmt(interval.lo)}, {fmt(interval.hi)}]", style="dim"
    )


def _names(names: tuple[str, ...]) -> str:
    return names[0] + (f" (+{len(names) - 1} more)" if len(names) > 1 else "") if names else ""


def _row(row: ComparisonRow, several: bool) -> list[Text]:
    p = row.primary
    style = verdict_colour(p.verdict)
    cells = [
        Text(row_label(row.model, row.layers, several), overflow="fold"),
        Text(" + ".join(row.ops)),
        Text(_names(row.reference_names), overflow="fold"),
        Text(fmt_ms(row.reference.value if row.reference else None)),
        *(
            Text(fmt_ms(t.time.value if t.time else None) + ("*" if t.interpreted else ""))
            for t in row.timings
        ),
        _interval(p.speedup, fmt_x),
        Text(f"{row.target:g}×"),
        Text(p.verdict, style=f"bold {style}"),
        Text(p.reason or "", style="dim"),
    ]
    return cells


def comparison_table(c: Comparison) -> Table:
    several = len(c.models) > 1
    table = Table(
        title=f"{c.suite}: {c.backend} vs {c.reference.engine}",
        title_justify="left",
        header_style="bold",
    )
    table.add_column("layer")
    table.add_column("op")
    table.add_column("reference", max_width=40)
    table.add_column(Text("ref ms", style=backend_colour("reference")), justify="right")
    for backend in c.backends:
        table.add_column(Text(f"{backend} ms", style=backend_colour(backend)), justify="right")
    table.add_column("speedup [95%]", justify="right")
    table.add_column("target", justify="right")
    table.add_column("verdict")
    with_reason = any(row.primary.reason for row in c.rows)
    if with_reason:
        table.add_column("reason", max_width=40)
    for row in c.rows:
        cells = _row(row, several)
        table.add_row(*(cells if with_reason else cells[:-1]))
    return table


def _summary_lines(c: Comparison) -> list[Text]:
    lines = []
    for m in c.models:
        line = Text(f"{m.model}: ", style="bold")
        for verdict in Verdict.ALL:
            line.append(f"{m.counts.get(verdict, 0)} {verdict}  ", style=verdict_colour(verdict))
        line.append(
            f"· at target {m.at_target}/{m.compared} · geomean {fmt_x(m.geomean_speedup)} · matched "
            f"{fmt_ms(m.matched_reference_ms)} ms vs {fmt_ms(m.matched_opbench_ms)} ms = {fmt_x(m.total_speedup)}"
            f" · all layers {fmt_ms(m.opbench_total_ms)} ms vs reference total {fmt_ms(m.reference_total_ms)} ms"
        )
        lines.append(line)
    lines.append(Text(whole_run_sentence(c), style="bold"))
    return lines


def _listing(title: str, names: list[str]) -> list[Text]:
    if not names:
        return []
    shown = ", ".join(names[:MAX_LISTED]) + (
        f", … {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    )
    return [Text(f"{title} ({len(names)}): ", style="yellow").append(shown, style="default")]


def comparison_renderable(c: Comparison) -> Group:
    parts: list = [comparison_table(c), *_summary_lines(c)]
    parts += _listing(
        "unmatched reference layers", [u.name for u in c.unmatched if u.side == "reference"]
    )
    parts += _listing(
        "unmatched suite layers", [f"{u.model}/{u.name}" for u in c.unmatched if u.side == "suite"]
    )
    if c.overhead:
        ms = sum(o.time_ms or 0.0 for o in c.overhead)
        parts.append(
            Text(f"engine overhead: {len(c.overhead)} reference rows, {fmt_ms(ms)} ms", style="dim")
        )
    if any(t.interpreted for row in c.rows for t in row.timings):
        parts.append(
            Text("* ran in the Triton CPU interpreter: not a performance figure", style="dim")
        )
    for note in c.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def print_comparison(console: Console, c: Comparison) -> None:
    console.print(comparison_renderable(c))
