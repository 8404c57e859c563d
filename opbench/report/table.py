"""The comparison in the terminal: a rich table coloured by verdict, then the per-model verdicts
and totals, the end-to-end times, and what was left unmatched. Names are rich Text, never
markup, so `[x]` prints as written. At narrow widths optional columns give way (report/
columns.py); `--wide` shows them all."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from opbench.compare.model import BackendTiming, Comparison, Interval, Verdict
from opbench.report.columns import Column, dropped, fit, table_of
from opbench.report.style import (
    MARKS,
    backend_colour,
    fmt_ms,
    fmt_vs_best,
    fmt_x,
    mark_symbols,
    model_verdict_sentence,
    row_label,
    short_backend,
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


def _time(timing: BackendTiming | None) -> Text:
    if timing is None or timing.time is None:
        return Text("–")
    style = "dim" if timing.verdict == Verdict.NOT_MEASURED else ""
    return Text(fmt_ms(timing.time.value) + mark_symbols(timing), style=style)


def _optional_ms(value: float | None) -> Text:
    return Text(fmt_ms(value))


def comparison_columns(c: Comparison) -> list[Column]:
    """Every column of the layer table; optional ones say how soon they give way."""
    several = len(c.models) > 1
    rows = c.rows
    columns = [
        Column("layer", [Text(row_label(r.model, r.layers, several)) for r in rows], max_width=28),
        Column("op", [Text(" + ".join(r.ops)) for r in rows], drop=5, max_width=16),
        Column("reference", [Text(_names(r.reference_names)) for r in rows], drop=6, max_width=24),
        Column(
            Text("ref ms", style=backend_colour("reference")),
            [Text(fmt_ms(r.reference.value if r.reference else None)) for r in rows],
            justify="right",
        ),
    ]
    for k, backend in enumerate(c.backends):
        columns.append(
            Column(
                Text(f"{short_backend(backend)} ms", style=backend_colour(backend)),
                [_time(r.timing(backend)) for r in rows],
                drop=0 if k == 0 else 4,
                justify="right",
            )
        )
    for header, attr, drop in (("host ms", "host_ms", 8), ("stream ms", "stream_ms", 7)):
        values = [getattr(r.primary, attr) for r in rows]
        if any(v is not None for v in values):
            columns.append(Column(header, [_optional_ms(v) for v in values], drop, "right"))
    columns += [
        Column(
            "speedup [95%]", [_interval(r.primary.speedup, fmt_x) for r in rows], justify="right"
        ),
        Column("target", [Text(f"{r.target:g}×") for r in rows], drop=3, justify="right"),
        Column(
            "verdict",
            [
                Text(r.primary.verdict, style=f"bold {verdict_colour(r.primary.verdict)}")
                for r in rows
            ],
        ),
    ]
    if any(r.primary.reason for r in rows):
        columns.append(
            Column(
                "reason",
                [Text(r.primary.reason or "", style="dim") for r in rows],
                drop=2,
                max_width=40,
            )
        )
    return columns


def comparison_table(c: Comparison, width: int = 160, full: bool = False) -> tuple[Table, bool]:
    """The layer table fitted to `width`, and whether the reason column had to go."""
    columns = comparison_columns(c)
    kept = fit(columns, width, full)
    table = table_of(
        kept,
        title=f"{c.suite}: {c.backend} vs {c.reference.engine}",
        title_justify="left",
        header_style="bold",
    )
    return table, any(col.header == "reason" for col in dropped(columns, kept))


def _summary_lines(c: Comparison) -> list[Text]:
    lines = []
    for m in c.models:
        line = Text(f"{m.model}: ", style="bold")
        for verdict in Verdict.ALL:
            n = m.counts.get(verdict, 0)
            if n or verdict in (Verdict.PASS, Verdict.FAIL):
                line.append(f"{n} {verdict}  ", style=verdict_colour(verdict))
        line.append(
            f"· at target {m.at_target}/{m.compared} · geomean {fmt_x(m.geomean_speedup)} · matched "
            f"{fmt_ms(m.matched_reference_ms)} ms vs {fmt_ms(m.matched_opbench_ms)} ms = {fmt_x(m.total_speedup)}"
        )
        lines.append(line)
        lines.append(
            Text("  ").append(model_verdict_sentence(m), style=f"bold {verdict_colour(m.verdict)}")
        )
        lines.append(
            Text(
                f"  end to end (eager) {fmt_x(m.end_to_end_speedup)} · sum of layers "
                f"{fmt_x(m.whole_speedup)} ({fmt_ms(m.opbench_total_ms)} ms vs reference "
                f"{fmt_ms(m.reference_total_ms)} ms, {m.reference_total_source})",
                style="dim",
            )
        )
    lines.append(Text(whole_run_sentence(c), style="bold"))
    return lines


def end_to_end_table(c: Comparison) -> Table | None:
    """Each model's whole forward per backend and mode, with the speed-up over torch eager in
    the same mode and over the best PyTorch peer in the same mode, named."""
    entries = [(m.model, e) for m in c.models for e in m.end_to_end]
    if not entries:
        return None
    table = Table(title="end to end: the whole forward", title_justify="left", header_style="bold")
    for name, justify in (
        ("model", "left"),
        ("backend", "left"),
        ("mode", "left"),
        ("ms [95%]", "right"),
        ("× torch (same mode)", "right"),
        ("× best peer", "right"),
        ("output check", "left"),
        ("status", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for model, e in entries:
        status = "NOT-MEASURED (interpreted)" if e.interpreted else e.status
        table.add_row(
            Text(model),
            Text(e.backend),
            Text(e.mode),
            _interval(e.time),
            Text(fmt_x(e.vs_torch)),
            Text(fmt_vs_best(e.vs_best_peer, e.best_peer)),
            Text(e.check, style="bold red" if e.failures else None),
            Text(status + (f": {e.message}" if e.message else ""), style="dim"),
        )
    return table


def _listing(title: str, names: list[str]) -> list[Text]:
    if not names:
        return []
    shown = ", ".join(names[:MAX_LISTED]) + (
        f", … {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    )
    return [Text(f"{title} ({len(names)}): ", style="yellow").append(shown, style="default")]


def _legend(c: Comparison) -> list[Text]:
    used = "".join(mark_symbols(t) for row in c.rows for t in row.timings)
    return [
        Text(f"{symbol} {word}: {meaning}", style="dim")
        for symbol, word, meaning in MARKS
        if symbol in used
    ]


def comparison_renderable(c: Comparison, width: int = 160, full: bool = False) -> Group:
    table, reasons_dropped = comparison_table(c, width, full)
    parts: list = [table, *_summary_lines(c)]
    e2e = end_to_end_table(c)
    if e2e is not None:
        parts.append(e2e)
    if reasons_dropped:
        parts += [
            Text(f"{row.label}: ", style="bold").append(row.primary.reason or "", style="dim")
            for row in c.rows
            if row.primary.reason
        ]
    parts += _listing(
        "unmatched reference layers", [u.name for u in c.unmatched if u.side == "reference"]
    )
    parts += _listing(
        "exempt suite layers (move no data)",
        [f"{u.model}/{u.name}" for u in c.unmatched if u.side == "suite"],
    )
    if c.overhead:
        ms = sum(o.time_ms or 0.0 for o in c.overhead)
        parts.append(
            Text(f"engine overhead: {len(c.overhead)} reference rows, {fmt_ms(ms)} ms", style="dim")
        )
    parts += _legend(c)
    for note in c.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    # What the reader found in the file (rows within noise, no spread, …) is part of the
    # verdicts' story: the terminal shows it as report.md does.
    for note in c.reference.notes:
        parts.append(Text(f"reference: {note}", style="dim"))
    return Group(*parts)


def print_comparison(console: Console, c: Comparison, full: bool = False) -> None:
    """The comparison within the console's width; `full`: every column at its natural width,
    however wide that is (for a pager or a log)."""
    width = console.width
    if not full:
        console.print(comparison_renderable(c, width))
        return
    needed = 1 + sum(col.natural_width() for col in comparison_columns(c))
    console.width = max(width, needed)  # rich never prints wider than its console
    try:
        console.print(comparison_renderable(c, console.width, full=True))
    finally:
        console.width = width
