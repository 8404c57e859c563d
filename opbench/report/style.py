"""Fixed colours and number formats shared by every report: the same backend and the same
verdict look the same in the terminal, in Markdown, in HTML and in every plot."""

from __future__ import annotations

import math
import zlib

from opbench.compare.model import Comparison, Interval, Verdict

REFERENCE = "reference"

BACKEND_COLOURS: dict[str, str] = {
    REFERENCE: "#7f7f7f",
    "torch": "#1f77b4",
    "torch-compile": "#9467bd",
    "triton": "#ff7f0e",
}

# Backends not listed above get a colour from this palette, chosen by a stable hash of the name.
_EXTRA = ("#17becf", "#bcbd22", "#e377c2", "#8c564b", "#393b79", "#637939")

VERDICT_COLOURS: dict[str, str] = {
    Verdict.PASS: "#2ca02c",
    Verdict.FAIL: "#d62728",
    Verdict.UNCERTAIN: "#d9a400",
    Verdict.ERROR: "#8c564b",
}

VERDICT_SYMBOLS: dict[str, str] = {
    Verdict.PASS: "✅",
    Verdict.FAIL: "❌",
    Verdict.UNCERTAIN: "❔",
    Verdict.ERROR: "⚠️",
}


def backend_colour(backend: str) -> str:
    if backend in BACKEND_COLOURS:
        return BACKEND_COLOURS[backend]
    return _EXTRA[zlib.crc32(backend.encode()) % len(_EXTRA)]


def verdict_colour(verdict: str) -> str:
    return VERDICT_COLOURS.get(verdict, "#7f7f7f")


def fmt_ms(value: float | None) -> str:
    """Milliseconds with 3 significant digits, or an en dash when unknown."""
    if value is None or not math.isfinite(value):
        return "–" if value is None else str(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:#.3g}".rstrip(".")


def fmt_x(value: float | None) -> str:
    """A speedup: 2.31×."""
    if value is None:
        return "–"
    if not math.isfinite(value):
        return "∞×"
    if abs(value) >= 100:
        return f"{value:.0f}×"
    return f"{value:#.3g}".rstrip(".") + "×"


def fmt_interval(interval: Interval | None, fmt=fmt_ms) -> str:
    if interval is None:
        return "–"
    return f"{fmt(interval.value)} [{fmt(interval.lo)}, {fmt(interval.hi)}]"


def row_label(model: str, layers: tuple[str, ...], several_models: bool) -> str:
    label = " + ".join(layers)
    return f"{model} / {label}" if several_models else label


def whole_run_sentence(c: Comparison) -> str:
    """The run's summed layer time against the reference's total, in one sentence."""
    models = ", ".join(m.model for m in c.models)
    return (
        f"Whole run ({models}): {c.backend} {fmt_ms(c.opbench_total_ms)} ms summed over every layer "
        f"vs {c.reference.engine} {fmt_ms(c.reference_total_ms)} ms ({c.reference_total_source})"
        f" = {fmt_x(c.whole_speedup)}"
    )
