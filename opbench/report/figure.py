"""What every plot shares: the rendering to PNG and SVG bytes, log ticks, an empty figure.

Functions return bytes and never touch the file system or pyplot's global state.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

# SVG text stays text (smaller, faster to write, searchable); ids are stable between runs.
RC = {"svg.hashsalt": "opbench", "svg.fonttype": "none", "font.size": 9}


@dataclass(frozen=True)
class PlotImage:
    name: str
    title: str
    png: bytes
    svg: bytes


def figure_height(rows: int) -> float:
    return min(max(2.8, 0.32 * rows + 1.6), 60.0)


def render_figure(fig: Figure, name: str, title: str) -> PlotImage:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=110, metadata={"Software": None})
    fig.savefig(svg, format="svg", metadata={"Date": None})
    return PlotImage(name, title, png.getvalue(), svg.getvalue())


def plain_log_ticks(axis, lo: float, hi: float) -> None:
    """Log-scale tick labels as plain numbers (0.5, 2) rather than 5×10⁻¹; minor labels only
    when the axis spans less than a decade."""
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    axis.set_major_formatter(plain)
    axis.set_minor_formatter(plain if hi / max(lo, 1e-300) < 10 else NullFormatter())


def empty_figure(fig: Figure, text: str) -> None:
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center")


def finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v) and v > 0]
