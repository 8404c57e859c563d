"""The comparison's plots, rendered off-screen (Agg) to PNG and SVG bytes.

- speedup: per-row speedup of the primary backend with its 95% interval, coloured by verdict,
  against the target;
- times: reference vs every backend's time per row (log scale);
- roofline: achieved TFLOP/s against achieved GB/s per result, under the device's peaks.

Functions return bytes and never touch the file system or pyplot's global state.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from opbench.compare.model import Comparison, ComparisonRow, Verdict
from opbench.report.style import REFERENCE, backend_colour, row_label, verdict_colour

PLOT_NAMES = ("speedup", "times", "roofline")

# SVG text stays text (smaller, faster to write, searchable); ids are stable between runs.
_RC = {"svg.hashsalt": "opbench", "svg.fonttype": "none", "font.size": 9}


@dataclass(frozen=True)
class PlotImage:
    name: str
    title: str
    png: bytes
    svg: bytes


def _height(rows: int) -> float:
    return min(max(2.8, 0.32 * rows + 1.6), 60.0)


def _render(fig: Figure, name: str, title: str) -> PlotImage:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=110, metadata={"Software": None})
    fig.savefig(svg, format="svg", metadata={"Date": None})
    return PlotImage(name, title, png.getvalue(), svg.getvalue())


def _labels(comparison: Comparison) -> list[str]:
    several = len({row.model for row in comparison.rows}) > 1
    return [row_label(row.model, row.layers, several) for row in comparison.rows]


def _plain_log_ticks(axis, lo: float, hi: float) -> None:
    """Log-scale tick labels as plain numbers (0.5, 2) rather than 5×10⁻¹; minor labels only
    when the axis spans less than a decade."""
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    axis.set_major_formatter(plain)
    axis.set_minor_formatter(plain if hi / max(lo, 1e-300) < 10 else NullFormatter())


def _empty(fig: Figure, text: str) -> None:
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center")


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v) and v > 0]


def speedup_plot(comparison: Comparison) -> PlotImage:
    rows = comparison.rows
    title = f"Speedup of {comparison.backend} over {comparison.reference.engine} per layer (95% interval)"
    fig = Figure(figsize=(9, _height(len(rows))))
    with_speedup = [r for r in rows if r.primary.speedup is not None]
    if not with_speedup:
        _empty(fig, "no layer has a speedup to show")
        return _render(fig, "speedup", title)
    ax = fig.add_subplot()
    labels = _labels(comparison)
    values = [r.primary.speedup.value if r.primary.speedup else math.nan for r in rows]
    bounds = _finite(
        [b for r in with_speedup for b in (r.primary.speedup.lo, r.primary.speedup.hi)]
    )
    bounds += _finite(values) + [r.target for r in rows]
    lo_axis, hi_axis = min(bounds), max(bounds)
    log = hi_axis / lo_axis > 30
    y = list(range(len(rows)))
    colours = [verdict_colour(r.primary.verdict) for r in rows]
    for i, row in enumerate(rows):
        s = row.primary.speedup
        if s is None:
            ax.text(lo_axis if log else 0, i, f"  {row.primary.verdict}", va="center", fontsize=8)
            continue
        ax.barh(i, s.value, color=colours[i], height=0.6)
        hi = s.hi if math.isfinite(s.hi) else hi_axis * 2
        ax.errorbar(
            s.value,
            i,
            xerr=[[max(s.value - s.lo, 0)], [max(hi - s.value, 0)]],
            fmt="none",
            ecolor="black",
            capsize=2,
        )
    targets = sorted({r.target for r in rows})
    if len(targets) == 1:
        ax.axvline(targets[0], color="black", linestyle="--", linewidth=1)
    else:
        ax.scatter([r.target for r in rows], y, marker="|", s=120, color="black", zorder=3)
    if log:
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis, lo_axis, hi_axis)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"speedup = {comparison.reference.engine} time / {comparison.backend} time")
    handles = [Patch(color=verdict_colour(v), label=v) for v in Verdict.ALL]
    target_label = f"target {targets[0]:g}×" if len(targets) == 1 else "target per layer"
    handles.append(
        Line2D(
            [],
            [],
            color="black",
            linestyle="--" if len(targets) == 1 else "",
            marker=None if len(targets) == 1 else "|",
            label=target_label,
        )
    )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(title)
    return _render(fig, "speedup", title)


def times_plot(comparison: Comparison) -> PlotImage:
    rows = comparison.rows
    series = [REFERENCE, *comparison.backends]
    title = f"{comparison.reference.engine} vs opbench time per layer (ms, log scale)"
    fig = Figure(figsize=(9, _height(len(rows) * max(1, len(series)) * 0.45 + 1)))
    if not rows:
        _empty(fig, "no matched layers")
        return _render(fig, "times", title)
    ax = fig.add_subplot()
    labels = _labels(comparison)
    width = 0.8 / len(series)
    drawn: list[float] = []
    for k, name in enumerate(series):
        offsets, values, err_lo, err_hi = [], [], [], []
        for i, row in enumerate(rows):
            interval = row.reference if name == REFERENCE else _time_of(row, name)
            if interval is None or interval.value <= 0:
                continue
            offsets.append(i - 0.4 + width * (k + 0.5))
            values.append(interval.value)
            err_lo.append(max(interval.value - interval.lo, 0))
            err_hi.append(max(interval.hi - interval.value, 0))
        if values:
            drawn += [min(values), max(values)]
            ax.barh(offsets, values, height=width, color=backend_colour(name), label=name)
            ax.errorbar(
                values,
                offsets,
                xerr=[err_lo, err_hi],
                fmt="none",
                ecolor="black",
                capsize=1.5,
                linewidth=0.7,
            )
    if drawn:
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis, min(drawn), max(drawn))
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("time per call (ms)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(title)
    return _render(fig, "times", title)


def _time_of(row: ComparisonRow, backend: str):
    timing = row.timing(backend)
    return timing.time if timing else None


def roofline_plot(comparison: Comparison) -> PlotImage:
    peaks = comparison.peaks
    title = "Roofline: achieved TFLOP/s against achieved GB/s"
    fig = Figure(figsize=(7.5, 5.5))
    points = [p for p in comparison.roofline if p.tflops and p.gbps]
    if not points or peaks is None:
        _empty(fig, "no layer has both a FLOP count and a byte count to plot")
        return _render(fig, "roofline", title)
    ax = fig.add_subplot()
    for backend in dict.fromkeys(p.backend for p in points):
        mine = [p for p in points if p.backend == backend]
        ax.scatter(
            [p.gbps for p in mine],
            [p.tflops for p in mine],
            color=backend_colour(backend),
            label=backend,
            s=22,
            alpha=0.85,
        )
    xs = [p.gbps for p in points] + [peaks.gbps]
    ys = [p.tflops for p in points] + [peaks.tflops]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(min(xs) / 3, max(xs) * 2)
    ax.set_ylim(min(ys) / 3, max(ys) * 2)
    _plain_log_ticks(ax.xaxis, min(xs) / 3, max(xs) * 2)
    _plain_log_ticks(ax.yaxis, min(ys) / 3, max(ys) * 2)
    ax.axvline(peaks.gbps, color="black", linestyle="--", linewidth=1)
    ax.axhline(peaks.tflops, color="black", linestyle=":", linewidth=1)
    ax.annotate(
        f"{peaks.gbps:,.0f} GB/s",
        (peaks.gbps, peaks.tflops / 1.5),
        rotation=90,
        ha="right",
        va="top",
        fontsize=8,
    )
    ax.annotate(
        f"{peaks.tflops:,.0f} TFLOP/s",
        (peaks.gbps / 1.5, peaks.tflops),
        ha="right",
        va="bottom",
        fontsize=8,
    )
    ax.set_xlabel("achieved GB/s (minimum bytes / time)")
    ax.set_ylabel("achieved TFLOP/s")
    skipped = len(comparison.roofline) - len(points)
    caption = [f"peaks: {peaks.label}"]
    if skipped:
        caption.append(f"{skipped} results without a FLOP count are not shown")
    ax.set_title("\n".join([title, *caption]), fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    return _render(fig, "roofline", title)


def render_plots(comparison: Comparison) -> list[PlotImage]:
    """Every plot of the comparison, as PNG and SVG bytes."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        return [speedup_plot(comparison), times_plot(comparison), roofline_plot(comparison)]
