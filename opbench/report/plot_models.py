"""The roofline and the per-model chart.

- roofline: arithmetic intensity (FLOP per byte, log) against achieved TFLOP/s (log), one point
  per result labelled by layer, under the bandwidth slope and the compute roof of the run's
  own device (measured peaks, or its nominal figures labelled as such). A CPU run, or a GPU
  without known peaks, gets the points and no roofs. Interpreter times are grey and labelled.
- models: each model's speedup against the reference (its verdict's basis: end-to-end eager
  or the sum of its layers) with its interval, coloured by verdict, and the target line.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from opbench.compare.model import Comparison, RooflinePoint, Verdict
from opbench.compare.peaks import roof_tflops
from opbench.report.figure import (
    PlotImage,
    empty_figure,
    figure_height,
    plain_log_ticks,
    render_figure,
)
from opbench.report.style import backend_colour, verdict_colour

LABELLED = 40  # points labelled by name; beyond that, only the primary backend's


def _label(point: RooflinePoint, several_models: bool) -> str:
    return f"{point.model}/{point.layer}" if several_models else point.layer


def roofline_plot(comparison: Comparison) -> PlotImage:
    peaks = comparison.peaks
    title = "Roofline: achieved TFLOP/s against arithmetic intensity"
    fig = Figure(figsize=(8.5, 6.0))
    points = [p for p in comparison.roofline if p.intensity and p.tflops]
    if not points:
        empty_figure(fig, "no layer has both a FLOP count and a byte count to plot")
        return render_figure(fig, "roofline", title)
    ax = fig.add_subplot()
    several = len({p.model for p in points}) > 1
    for backend in dict.fromkeys(p.backend for p in points):
        for measured in (True, False):
            mine = [p for p in points if p.backend == backend and p.measured == measured]
            if not mine:
                continue
            ax.scatter(
                [p.intensity for p in mine],
                [p.tflops for p in mine],
                color=backend_colour(backend) if measured else "#bdbdbd",
                edgecolors=backend_colour(backend),
                label=backend if measured else f"{backend} (interpreted: NOT-MEASURED)",
                s=24,
                alpha=0.9 if measured else 0.6,
            )
    labelled = (
        points
        if len(points) <= LABELLED
        else [p for p in points if p.backend == comparison.backend][:LABELLED]
    )
    for p in labelled:
        text = _label(p, several) + ("" if p.measured else " (interpreted)")
        ax.annotate(
            text,
            (p.intensity, p.tflops),
            fontsize=6,
            xytext=(3, 2),
            textcoords="offset points",
            color="#333" if p.measured else "#888",
        )
    xs = [p.intensity for p in points if p.intensity]
    ys = [p.tflops for p in points if p.tflops]
    x_lo, x_hi = min(xs) / 3, max(xs) * 3
    caption = "no roofs: " + (
        "a CPU run" if comparison.device == "cpu" else "no measured or nominal peaks"
    )
    if peaks is not None:
        ridge = peaks.tflops * 1e3 / peaks.gbps  # FLOP/byte where the slope meets the roof
        x_lo, x_hi = min(x_lo, ridge / 10), max(x_hi, ridge * 10)
        grid = [x_lo * (x_hi / x_lo) ** (k / 200) for k in range(201)]
        ax.plot(grid, [roof_tflops(peaks, x) for x in grid], color="black", linewidth=1.2)
        ax.annotate(
            f"{peaks.gbps:,.0f} GB/s",
            (x_lo * 1.5, roof_tflops(peaks, x_lo * 1.5)),
            fontsize=8,
            rotation=30,
            va="bottom",
        )
        ax.annotate(
            f"{peaks.tflops:,.0f} TFLOP/s",
            (x_hi / 1.5, peaks.tflops),
            fontsize=8,
            ha="right",
            va="bottom",
        )
        ys.append(peaks.tflops)
        caption = f"roofs: {peaks.label}"
    y_lo, y_hi = min(ys) / 3, max(ys) * 3
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    plain_log_ticks(ax.xaxis, x_lo, x_hi)
    plain_log_ticks(ax.yaxis, y_lo, y_hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved, minimum bytes)")
    ax.set_ylabel("achieved TFLOP/s")
    skipped = len(comparison.roofline) - len(points)
    lines = [title, caption]
    if skipped:
        lines.append(f"{skipped} results without a FLOP count are not shown")
    ax.set_title("\n".join(lines), fontsize=8)
    ax.legend(loc="lower right", fontsize=7)
    return render_figure(fig, "roofline", title)


def models_plot(comparison: Comparison) -> PlotImage:
    models = comparison.models
    title = f"Speedup of each model over {comparison.reference.engine} ({comparison.backend})"
    fig = Figure(figsize=(8, figure_height(len(models)) + 0.4))
    judged = [m for m in models if m.speedup is not None]
    if not judged:
        empty_figure(fig, "no model has a speedup to show")
        return render_figure(fig, "models", title)
    ax = fig.add_subplot()
    values = [m.speedup.value for m in judged if m.speedup is not None]
    bounds = [b for m in judged if m.speedup for b in (m.speedup.lo, m.speedup.hi)]
    finite = [v for v in values + bounds + [m.target for m in models] if 0 < v < math.inf]
    hi_axis = max(finite) * 1.3
    for i, m in enumerate(models):
        s = m.speedup
        if s is None:
            ax.text(0, i, f"  {m.verdict}", va="center", fontsize=8)
            continue
        grey = m.verdict == Verdict.NOT_MEASURED
        ax.barh(
            i,
            s.value,
            height=0.6,
            color=verdict_colour(m.verdict),
            hatch="//" if grey else None,
            alpha=0.5 if grey else 1.0,
        )
        hi = s.hi if math.isfinite(s.hi) else hi_axis
        ax.errorbar(
            s.value,
            i,
            xerr=[[max(s.value - s.lo, 0)], [max(hi - s.value, 0)]],
            fmt="none",
            ecolor="black",
            capsize=3,
        )
        ax.text(max(hi, s.value), i, f"  {m.verdict} ({m.basis})", va="center", fontsize=7)
    targets = sorted({m.target for m in models})
    for target in targets:
        ax.axvline(target, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(models)), [m.model for m in models])
    ax.invert_yaxis()
    ax.set_xlim(0, hi_axis * 1.25)
    ax.set_xlabel(f"speedup = {comparison.reference.engine} time / {comparison.backend} time")
    handles = [
        Patch(color=verdict_colour(v), label=v) for v in dict.fromkeys(m.verdict for m in models)
    ]
    handles.append(
        Line2D(
            [],
            [],
            color="black",
            linestyle="--",
            label="target " + ", ".join(f"{t:g}×" for t in targets),
        )
    )
    ax.legend(handles=handles, loc="lower right", fontsize=7)
    ax.set_title(title, fontsize=9)
    return render_figure(fig, "models", title)
