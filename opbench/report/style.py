"""Fixed colours and number formats shared by every report: the same backend and the same
verdict look the same in the terminal, in Markdown, in HTML and in every plot."""

from __future__ import annotations

import math
import zlib

from opbench.compare.model import BackendTiming, Comparison, Interval, ModelSummary, Verdict

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
    Verdict.NOT_MEASURED: "#9e9e9e",
    Verdict.MISSING: "#6a3d9a",
}

VERDICT_SYMBOLS: dict[str, str] = {
    Verdict.PASS: "✅",
    Verdict.FAIL: "❌",
    Verdict.UNCERTAIN: "❔",
    Verdict.ERROR: "⚠️",
    Verdict.NOT_MEASURED: "⏸️",
    Verdict.MISSING: "🕳️",
}

# Short backend names for narrow terminal headers; the full names are in the files.
BACKEND_ABBREVIATIONS: dict[str, str] = {
    "torch-compile": "compile",
    "torch-compile-max-autotune": "compile-max",
    "torch-int8": "torch-i8",
    "torch-fp8": "torch-f8",
}

# Marks on a time, the same in every output: (symbol, word, meaning).
MARKS: tuple[tuple[str, str, str], ...] = (
    ("*", "interpreted", "timed in Triton's CPU interpreter: not a performance figure"),
    ("†", "launch-bound", "back-to-back calls take >1.2× the device time: the host can't keep up"),
    ("‡", "loose tolerance", "its tolerance is set above its dtype's default"),
)


def short_backend(backend: str) -> str:
    return BACKEND_ABBREVIATIONS.get(backend, backend)


def marks_of(timing: BackendTiming | None) -> list[str]:
    """The words of the marks a timing carries (see MARKS)."""
    if timing is None:
        return []
    flags = (timing.interpreted, timing.launch_bound, timing.loose_tolerance)
    return [word for (_, word, _), on in zip(MARKS, flags, strict=True) if on]


def mark_symbols(timing: BackendTiming | None) -> str:
    words = set(marks_of(timing))
    return "".join(symbol for symbol, word, _ in MARKS if word in words)


def fmt_count(value: int | float | None) -> str:
    """FLOPs and bytes: 3 significant digits with an SI prefix (4.19 G)."""
    if not value:
        return "–"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:#.3g}".rstrip(".") + f" {prefix}"
    return str(int(value))


def fmt_shape(shape: tuple[int, ...] | list[int]) -> str:
    return "×".join(str(d) for d in shape) if shape else "–"


def fmt_pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


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


def fmt_vs_best(vs_best_peer: float | None, best_peer: str | None, name=str) -> str:
    """× best peer, naming the peer it is against: 1.07× (library:torchvision-compile).
    name: how the peer's name is written (escaped for Markdown)."""
    return f"{fmt_x(vs_best_peer)} ({name(best_peer)})" if best_peer else "–"


def fmt_interval(interval: Interval | None, fmt=fmt_ms) -> str:
    if interval is None:
        return "–"
    return f"{fmt(interval.value)} [{fmt(interval.lo)}, {fmt(interval.hi)}]"


def row_label(model: str, layers: tuple[str, ...], several_models: bool) -> str:
    label = " + ".join(layers)
    return f"{model} / {label}" if several_models else label


def model_verdict_sentence(m: ModelSummary) -> str:
    """The model's own verdict and what it was judged on, in one sentence."""
    speedup = fmt_interval(m.speedup, fmt_x)
    text = f"model verdict {m.verdict}: {speedup} judged on: {m.basis}; target {m.target:g}×"
    return text + (f" ({m.reason})" if m.reason else "")


def whole_run_sentence(c: Comparison) -> str:
    """The run's summed layer time against the reference's total, in one sentence."""
    models = ", ".join(m.model for m in c.models)
    return (
        f"Whole run ({models}): {c.backend} {fmt_ms(c.opbench_total_ms)} ms summed over every layer "
        f"vs {c.reference.engine} {fmt_ms(c.reference_total_ms)} ms ({c.reference_total_source})"
        f" = {fmt_x(c.whole_speedup)}"
        + (
            ""
            if c.complete
            else " (not compared: the two totals do not cover the same work; see the models)"
        )
    )


def peaks_note(c: Comparison) -> str:
    """Which ceilings the roofline and the % of roof use, or why there are none."""
    if c.peaks is None:
        return (
            "no device ceilings: the roofline has no roofs and % of roof is not given "
            "(a CPU run, or a GPU without measured or nominal peaks)"
        )
    return f"roofline peaks: {c.peaks.label}"
