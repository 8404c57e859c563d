"""What the per-layer tables of report.md and report.html show besides times and verdicts,
computed once for both: shape, dtype, FLOPs, bytes, % of the roof, speed-ups over torch and
torch-int8, and the marks on the primary backend's time."""

from __future__ import annotations

from dataclasses import dataclass

from opbench.compare.model import Comparison, ComparisonRow, Verdict
from opbench.compare.peaks import roof_fraction
from opbench.report.style import fmt_count, fmt_pct, fmt_shape, fmt_x, marks_of


@dataclass(frozen=True)
class LayerFacts:
    shape: str
    dtype: str
    flops: str
    bytes: str
    roof: str
    roof_value: float | None
    vs_torch: str
    vs_torch_int8: str
    marks: tuple[str, ...]


def layer_facts(c: Comparison, row: ComparisonRow) -> LayerFacts:
    p = row.primary
    measured = p.verdict != Verdict.NOT_MEASURED and not p.interpreted
    roof = roof_fraction(c.peaks, row.flops, row.bytes, p.tflops, p.gbps) if measured else None
    shape = f"{fmt_shape(row.input_shape)} → {fmt_shape(row.output_shape)}"
    dtype = row.dtype + (" int8" if row.quant == "int8" else "")
    return LayerFacts(
        shape=shape if row.input_shape or row.output_shape else "–",
        dtype=dtype or "–",
        flops=fmt_count(row.flops),
        bytes=fmt_count(row.bytes) + ("B" if row.bytes else ""),
        roof=fmt_pct(roof),
        roof_value=roof,
        vs_torch=fmt_x(row.vs_torch),
        vs_torch_int8=fmt_x(row.vs_torch_int8),
        marks=tuple(marks_of(p)),
    )


def with_int8(c: Comparison) -> bool:
    """The torch-int8 column is shown when some int8 row has a torch-int8 time."""
    return any(row.vs_torch_int8 is not None for row in c.rows)


def with_host_stream(c: Comparison) -> tuple[bool, bool]:
    return (
        any(row.primary.host_ms is not None for row in c.rows),
        any(row.primary.stream_ms is not None for row in c.rows),
    )
