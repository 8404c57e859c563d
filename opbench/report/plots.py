"""The comparison's plots, rendered off-screen (Agg) to PNG and SVG bytes.

- speedup: per-row speedup of the primary backend with its 95% interval, coloured by verdict,
  against the target;
- times: reference vs every backend's time per row (log scale);
- roofline (plot_models.py): achieved TFLOP/s against arithmetic intensity per result, under
  the device's bandwidth slope and compute roof;
- models (plot_models.py): each model's speedup against the reference, with the target.

NOT-MEASURED results are drawn grey, hatched and labelled; MISSING rows are labelled.

Functions return bytes and never touch the file system or pyplot's global state.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from opbench.compare.model import Comparison, ComparisonRow, Verdict
from opbench.report.figure import (
    RC,
    PlotImage,
    empty_figure,
    figure_height,
    finite,
    plain_log_ticks,
    render_figure,
)
from opbench.report.style import REFERENCE, backend_colour, row_label, verdict_colour

__all__ = ["PLOT_NAMES", "PlotImage", "render_plots", "speedup_plot", "times_plot"]

PLOT_NAMES = ("speedup", "times", "roofline", "models")


def _labels(comparison: Comparison) -> list[str]:
    several = len({row.model for row in comparison.rows}) > 1
    return [row_label(row.model, row.layers, several) for row in comparison.rows]


def speedup_plot(comparison: Comparison) -> PlotImage:
    rows = comparison.rows
    title = f"Speedup of {comparison.backend} over {comparison.reference.engine} per layer (95% interval)"
    fig = Figure(figsize=(9, figure_height(len(rows))))
    with_speedup = [r for r in rows if r.primary.speedup is not None]
    if not with_speedup:
        empty_figure(fig, "no layer has a speedup to show")
        return render_figure(fig, "speedup", title)
    ax = fig.add_subplot()
    labels = _labels(comparison)
    values = [r.primary.speedup.value if r.primary.speedup else math.nan for r in rows]
    bounds = finite([b for r in with_speedup for b in (r.primary.speedup.lo, r.primary.speedup.hi)])
    bounds += finite(values) + [r.target for r in rows]
    lo_axis, hi_axis = min(bounds), max(bounds)
    log = hi_axis / lo_axis > 30
    y = list(range(len(rows)))
    colours = [verdict_colour(r.primary.verdict) for r in rows]
    for i, row in enumerate(rows):
        s = row.primary.speedup
        if s is None:
            ax.text(lo_axis if log else 0, i, f"  {row.primary.verdict}", va="center", fontsize=8)
            continue
        if row.primary.verdict == Verdict.NOT_MEASURED:
            ax.barh(i, s.value, color=colours[i], height=0.6, hatch="//", alpha=0.5)
            ax.text(s.value, i, "  NOT-MEASURED", va="center", fontsize=7, color="#555")
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
        plain_log_ticks(ax.xaxis, lo_axis, hi_axis)
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
    return render_figure(fig, "speedup", title)


def times_plot(comparison: Comparison) -> PlotImage:
    rows = comparison.rows
    series = [REFERENCE, *comparison.backends]
    title = f"{comparison.reference.engine} vs opbench time per layer (ms, log scale)"
    fig = Figure(figsize=(9, figure_height(len(rows) * max(1, len(series)) * 0.45 + 1)))
    if not rows:
        empty_figure(fig, "no matched layers")
        return render_figure(fig, "times", title)
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
        plain_log_ticks(ax.xaxis, min(drawn), max(drawn))
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("time per call (ms)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(title)
    return render_figure(fig, "times", title)


def _time_of(row: ComparisonRow, backend: str):
    timing = row.timing(backend)
    return timing.time if timing else None


def render_plots(comparison: Comparison) -> list[PlotImage]:
    """Every plot of the comparison, as PNG and SVG bytes."""
    import matplotlib

    from opbench.report.plot_models import models_plot, roofline_plot

    with matplotlib.rc_context(RC):
        return [
            speedup_plot(comparison),
            times_plot(comparison),
            roofline_plot(comparison),
            models_plot(comparison),
        ]
