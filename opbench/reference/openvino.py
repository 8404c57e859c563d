"""OpenVINO per-layer counters (format `openvino`): `benchmark_app -pc -report_type …`.

`-report_type average_counters` writes `benchmark_average_counters_report.csv`, one block;
`detailed_counters` writes one block per infer request, separated by a blank line. The C++
writer (samples/cpp/benchmark_app/statistics_report.cpp) ends every field with `;`:

    layerName;execStatus;layerType;execType;realTime (ms);cpuTime (ms);
    conv1;EXECUTED;Convolution;jit_avx512_FP32;0.123000;0.121000;
    relu1;NOT_RUN;Relu;undef;0.000000;0.000000;
    Total;;;;0.123;0.121;

The Python benchmark_app writes the same without the trailing `;` and statuses like
`Status.EXECUTED`; `sort_detailed_counters` adds a percentage column and sorts rows by time.

- NOT_RUN / OPTIMIZED_OUT rows carry no time (the plugin fused or skipped the node):
  RefStatus.NOT_RUN.
- `Reorder` nodes (layout conversions the plugin inserts): RefStatus.OVERHEAD.
- `Parameter` / `Result` nodes (model inputs and outputs): RefStatus.INPUT.
- Several blocks: realTime samples per layer are aggregated across infer requests.
The time is realTime (wall time of the node as the plugin measured it: TimeKind.DEVICE);
`--time-column cpuTime` picks the CPU time instead.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from opbench.reference.aggregate import sample_stats
from opbench.reference.csvsniff import detect_separator, field_column, parse_number
from opbench.reference.interface import MAX_LAYERS, ReaderOptions
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus, TimeKind
from opbench.reference.textio import fail, open_text

_HEADER = re.compile(r"^\ufeff?\s*layerName\s*[;,\t]\s*execStatus\s*[;,\t]", re.IGNORECASE)
_RUN_STATUS = {"EXECUTED": True, "NOT_RUN": False, "OPTIMIZED_OUT": False}
_OVERHEAD_TYPES = frozenset({"reorder"})
_INPUT_TYPES = frozenset({"parameter", "result", "input", "output"})
_TIME_COLUMNS = {"realtime": "realTime (ms)", "cputime": "cpuTime (ms)"}
_HEADER_TEXT = "layerName;execStatus;layerType;execType;realTime (ms);cpuTime (ms);"


@dataclass
class _Layer:
    name: str
    line: int
    layer_type: str
    executed: bool = False
    samples: list[float] = field(default_factory=list)


def _lines(path: Path, stream: TextIO) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line; a decoding error becomes an InputError."""
    line = 0
    try:
        for line, text in enumerate(stream, start=1):  # noqa: B007
            yield line, text
    except UnicodeDecodeError as exc:
        raise fail(path, f"not valid {exc.encoding} text", line + 1) from None


def _key(header_cell: str) -> str:
    return re.sub(r"\s*\(ms\)\s*$", "", header_cell.strip()).lower()


@dataclass
class _Row:
    """One counters line, split, with what errors need to point into it."""

    line: int
    text: str
    cells: list[str]
    separator: str

    def cell(self, index: int) -> str:
        return self.cells[index].strip() if index < len(self.cells) else ""

    def column(self, index: int) -> int:
        return field_column(self.text, index, self.separator)


