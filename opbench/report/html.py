"""report.html: one self-contained file (inline CSS, plots embedded as base64 SVG images, one
small inline script that sorts tables, nothing fetched). Every name from a suite or a
reference file goes through html.escape. NOT-MEASURED rows are greyed and labelled, MISSING
rows marked, in the table itself."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from opbench.compare.model import Comparison, ComparisonRow, Interval, QuantPeer, Verdict
from opbench.report.facts import layer_facts, shown_peers, with_host_stream
from opbench.report.graph_chart import graphs_html
from opbench.report.plots import PlotImage
from opbench.report.style import (
    MARKS,
    backend_colour,
    fmt_ms,
    fmt_vs_best,
    fmt_x,
    mark_symbols,
    marks_of,
    peaks_note,
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
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " ▲"; }
table.sortable th[aria-sort=descending]::after { content: " ▼"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.verdict { font-weight: bold; color: #fff; white-space: nowrap; }
tr.not-measured td { color: #888; background: #f4f4f4; }
tr.not-measured td.verdict { color: #fff; background: #9e9e9e; }
tr.missing td { background: #f5f0fa; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.15rem 1rem; font-size: 0.9rem; }
dl.meta dt { font-weight: bold; } dl.meta dd { margin: 0; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; vertical-align: -0.05em; }
.reason { color: #555; font-size: 0.8rem; }
figure.model-graph { display: inline-block; vertical-align: top; margin-right: 2rem; }
"""

# Click a header to sort by that column (again: the other way). Cells sort by their
# data-sort value where they have one (numbers), else by their text.
_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[col];
        var value = cell.getAttribute("data-sort");
        return value === null ? cell.textContent.trim() : parseFloat(value);
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = typeof x === "number" && typeof y === "number"
          ? (isNaN(x) ? 1 : isNaN(y) ? -1 : x - y) : String(x).localeCompare(String(y));
        return up ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _num(text: str, value: float | None) -> str:
    sort = "NaN" if value is None else repr(float(value))
    return f'<td class="num" data-sort="{sort}">{_e(text)}</td>'


def _interval_cell(interval: Interval | None, fmt=fmt_ms, extra: str = "") -> str:
    if interval is None:
        return '<td class="num" data-sort="NaN">–</td>'
    return (
        f'<td class="num" data-sort="{interval.value!r}">{_e(fmt(interval.value))}{_e(extra)}'
        f"<br><small>[{_e(fmt(interval.lo))}, {_e(fmt(interval.hi))}]</small></td>"
    )


def _verdict_td(verdict: str) -> str:
    return f'<td class="verdict" style="background:{verdict_colour(verdict)}">{_e(verdict)}</td>'


def _swatch(colour: str) -> str:
    return f'<span class="swatch" style="background:{colour}"></span>'


def _table(table_id: str, heads: Sequence[str], body: Sequence[str], sortable: bool = True) -> str:
    cls = ' class="sortable"' if sortable else ""
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f'<table id="{table_id}"{cls}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


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
            f"{', detected' if c.reference.detected else ''}; {c.reference.layers} rows"
            f"{', on ' + c.reference.device.upper() if c.reference.device else ''})",
        ),
        ("gated backend", c.backend),
        ("target", f"{c.target:g}×" if c.target is not None else "per layer, from the suite"),
        ("matched by", c.how_matched),
        ("compared at", c.created_at),
    ]
    for key in ("gpu", "gpu_name", "torch", "triton", "cuda", "driver", "git_commit", "python"):
        value = env.get(key)
        if value is not None and not isinstance(value, (Mapping, list)):
            items.append((key, value))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    return f'<dl class="meta">{rows}</dl>'


