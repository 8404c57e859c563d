"""Each compared model drawn as its graph: a compact column of layers in walk order, branches in
lanes beside it, every layer coloured by the verdict of the comparison row it belongs to, and a
bar per row that shows where the time goes. An inline SVG for report.html, with a tooltip per
layer; every name escaped.

Layout. One row per layer, top to bottom in walk order (model inputs first). A layer's output
holds a lane (a column) from the layer down to its last reader, so the edge to every reader runs
straight down that lane and then bends into the reader's lane, crossing no other node. A layer
continues the lane of its first input when that input ends at it (a chain stays in one lane),
else takes the leftmost free lane: a residual's skip sits in its own lane beside the block.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from opbench.compare.graphs import GraphLayer
from opbench.compare.model import Comparison, ComparisonRow
from opbench.report.style import fmt_ms, fmt_x, verdict_colour
from opbench.spec.graph import Graph, Row

ROW, LANE, RADIUS = 14, 14, 4.5
LABEL_WIDTH, BAR_WIDTH = 250, 160
UNCOVERED = "#ffffff"  # a layer no comparison row holds (a view, or not compared)


@dataclass(frozen=True)
class Placed:
    """A drawn node: a model input (op None) or a layer, its row and lane."""

    name: str
    op: str | None
    row: int
    lane: int


def layout(layers: Sequence[GraphLayer]) -> tuple[list[Placed], list[tuple[str, str]]]:
    """Nodes (model inputs, then layers) with rows and lanes, and the edges (value → reader)."""
    graph = Graph.from_rows([Row(layer.name, layer.inputs) for layer in layers])
    sources = list(graph.inputs)
    last = graph.last_reader
    lanes: list[str | None] = []  # the value each lane carries, None when free
    placed: list[Placed] = []

    def take(lane: int | None, value: str) -> int:
        if lane is None:
            lane = next((k for k, v in enumerate(lanes) if v is None), len(lanes))
        if lane == len(lanes):
            lanes.append(None)
        lanes[lane] = value
        return lane

    for row, value in enumerate(sources):
        placed.append(Placed(value, None, row, take(None, value)))
    lane_of = {p.name: p.lane for p in placed}
    for i, layer in enumerate(layers):
        row = len(sources) + i
        ending = [v for v in dict.fromkeys(layer.inputs) if last.get(v) == i]
        for value in ending:  # inputs read for the last time free their lanes
            lanes[lane_of[value]] = None
        first = layer.inputs[0] if layer.inputs else None
        keep = lane_of[first] if first in ending else None
        lane = take(keep, layer.name)
        if layer.name not in last:
            lanes[lane] = None  # a model output: nothing below reads it
        lane_of[layer.name] = lane
        placed.append(Placed(layer.name, layer.op, row, lane))
    edges = [(v, layer.name) for layer in layers for v in dict.fromkeys(layer.inputs)]
    return placed, edges


def _rows_by_layer(comparison: Comparison, model: str) -> dict[str, ComparisonRow]:
    return {name: row for row in comparison.rows if row.model == model for name in row.layers}


def model_svg(comparison: Comparison, model: str, layers: Sequence[GraphLayer]) -> str:
    """One model's graph as an inline SVG element."""
    placed, edges = layout(layers)
    where = {p.name: p for p in placed}
    rows = _rows_by_layer(comparison, model)
    lanes = 1 + max(p.lane for p in placed)
    left = LANE * lanes + 8
    times = [r.primary.time.value for r in set(rows.values()) if r.primary.time is not None]
    longest = max(times, default=0.0) or 1.0
    height = ROW * (len(placed) + 1)
    width = left + LABEL_WIDTH + BAR_WIDTH + 70
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="10">'
    ]
    x = lambda p: 8 + LANE * p.lane + LANE / 2  # noqa: E731
    y = lambda p: ROW * p.row + ROW  # noqa: E731
    for value, reader in edges:
        a, b = where[value], where[reader]
        bend = y(b) - ROW / 2
        out.append(
            f'<path d="M{x(a):.1f},{y(a):.1f} V{bend:.1f} L{x(b):.1f},{y(b):.1f}" '
            'fill="none" stroke="#888" stroke-width="1"/>'
        )
    drawn_bars: set[int] = set()
    for p in placed:
        row = rows.get(p.name)
        colour = verdict_colour(row.primary.verdict) if row else UNCOVERED
        tip = _tooltip(p, row)
        shape = (
            f'<rect x="{x(p) - RADIUS:.1f}" y="{y(p) - RADIUS:.1f}" width="{2 * RADIUS}" '
            f'height="{2 * RADIUS}" fill="#ddd" stroke="#555"/>'
            if p.op is None
            else f'<circle cx="{x(p):.1f}" cy="{y(p):.1f}" r="{RADIUS}" fill="{colour}" '
            'stroke="#333" stroke-width="0.8"/>'
        )
        label = escape(p.name) + (
            "" if p.op is None else f' <tspan fill="#777">{escape(p.op)}</tspan>'
        )
        out.append(
            f"<g><title>{escape(tip)}</title>{shape}"
            f'<text x="{left}" y="{y(p) + 3.5:.1f}">{label}</text></g>'
        )
        if row is not None and id(row) not in drawn_bars and row.primary.time is not None:
            drawn_bars.add(id(row))  # one bar per row, at its first layer
            ms = row.primary.time.value
            bar = max(1.0, BAR_WIDTH * ms / longest)
            out.append(
                f'<rect x="{left + LABEL_WIDTH}" y="{y(p) - 4:.1f}" width="{bar:.1f}" height="8" '
                f'fill="{colour}"><title>{escape(row.label)}: {escape(fmt_ms(ms))} ms</title></rect>'
                f'<text x="{left + LABEL_WIDTH + bar + 4:.1f}" y="{y(p) + 3.5:.1f}" '
                f'fill="#555">{escape(fmt_ms(ms))}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def _tooltip(p: Placed, row: ComparisonRow | None) -> str:
    if p.op is None:
        return f"{p.name}: model input"
    if row is None:
        return f"{p.name} ({p.op}): no comparison row (a view, or not compared)"
    t = row.primary
    parts = [f"{p.name} ({p.op})", f"{t.backend}: {t.verdict}"]
    if len(row.layers) > 1:
        parts.append("with " + ", ".join(n for n in row.layers if n != p.name))
    if t.time is not None:
        parts.append(f"{fmt_ms(t.time.value)} ms")
    if t.speedup is not None:
        parts.append(f"speedup {fmt_x(t.speedup.value)}")
    if t.reason:
        parts.append(t.reason)
    return " · ".join(parts)


def graphs_html(comparison: Comparison, graphs: Mapping[str, Sequence[GraphLayer]]) -> str:
    """Every compared model's graph, in the order of the comparison's models."""
    if not graphs:
        return "<p>The run records no graph for the compared models.</p>"
    parts = []
    for summary in comparison.models:
        layers = graphs.get(summary.model)
        if layers:
            parts.append(
                f'<figure class="model-graph" id="graph-{escape(summary.model, quote=True)}">'
                f"{model_svg(comparison, summary.model, layers)}"
                f"<figcaption>{escape(summary.model)}: layers in walk order, colour = verdict "
                f"of {escape(comparison.backend)}, bar = its time per row</figcaption></figure>"
            )
    return "".join(parts) or "<p>The run records no graph for the compared models.</p>"
