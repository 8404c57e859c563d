"""report.md: GitHub-flavoured Markdown, small enough for a pull-request comment.

Every name from a suite or a reference file is escaped: Markdown punctuation is
backslash-escaped and < > & become entities, so a layer name cannot inject HTML.
"""

from __future__ import annotations

import re

from opbench.compare.model import Comparison, ComparisonRow, Verdict
from opbench.report.facts import layer_facts, shown_peers, with_host_stream
from opbench.report.style import (
    MARKS,
    VERDICT_SYMBOLS,
    fmt_interval,
    fmt_ms,
    fmt_vs_best,
    fmt_x,
    mark_symbols,
    marks_of,
    peaks_note,
    row_label,
    whole_run_sentence,
)

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
    if row.primary.reason and verdict != Verdict.PASS:
        text += f": {md(row.primary.reason)}"
    return text


def _time_cell(timing) -> str:
    if timing is None or timing.time is None:
        return "–"
    text = fmt_ms(timing.time.value) + mark_symbols(timing)
    # an interpreter time is shown, never as a plain number
    return f"_{text}_ (interpreted)" if timing.interpreted else text


def _counts_line(c: Comparison) -> str:
    counts = c.counts()
    shown = [
        f"{counts[v]} {v}"
        for v in Verdict.ALL
        if counts[v] or v in (Verdict.PASS, Verdict.FAIL, Verdict.UNCERTAIN, Verdict.ERROR)
    ]
    return "**" + " · ".join(shown) + "**"


def _models(c: Comparison) -> list[str]:
    lines = [
        "| model | verdict | judged on | speedup [95%] | target | end to end (eager) "
        "| sum of layers | rows | at target | MISSING | geomean | all layers: opbench ms "
        "| reference total ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in c.models:
        verdict = f"{VERDICT_SYMBOLS.get(m.verdict, '')} {m.verdict}"
        if m.reason:
            verdict += f": {md(m.reason)}"
        lines.append(
            f"| {md(m.model)} | {verdict} | {md(m.basis)} | {fmt_interval(m.speedup, fmt_x)} "
            f"| {m.target:g}× | {fmt_x(m.end_to_end_speedup)} | {fmt_x(m.whole_speedup)} "
            f"| {m.rows} | {m.at_target}/{m.compared} | {len(m.missing)} "
            f"| {fmt_x(m.geomean_speedup)} | {fmt_ms(m.opbench_total_ms)} "
            f"| {fmt_ms(m.reference_total_ms)} |"
        )
    return lines


def _end_to_end(c: Comparison) -> list[str]:
    entries = [(m.model, e) for m in c.models for e in m.end_to_end]
    if not entries:
        return []
    lines = [
        "End to end (the whole forward; × torch = torch eager's time in the same mode / this; "
        "× best peer = the fastest right PyTorch peer's, suite or library, named):",
        "",
        "| model | backend | mode | ms [95%] | × torch | × best peer | output check | status |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for model, e in entries:
        status = "⏸️ NOT-MEASURED (interpreted)" if e.interpreted else md(e.status)
        check = ("❌ " if e.failures else "") + md(e.check)
        lines.append(
            f"| {md(model)} | {md(e.backend)} | {md(e.mode)} | {fmt_interval(e.time)} "
            f"| {fmt_x(e.vs_torch)} | {fmt_vs_best(e.vs_best_peer, e.best_peer, md)} | {check} | {status} |"
        )
    return lines + [""]


def _layers(c: Comparison) -> list[str]:
    several = len(c.models) > 1
    others = [b for b in c.backends if b != c.backend]
    host, stream = with_host_stream(c)
    peers = shown_peers(c)
    header = ["layer", "op", "shape", "dtype", "FLOPs", "bytes", "reference", "ref ms"]
    header += [f"{md(c.backend)} ms", *(f"{md(b)} ms" for b in others)]
    header += ["host ms"] * host + ["stream ms"] * stream
    header += ["speedup [95%]", "% of roof", "× torch"] + [peer.header for peer in peers]
    header += ["target", "verdict", "marks"]
    align = ["---"] * 4 + ["---:"] * 2 + ["---"] + ["---:"] * (len(header) - 10) + ["---"] * 3
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for row in c.rows[:MAX_ROWS]:
        facts = layer_facts(c, row)
        p = row.primary
        cells = [
            md(row_label(row.model, row.layers, several)),
            md(" + ".join(row.ops)),
            facts.shape,
            md(facts.dtype),
            facts.flops,
            facts.bytes,
            md(_first_names(row.reference_names)),
            fmt_ms(row.reference.value if row.reference else None),
            *(_time_cell(t) for t in row.timings),
        ]
        cells += [fmt_ms(p.host_ms)] * host + [fmt_ms(p.stream_ms)] * stream
        cells += [_speedup_cell(row), facts.roof, facts.vs_torch]
        cells += [facts.vs_peer(peer) for peer in peers]
        cells += [f"{row.target:g}×", _verdict_cell(row), md(", ".join(facts.marks))]
        lines.append("| " + " | ".join(cells) + " |")
    if len(c.rows) > MAX_ROWS:
        lines.append("")
        lines.append(f"… {len(c.rows) - MAX_ROWS} more rows in report.html and comparison.csv.")
    return lines


def render_markdown(comparison: Comparison) -> str:
    c = comparison
    lines: list[str] = []
    lines.append(f"## opbench: {md(c.suite)}, {md(c.backend)} vs {md(c.reference.engine)}")
    lines.append("")
    target = f"{c.target:g}×" if c.target is not None else "per layer (suite)"
    lines.append(
        f"{_counts_line(c)} — target {target}; PASS needs the lower 95% bound of the speedup "
        "at or above the target; NOT-MEASURED (interpreter or CPU times against a GPU engine) "
        "and MISSING (no reference row) are never judged."
    )
    lines.append("")
    detected = ", detected" if c.reference.detected else ""
    lines.append(
        f"Run {code(c.run)} on {md(c.device)} · reference {code(c.reference.source)} "
        f"(format {md(c.reference.format)}{detected}) · matched by {md(c.how_matched)}"
    )
    lines.append("")
    lines += _models(c)
    lines.append("")
    lines.append(md(whole_run_sentence(c)) + ".")
    lines.append("")
    lines += _end_to_end(c)
    lines += _layers(c)
    lines.append("")
    used = {word for row in c.rows for word in marks_of(row.primary)}
    lines += [
        f"- {symbol} {word}: {md(meaning)}" for symbol, word, meaning in MARKS if word in used
    ]
    if used:
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
        "Suite layers exempt from matching (they move no data)",
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
    notes.append(peaks_note(c))
    if notes:
        out.append("Notes:")
        out += [f"- {md(n)}" for n in notes]
        out.append("")
    return out
