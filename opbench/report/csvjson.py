"""comparison.json (everything, so `opbench report` can re-render), comparison.csv (one line
per row and backend, for spreadsheets and pandas) and end_to_end.csv (one line per model,
backend and mode of the whole forward).

The only (de)serializer of `Comparison`. JSON has no Inf/NaN: they are stored as strings.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from opbench.compare.graphs import GraphLayer
from opbench.compare.model import (
    COMPARISON_SCHEMA_VERSION,
    QUANT_PEERS,
    BackendTiming,
    Comparison,
    ComparisonRow,
    EndToEndTiming,
    Interval,
    ModelSummary,
    Overhead,
    Peaks,
    ReferenceInfo,
    RooflinePoint,
    Unmatched,
)
from opbench.compare.peaks import roof_fraction
from opbench.errors import InputError, Location
from opbench.results.jsonfile import read_json_object

JSON_FILE = "comparison.json"
CSV_FILE = "comparison.csv"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def comparison_to_dict(comparison: Comparison) -> dict[str, Any]:
    data = asdict(comparison)
    data["env"] = _jsonable(comparison.env)
    return _clean(data)


def _jsonable(value: Any) -> Any:
    """run.env is plain data already; anything else becomes its string."""
    try:
        json.dumps(value, allow_nan=True)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))


def comparison_json(comparison: Comparison) -> str:
    return json.dumps(comparison_to_dict(comparison), indent=1, allow_nan=False) + "\n"


# ---- reading back ---------------------------------------------------------------------------


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def _interval(data: Any) -> Interval | None:
    if data is None:
        return None
    return Interval(float(data["value"]), float(data["lo"]), float(data["hi"]))


def _build(cls: type, data: dict[str, Any], **overrides: Any) -> Any:
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in known}
    values.update(overrides)
    return cls(**values)


def _timing(data: dict[str, Any]) -> BackendTiming:
    return _build(
        BackendTiming,
        data,
        time=_interval(data.get("time")),
        speedup=_interval(data.get("speedup")),
        rel_l2=_f(data.get("rel_l2")),
        tflops=_f(data.get("tflops")),
        gbps=_f(data.get("gbps")),
        host_ms=_f(data.get("host_ms")),
        stream_ms=_f(data.get("stream_ms")),
        failures=tuple(data.get("failures") or ()),
    )


def _summary(data: dict[str, Any]) -> ModelSummary:
    return _build(
        ModelSummary,
        data,
        total_speedup=_f(data.get("total_speedup")),
        geomean_speedup=_f(data.get("geomean_speedup")),
        reference_total_ms=_f(data.get("reference_total_ms")),
        speedup=_interval(data.get("speedup")),
        end_to_end_speedup=_f(data.get("end_to_end_speedup")),
        end_to_end=tuple(
            _build(
                EndToEndTiming,
                e,
                time=_interval(e.get("time")),
                vs_torch=_f(e.get("vs_torch")),
                vs_best_peer=_f(e.get("vs_best_peer")),
                rel_l2=_f(e.get("rel_l2")),
                failures=None if e.get("failures") is None else tuple(e["failures"]),
            )
            for e in data.get("end_to_end") or ()
        ),
        missing=tuple(data.get("missing") or ()),
    )


def _row(data: dict[str, Any]) -> ComparisonRow:
    return _build(
        ComparisonRow,
        data,
        layers=tuple(data["layers"]),
        ops=tuple(data["ops"]),
        reference_names=tuple(data["reference_names"]),
        reference_rows=tuple(int(p) for p in data["reference_rows"]),
        sources=tuple(data["sources"]),
        reference=_interval(data.get("reference")),
        target=float(data["target"]),
        timings=tuple(_timing(t) for t in data["timings"]),
        input_shape=tuple(data.get("input_shape") or ()),
        output_shape=tuple(data.get("output_shape") or ()),
        vs_torch=_f(data.get("vs_torch")),
        **{peer.field: _f(data.get(peer.field)) for peer in QUANT_PEERS},
    )


def comparison_from_dict(data: dict[str, Any]) -> Comparison:
    version = data.get("schema_version")
    if version != COMPARISON_SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {version!r} is not supported (this opbench reads {COMPARISON_SCHEMA_VERSION})"
        )
    ref = data["reference"]
    peaks = data.get("peaks")
    return _build(
        Comparison,
        data,
        backends=tuple(data["backends"]),
        target=_f(data.get("target")),
        reference=_build(
            ReferenceInfo,
            ref,
            total_ms=_f(ref.get("total_ms")),
            notes=tuple(ref.get("notes") or ()),
        ),
        rows=tuple(_row(r) for r in data["rows"]),
        models=tuple(_summary(m) for m in data["models"]),
        unmatched=tuple(
            _build(Unmatched, u, time_ms=_f(u.get("time_ms"))) for u in data.get("unmatched") or ()
        ),
        overhead=tuple(
            _build(Overhead, o, time_ms=_f(o.get("time_ms"))) for o in data.get("overhead") or ()
        ),
        roofline=tuple(
            _build(RooflinePoint, p, tflops=_f(p.get("tflops")), gbps=_f(p.get("gbps")))
            for p in data.get("roofline") or ()
        ),
        peaks=_build(Peaks, peaks) if peaks else None,
        opbench_total_ms=float(data.get("opbench_total_ms") or 0.0),
        reference_total_ms=_f(data.get("reference_total_ms")),
        notes=tuple(data.get("notes") or ()),
        env=data.get("env") or {},
        graphs={
            str(model): tuple(
                _build(GraphLayer, layer, inputs=tuple(layer.get("inputs") or ()))
                for layer in layers
            )
            for model, layers in (data.get("graphs") or {}).items()
        },
    )


def read_comparison(path: Path | str) -> Comparison:
    """Read comparison.json, or the one inside a run folder. Bad files raise InputError."""
    path = Path(path)
    if path.is_dir():
        path = path / JSON_FILE
    data = read_json_object(
        path, "comparison file", missing="no comparison here: run `opbench compare` first"
    )
    try:
        return comparison_from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"not an opbench comparison: {exc}", Location(file=str(path))) from None


# ---- CSV ------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "model",
    "layers",
    "ops",
    "reference_names",
    "match",
    "reference_ms",
    "reference_lo_ms",
    "reference_hi_ms",
    "backend",
    "primary",
    "opbench_ms",
    "opbench_lo_ms",
    "opbench_hi_ms",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "target",
    "verdict",
    "reason",
    "ambiguity",
    "correct",
    "rel_l2",
    "failures",
    "loose_tolerance",
    "interpreted",
    "device",
    "launch_bound",
    "host_ms",
    "stream_ms",
    "dtype",
    "input_shape",
    "output_shape",
    "flops",
    "bytes",
    "tflops",
    "gbps",
    "roof_fraction",
    "vs_torch",
    # the peers' fields in QUANT_PEERS order, appended last: readers by position keep theirs
    *(peer.field for peer in QUANT_PEERS),
)


def _text(value: str) -> str:
    """Spreadsheets run cells that start with = + - @ as formulas: quote those."""
    return "'" + value if value[:1] in ("=", "+", "-", "@") else value


def _yes(value: bool | None) -> str:
    return "" if value is None else ("yes" if value else "no")


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def comparison_csv(comparison: Comparison) -> str:
    """One line per (row, backend); multi-valued cells are joined with ' + ' or ';'."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in comparison.rows:
        ref = row.reference
        for timing in row.timings:
            t, s = timing.time, timing.speedup
            primary = timing.backend == comparison.backend
            writer.writerow(
                [
                    _text(row.model),
                    _text(" + ".join(row.layers)),
                    " + ".join(row.ops),
                    _text("; ".join(row.reference_names)),
                    ";".join(row.sources),
                    _num(ref.value if ref else None),
                    _num(ref.lo if ref else None),
                    _num(ref.hi if ref else None),
                    timing.backend,
                    "yes" if primary else "no",
                    _num(t.value if t else None),
                    _num(t.lo if t else None),
                    _num(t.hi if t else None),
                    _num(s.value if s else None),
                    _num(s.lo if s else None),
                    _num(s.hi if s else None),
                    _num(row.target),
                    timing.verdict,
                    _text(timing.reason or ""),
                    _text(row.ambiguity or ""),
                    _yes(timing.correct),
                    _num(timing.rel_l2),
                    _text("; ".join(timing.failures)),
                    _yes(timing.loose_tolerance),
                    _yes(timing.interpreted),
                    timing.device or "",
                    _yes(timing.launch_bound),
                    _num(timing.host_ms),
                    _num(timing.stream_ms),
                    row.dtype,
                    "x".join(map(str, row.input_shape)),
                    "x".join(map(str, row.output_shape)),
                    str(row.flops),
                    str(row.bytes),
                    _num(timing.tflops),
                    _num(timing.gbps),
                    _num(
                        roof_fraction(
                            comparison.peaks, row.flops, row.bytes, timing.tflops, timing.gbps
                        )
                        if not timing.interpreted
                        else None
                    ),
                    _num(row.vs_torch if primary else None),
                    *(_num(row.vs_peer(peer) if primary else None) for peer in QUANT_PEERS),
                ]
            )
    return out.getvalue()


# ---- end-to-end CSV -------------------------------------------------------------------------

E2E_CSV_FILE = "end_to_end.csv"

E2E_CSV_COLUMNS = (
    "model",
    "backend",
    "mode",
    "status",
    "ms",
    "lo_ms",
    "hi_ms",
    "vs_torch",
    "best_peer",
    "vs_best_peer",
    "check",
    "interpreted",
)


def end_to_end_csv(comparison: Comparison) -> str:
    """One line per model, backend and mode of the whole forward: its time, × torch eager in
    the same mode and × the best PyTorch peer in the same mode, with that peer's name."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(E2E_CSV_COLUMNS)
    for summary in comparison.models:
        for e in summary.end_to_end:
            t = e.time
            writer.writerow(
                [
                    _text(summary.model),
                    e.backend,
                    e.mode,
                    e.status,
                    _num(t.value if t else None),
                    _num(t.lo if t else None),
                    _num(t.hi if t else None),
                    _num(e.vs_torch),
                    _text(e.best_peer or ""),
                    _num(e.vs_best_peer),
                    _text(e.check),
                    _yes(e.interpreted),
                ]
            )
    return out.getvalue()
