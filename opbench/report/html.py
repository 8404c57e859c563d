"""report.html: one self-contained file (inline CSS, plots embedded as base64 SVG images,
no script, nothing fetched). Every name from a suite or a reference file goes through
html.escape."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from opbench.compare.model import Comparison, ComparisonRow, Interval, Verdict
from opbench.report.plots import PlotImage
from opbench.report.style import (
    backend_colour,
    fmt_ms,
    fmt_x,
    row_label,
    verdict_colour,
    whole_run_sentence,
)

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.verdict { font-weight: bold; color: #fff; white-space: nowrap; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.15rem 1rem; font-size: 0.9rem; }
dl.meta dt { font-weight: bold; } dl.meta dd { margin: 0; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; vertical-align: -0.05em; }
.reason { color: #555; font-size: 0.8rem; }
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _interval_cell(interval: Interval | None, fmt=fmt_ms) -> str:
    if interval is None:
        return '<td class="num">–</td>'
    return f'<td class="num">{_e(fmt(interval.value))}<br><small>[{_e(fmt(interval.lo))}, {_e(fmt(interval.hi))}]</small></td>'


def _verdict_td(verdict: str) -> str:
    return f'<td class="verdict" style="background:{verdict_colour(verdict)}">{_e(verdict)}</td>'


def _swatch(colour: str) -> str:
    return f'<span class="swatch" style="background:{colour}"></span>'


def _meta(c: Comparison) -> str:
    env = c.env if isinstance(c.env, Mapping) else {}
    items: list[tuple[str, Any]] = [
        ("suite", c.suite),
        ("run", c.run),
        ("device", c.device),
        ("run started", c.run_started_at),
        (
            "reference",
            f"{c.reference.source} ({c.reference.engine}, format {c.reference.format}"
            f"{', detected' if c.reference.detected else ''}; {c.reference.layers} rows)",
        ),
        ("gated backend", c.backend),
        ("target", f"{c.target:g}×" if c.target is not None else "per layer, from the suite"),
        ("matched by", c.how_matched),
        ("compared at", c.created_at),
    ]
    for key in ("gpu", "torch", "triton", "cuda", "driver", "git_commit", "python"):
        value = env.get(key)
        if value is not None and not isinstance(value, (Mapping, list)):
            items.append((key, value))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    return f'<dl class="meta">{rows}</dl>'


def _summary(c: Comparison) -> str:
    head = (
        "<tr><th>model</th><th>rows</th><th>PASS</th><th>FAIL</th><th>UNCERTAIN</th><th>ERROR</th>"
        "<th>at target</th><th>geomean speedup</th><th>matched: reference ms</th><th>matched: opbench ms</th>"
        "<th>total speedup</th><th>all layers: opbench ms</th><th>reference total ms</th>"
        "<th>engine overhead ms</th></tr>"
    )
    body = []
    for m in c.models:
        counts = "".join(f'<td class="num">{m.counts.get(v, 0)}</td>' for v in Verdict.ALL)
        body.append(
            f"<tr><td>{_e(m.model)}</td><td class='num'>{m.rows}</td>{counts}"
            f"<td class='num'>{m.at_target}/{m.compared}</td><td class='num'>{_e(fmt_x(m.geomean_speedup))}</td>"
            f"<td class='num'>{_e(fmt_ms(m.matched_reference_ms))}</td>"
            f"<td class='num'>{_e(fmt_ms(m.matched_opbench_ms))}</td>"
            f"<td class='num'>{_e(fmt_x(m.total_speedup))}</td><td class='num'>{_e(fmt_ms(m.opbench_total_ms))}</td>"
            f"<td class='num' title='{_e(m.reference_total_source)}'>{_e(fmt_ms(m.reference_total_ms))}</td>"
            f"<td class='num'>{_e(fmt_ms(m.overhead_ms))}</td></tr>"
        )
    whole = f'<p id="whole-run">{_e(whole_run_sentence(c))}.</p>'
    return f'<table id="summary">{head}{"".join(body)}</table>{whole}'


def _layer_row(row: ComparisonRow, several: bool) -> str:
    cells = [
        f"<td>{_e(row_label(row.model, row.layers, several))}</td>",
        f"<td>{_e(' + '.join(row.ops))}</td>",
        f"<td>{'<br>'.join(_e(n) for n in row.reference_names)}</td>",
        f"<td>{_e(', '.join(row.sources))}</td>",
        _interval_cell(row.reference),
    ]
    cells += [_interval_cell(t.time) for t in row.timings]
    p = row.primary
    cells.append(_interval_cell(p.speedup, fmt_x))
    cells.append(f'<td class="num">{_e(f"{row.target:g}×")}</td>')
    cells.append(_verdict_td(p.verdict))
    reason = p.reason or ""
    others = [f"{t.backend}: {t.verdict}" for t in row.timings[1:]]
    cells.append(
        f'<td class="reason">{_e(reason)}{"<br>" if reason and others else ""}{_e("; ".join(others))}</td>'
    )
    return "<tr>" + "".join(cells) + "</tr>"


def _layers_table(c: Comparison) -> str:
    several = len(c.models) > 1
    heads = ["layer", "op", "reference rows", "match", f"{c.reference.engine} ms"]
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    head += "".join(f"<th>{_swatch(backend_colour(b))}{_e(b)} ms</th>" for b in c.backends)
    head += f"<th>speedup ({_e(c.backend)})</th><th>target</th><th>verdict</th><th>reason · other backends</th>"
    body = "".join(_layer_row(row, several) for row in c.rows)
    return f'<table id="layers"><tr>{head}</tr>{body}</table>'


def _list_table(table_id: str, heads: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def _plots(plots: Sequence[PlotImage]) -> str:
    out = []
    for plot in plots:
        data = base64.b64encode(plot.svg).decode("ascii")
        out.append(
            f'<figure id="plot-{_e(plot.name)}"><img alt="{_e(plot.title)}" src="data:image/svg+xml;base64,{data}">'
            f"<figcaption>{_e(plot.title)} ({_e(plot.name)}.png, {_e(plot.name)}.svg)</figcaption></figure>"
        )
    return "".join(out)


def render_html(comparison: Comparison, plots: Sequence[PlotImage]) -> str:
    c = comparison
    counts = c.counts()
    verdicts = " · ".join(
        f'<span style="color:{verdict_colour(v)};font-weight:bold">{counts[v]} {_e(v)}</span>'
        for v in Verdict.ALL
    )
    ref_side = [u for u in c.unmatched if u.side == "reference"]
    suite_side = [u for u in c.unmatched if u.side == "suite"]
    notes = list(c.notes) + list(c.reference.notes)
    if c.peaks is not None:
        notes.append(f"roofline peaks: {c.peaks.label}")
    title = f"opbench: {c.suite}, {c.backend} vs {c.reference.engine}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{verdicts}. PASS needs the lower 95% bound of the speedup at or above the target; "
        "FAIL means the upper bound is below it or the output was incorrect.</p>",
        _meta(c),
        "<h2>Per model</h2>",
        _summary(c),
        "<h2>Per layer</h2>",
        _layers_table(c),
        "<h2>Plots</h2>",
        _plots(plots),
        f"<h2>Unmatched reference layers ({len(ref_side)})</h2>",
        _list_table(
            "unmatched-reference",
            ["row", "name", "type", "model", "ms"],
            [(u.row, u.name, u.op or "", u.model or "", fmt_ms(u.time_ms)) for u in ref_side],
        ),
        f"<h2>Unmatched suite layers ({len(suite_side)})</h2>",
        _list_table(
            "unmatched-suite",
            ["model", "layer", "op", f"{c.backend} ms"],
            [(u.model or "", u.name, u.op or "", fmt_ms(u.time_ms)) for u in suite_side],
        ),
        f"<h2>Engine overhead ({len(c.overhead)} rows, {_e(fmt_ms(sum(o.time_ms or 0 for o in c.overhead)))} ms)</h2>",
        _list_table(
            "overhead",
            ["row", "name", "status", "type", "ms"],
            [(o.row, o.name, o.status, o.raw_type or "", fmt_ms(o.time_ms)) for o in c.overhead],
        ),
    ]
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