class _CountersParser:
    """Walks the file's blocks (header, rows, Total, blank line) and collects layers."""

    def __init__(self, path: Path, wanted: str) -> None:
        self.path = path
        self.wanted = wanted  # "realtime" or "cputime"
        self.layers: dict[str, _Layer] = {}
        self.totals: list[float] = []
        self.blocks = 0
        self.sorted_by_time = False
        self.columns: dict[str, int] | None = None  # of the current block; None between blocks
        self.in_block: set[str] = set()
        self.separator = ";"

    def feed(self, line: int, text: str) -> None:
        if not text.strip():
            self.columns = None  # a blank line ends an infer request's block
        elif _HEADER.match(text):
            self._header(line, text)
        elif self.columns is None:
            raise fail(self.path, f"expected the counters header {_HEADER_TEXT!r}", line, 1)
        else:
            self._row(
                _Row(line, text, next(csv.reader([text], delimiter=self.separator)), self.separator)
            )

    def _header(self, line: int, text: str) -> None:
        self.separator = detect_separator(text) or ";"
        cells = next(csv.reader([text.lstrip("\ufeff")], delimiter=self.separator))
        self.columns = {_key(c): i for i, c in enumerate(cells) if c.strip()}
        missing = [
            c
            for c in ("layername", "execstatus", "layertype", self.wanted)
            if c not in self.columns
        ]
        if missing:
            raise fail(self.path, f"counters header lacks {', '.join(missing)}", line, 1)
        self.sorted_by_time = self.sorted_by_time or any("%" in c for c in cells)
        self.blocks += 1
        self.in_block = set()

    def _row(self, row: _Row) -> None:
        columns = self.columns
        assert columns is not None
        name = row.cell(0)
        time_index = columns[self.wanted]
        status_cell = row.cell(columns["execstatus"])
        if name == "Total" and not status_cell:
            if row.cell(time_index):
                self.totals.append(self._ms(row, time_index, "Total"))
            return
        if not name:
            raise fail(self.path, "a row without a layerName", row.line, 1)
        status = status_cell.removeprefix("Status.").upper()
        if status not in _RUN_STATUS:
            raise fail(
                self.path,
                f"unknown execStatus {status_cell!r} (expected EXECUTED, NOT_RUN or OPTIMIZED_OUT)",
                row.line,
                row.column(columns["execstatus"]),
                layer=name,
            )
        if name in self.in_block:
            raise fail(
                self.path, f"layer {name!r} appears twice in one block", row.line, 1, layer=name
            )
        self.in_block.add(name)
        layer = self.layers.get(name)
        if layer is None:
            if len(self.layers) >= MAX_LAYERS:
                message = f"more than {MAX_LAYERS} distinct layers: this is not a per-layer profile"
                raise fail(self.path, message, row.line)
            layer = self.layers[name] = _Layer(name, row.line, row.cell(columns["layertype"]))
        if _RUN_STATUS[status]:
            layer.executed = True
            layer.samples.append(self._ms(row, time_index, name))

    def _ms(self, row: _Row, index: int, name: str) -> float:
        cell = row.cell(index)
        where = (row.line, row.column(index))
        if not cell:
            raise fail(
                self.path,
                f"missing {_TIME_COLUMNS[self.wanted]} for an executed layer",
                *where,
                layer=name,
            )
        try:
            value, unit = parse_number(cell, row.separator)
        except ValueError as exc:
            raise fail(self.path, f"{exc}: {cell!r}", *where, layer=name) from None
        if unit not in (None, "ms"):
            raise fail(self.path, f"unexpected unit in {cell!r}", *where, layer=name)
        if value < 0:
            raise fail(self.path, f"negative time {cell!r}", *where, layer=name)
        return value


def _status(layer: _Layer) -> str:
    kind = layer.layer_type.lower()
    if not layer.executed:
        return RefStatus.NOT_RUN
    if kind in _OVERHEAD_TYPES:
        return RefStatus.OVERHEAD
    if kind in _INPUT_TYPES:
        return RefStatus.INPUT
    return RefStatus.TIMED


class OpenVinoReader:
    name = "openvino"
    engine = "openvino"
    description = "OpenVINO benchmark_app -report_type average_counters|detailed_counters CSV"

    def sniff(self, head: str) -> float:
        for raw in head.splitlines():
            if raw.strip():
                return 0.95 if _HEADER.match(raw) else 0.0
        return 0.0

    def read(self, path: Path, options: ReaderOptions) -> ReferenceProfile:
        if options.unit not in (None, "ms"):
            raise fail(path, f"OpenVINO counters are in ms; --unit {options.unit} contradicts that")
        wanted = "realtime" if options.time_column is None else _key(options.time_column)
        if wanted not in _TIME_COLUMNS:
            message = f"--time-column for openvino must be realTime or cpuTime, not {options.time_column!r}"
            raise fail(path, message)
        parser = _CountersParser(path, wanted)
        with open_text(path) as stream:
            for number, text in _lines(path, stream):
                parser.feed(number, text.rstrip("\r\n"))
        if not parser.layers:
            raise fail(
                path,
                "no layer rows (expected benchmark_app counters: a header line, then one row per layer)",
            )
        notes = [
            f"times from column {_TIME_COLUMNS[wanted]!r}",
            f"{parser.blocks} counters block(s) (infer requests)",
        ]
        if parser.sorted_by_time:
            notes.append(
                "rows were sorted by time (sort_detailed_counters): order is not execution order"
            )
        timings = [
            ReferenceTiming(
                engine=self.engine,
                source=str(path),
                index=index,
                name=layer.name,
                raw_type=layer.layer_type or None,
                status=_status(layer),
                time_kind=TimeKind.DEVICE,
                line=layer.line,
                **(sample_stats(layer.samples) if layer.executed else {"count": 0}),  # type: ignore[arg-type]
            )
            for index, layer in enumerate(parser.layers.values())
        ]
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(timings),
            total_ms=sample_stats(parser.totals).get("median_ms"),  # type: ignore[arg-type]
            notes=tuple(notes),
        )


READER = OpenVinoReader()