def _models(c: Comparison) -> str:
    heads = ["model", "verdict", "judged on", "speedup [95%]", "target", "end to end (eager)"]
    heads += ["sum of layers", "rows", *Verdict.ALL, "geomean", "all layers: opbench ms"]
    heads += ["reference total ms", "engine overhead ms", "why"]
    body = []
    for m in c.models:
        counts = "".join(_num(str(m.counts.get(v, 0)), m.counts.get(v, 0)) for v in Verdict.ALL)
        body.append(
            f"<tr><td>{_e(m.model)}</td>{_verdict_td(m.verdict)}<td>{_e(m.basis)}</td>"
            f"{_interval_cell(m.speedup, fmt_x)}{_num(f'{m.target:g}×', m.target)}"
            f"{_num(fmt_x(m.end_to_end_speedup), m.end_to_end_speedup)}"
            f"{_num(fmt_x(m.whole_speedup), m.whole_speedup)}{_num(str(m.rows), m.rows)}{counts}"
            f"{_num(fmt_x(m.geomean_speedup), m.geomean_speedup)}"
            f"{_num(fmt_ms(m.opbench_total_ms), m.opbench_total_ms)}"
            f"{_num(fmt_ms(m.reference_total_ms), m.reference_total_ms)}"
            f"{_num(fmt_ms(m.overhead_ms), m.overhead_ms)}"
            f'<td class="reason">{_e(m.reason or "")}<br>reference total: '
            f"{_e(m.reference_total_source)}</td></tr>"
        )
    whole = f'<p id="whole-run">{_e(whole_run_sentence(c))}.</p>'
    return _table("summary", [_e(h) for h in heads], body) + whole


def _end_to_end(c: Comparison) -> str:
    entries = [(m.model, e) for m in c.models for e in m.end_to_end]
    if not entries:
        return "<p>The run has no end-to-end times.</p>"
    heads = ["model", "backend", "mode", "ms [95%]", "× torch (same mode)", "× best peer"]
    heads.append("output check")
    heads.append("status")
    body = []
    for model, e in entries:
        cls = ' class="not-measured"' if e.interpreted else ""
        status = "NOT-MEASURED (interpreted)" if e.interpreted else e.status
        bad = f' style="background:{verdict_colour(Verdict.FAIL)}"' if e.failures else ""
        check = f"<td{bad}>{_e(e.check)}</td>"
        body.append(
            f"<tr{cls}><td>{_e(model)}</td><td>{_e(e.backend)}</td><td>{_e(e.mode)}</td>"
            f"{_interval_cell(e.time)}{_num(fmt_x(e.vs_torch), e.vs_torch)}"
            f"{_num(fmt_vs_best(e.vs_best_peer, e.best_peer), e.vs_best_peer)}{check}"
            f"<td>{_e(status)}{_e(': ' + e.message if e.message else '')}</td></tr>"
        )
    return _table("end-to-end", [_e(h) for h in heads], body)


def _layer_row(
    c: Comparison,
    row: ComparisonRow,
    several: bool,
    host: bool,
    stream: bool,
    peers: tuple[QuantPeer, ...],
) -> str:
    p = row.primary
    facts = layer_facts(c, row)
    cells = [
        f"<td>{_e(row_label(row.model, row.layers, several))}</td>",
        f"<td>{_e(' + '.join(row.ops))}</td>",
        f"<td>{_e(facts.shape)}</td>",
        f"<td>{_e(facts.dtype)}</td>",
        _num(facts.flops, row.flops or None),
        _num(facts.bytes, row.bytes or None),
        f"<td>{'<br>'.join(_e(n) for n in row.reference_names)}</td>",
        f"<td>{_e(', '.join(row.sources))}</td>",
        _interval_cell(row.reference),
    ]
    for t in row.timings:
        extra = mark_symbols(t) + (" interpreted" if t.interpreted else "")
        cells.append(_interval_cell(t.time, extra=extra))
    if host:
        cells.append(_num(fmt_ms(p.host_ms), p.host_ms))
    if stream:
        cells.append(_num(fmt_ms(p.stream_ms), p.stream_ms))
    cells.append(_interval_cell(p.speedup, fmt_x))
    cells.append(_num(facts.roof, facts.roof_value))
    cells.append(_num(facts.vs_torch, row.vs_torch))
    cells += [_num(facts.vs_peer(peer), row.vs_peer(peer)) for peer in peers]
    cells.append(_num(f"{row.target:g}×", row.target))
    cells.append(_verdict_td(p.verdict))
    cells.append(f"<td>{_e(', '.join(facts.marks))}</td>")
    # the ambiguity of the cover is worth reading even where another reason decided the verdict
    doubt = row.ambiguity if row.ambiguity != p.reason else None
    others = "; ".join(f"{t.backend}: {t.verdict}" for t in row.timings[1:])
    text = "<br>".join(_e(r) for r in (p.reason, doubt, others) if r)
    cells.append(f'<td class="reason">{text}</td>')
    cls = {Verdict.NOT_MEASURED: "not-measured", Verdict.MISSING: "missing"}.get(p.verdict)
    attrs = f' class="{cls}"' if cls else ""
    return f'<tr{attrs} data-verdict="{_e(p.verdict)}">' + "".join(cells) + "</tr>"


