"""What the per-layer tables of report.md and report.html show besides times and verdicts,
computed once for both: shape, dtype, FLOPs, bytes, % of the roof, speed-ups over torch and
the quantized-linear peers (torch-int8, torch-fp8), and the marks on the primary backend's
time."""

from __future__ import annotations

from dataclasses import dataclass

from opbench.compare.model import QUANT_PEERS, Comparison, ComparisonRow, QuantPeer, Verdict
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
    vs_peers: tuple[str, ...]  # one per QUANT_PEERS entry, in its order
    marks: tuple[str, ...]

    def vs_peer(self, peer: QuantPeer) -> str:
        return self.vs_peers[QUANT_PEERS.index(peer)]


def layer_facts(c: Comparison, row: ComparisonRow) -> LayerFacts:
    p = row.primary
    measured = p.verdict != Verdict.NOT_MEASURED and not p.interpreted
    roof = roof_fraction(c.peaks, row.flops, row.bytes, p.tflops, p.gbps) if measured else None
    shape = f"{fmt_shape(row.input_shape)} → {fmt_shape(row.output_shape)}"
    dtype = row.dtype + (f" {row.quant}" if row.quant != "none" else "")
    return LayerFacts(
        shape=shape if row.input_shape or row.output_shape else "–",
        dtype=dtype or "–",
        flops=fmt_count(row.flops),
        bytes=fmt_count(row.bytes) + ("B" if row.bytes else ""),
        roof=fmt_pct(roof),
        roof_value=roof,
        vs_torch=fmt_x(row.vs_torch),
        vs_peers=tuple(fmt_x(row.vs_peer(peer)) for peer in QUANT_PEERS),
        marks=tuple(marks_of(p)),
    )


def shown_peers(c: Comparison) -> tuple[QuantPeer, ...]:
    """The peers whose column is shown (× torch-int8, × torch-fp8): those with a speed-up on
    some row of their quant."""
    return tuple(
        peer for peer in QUANT_PEERS if any(row.vs_peer(peer) is not None for row in c.rows)
    )


def with_host_stream(c: Comparison) -> tuple[bool, bool]:
    return (
        any(row.primary.host_ms is not None for row in c.rows),
        any(row.primary.stream_ms is not None for row in c.rows),
    )