def _layers_table(c: Comparison) -> str:
    several = len(c.models) > 1
    host, stream = with_host_stream(c)
    heads = [_e(h) for h in ("layer", "op", "shape", "dtype", "FLOPs", "bytes")]
    heads += [_e(h) for h in ("reference rows", "match", f"{c.reference.engine} ms")]
    heads += [f"{_swatch(backend_colour(b))}{_e(b)} ms" for b in c.backends]
    heads += ["host ms"] * host + ["stream ms"] * stream
    heads += [_e(f"speedup ({c.backend})"), "% of roof", "× torch"]
    peers = shown_peers(c)
    heads += [_e(peer.header) for peer in peers]
    heads += ["target", "verdict", "marks", "reason · other backends"]
    body = [_layer_row(c, row, several, host, stream, peers) for row in c.rows]
    return _table("layers", heads, body)


def _list_table(table_id: str, heads: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    if not rows:
        return "<p>None.</p>"
    body = ["<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r) + "</tr>" for r in rows]
    return _table(table_id, [_e(h) for h in heads], body)


def _plots(plots: Sequence[PlotImage]) -> str:
    out = []
    for plot in plots:
        data = base64.b64encode(plot.svg).decode("ascii")
        out.append(
            f'<figure id="plot-{_e(plot.name)}"><img alt="{_e(plot.title)}" src="data:image/svg+xml;base64,{data}">'
            f"<figcaption>{_e(plot.title)} ({_e(plot.name)}.png, {_e(plot.name)}.svg)</figcaption></figure>"
        )
    return "".join(out)


def _legend(c: Comparison) -> str:
    used = {word for row in c.rows for word in marks_of(row.primary)}
    items = [f"<li>{_e(s)} {_e(w)}: {_e(m)}</li>" for s, w, m in MARKS if w in used]
    return f"<ul id='marks'>{''.join(items)}</ul>" if items else ""


def render_html(comparison: Comparison, plots: Sequence[PlotImage]) -> str:
    c = comparison
    counts = c.counts()
    verdicts = " · ".join(
        f'<span style="color:{verdict_colour(v)};font-weight:bold">{counts[v]} {_e(v)}</span>'
        for v in Verdict.ALL
    )
    ref_side = [u for u in c.unmatched if u.side == "reference"]
    exempt = [u for u in c.unmatched if u.side == "suite"]
    notes = list(c.notes) + list(c.reference.notes) + [peaks_note(c)]
    title = f"opbench: {c.suite}, {c.backend} vs {c.reference.engine}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{verdicts}. PASS needs the lower 95% bound of the speedup at or above the target; "
        "FAIL means the upper bound is below it or the output was incorrect; NOT-MEASURED "
        "(interpreter times, or CPU times against a GPU engine) and MISSING (no reference row) "
        "are never judged. Click a column header to sort.</p>",
        _meta(c),
        "<h2>Per model</h2>",
        _models(c),
        "<h2>End to end</h2>",
        _end_to_end(c),
        "<h2>Model graphs</h2>",
        graphs_html(c, c.graphs),
        "<h2>Per layer</h2>",
        _layers_table(c),
        _legend(c),
        "<h2>Plots</h2>",
        _plots(plots),
        f"<h2>Unmatched reference layers ({len(ref_side)})</h2>",
        _list_table(
            "unmatched-reference",
            ["row", "name", "type", "model", "ms"],
            [(u.row, u.name, u.op or "", u.model or "", fmt_ms(u.time_ms)) for u in ref_side],
        ),
        f"<h2>Suite layers exempt from matching ({len(exempt)})</h2>",
        _list_table(
            "exempt-suite",
            ["model", "layer", "op", "why"],
            [(u.model or "", u.name, u.op or "", u.detail or "") for u in exempt],
        ),
        f"<h2>Engine overhead ({len(c.overhead)} rows, {_e(fmt_ms(sum(o.time_ms or 0 for o in c.overhead)))} ms)</h2>",
        _list_table(
            "overhead",
            ["row", "name", "status", "type", "ms"],
            [(o.row, o.name, o.status, o.raw_type or "", fmt_ms(o.time_ms)) for o in c.overhead],
        ),
        "<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>",
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
