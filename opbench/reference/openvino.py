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


@dataclass
class _Layer:
    name: str
    line: int
    layer_type: str
    executed: bool = False
    samples: list[float] = field(default_factory=list)


def _lines(path: Path, stream: TextIO) -> Iterator[str]:
    line = 0
    try:
        for line, text in enumerate(stream, start=1):  # noqa: B007
            yield text
    except UnicodeDecodeError as exc:
        raise fail(path, f"not valid {exc.encoding} text", line + 1) from None


def _key(header_cell: str) -> str:
    return re.sub(r"\s*\(ms\)\s*$", "", header_cell.strip()).lower()


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
        wanted = "realtime"
        if options.time_column is not None:
            wanted = _key(options.time_column)
            if wanted not in _TIME_COLUMNS:
                raise fail(
                    path,
                    f"--time-column for openvino must be realTime or cpuTime, not {options.time_column!r}",
                )
        layers: dict[str, _Layer] = {}
        totals: list[float] = []
        blocks = 0
        sorted_by_time = False
        columns: dict[str, int] | None = None
        in_block: set[str] = set()
        separator = ";"
        number = 0
        with open_text(path) as stream:
            for raw in _lines(path, stream):
                number += 1
                text = raw.rstrip("\r\n")
                if not text.strip():
                    columns = None  # a blank line ends an infer request's block
                    continue
                if _HEADER.match(text):
                    separator = detect_separator(text) or ";"
                    cells = next(csv.reader([text.lstrip("\ufeff")], delimiter=separator))
                    columns = {_key(c): i for i, c in enumerate(cells) if c.strip()}
                    missing = [
                        c
                        for c in ("layername", "execstatus", "layertype", wanted)
                        if c not in columns
                    ]
                    if missing:
                        raise fail(path, f"counters header lacks {', '.join(missing)}", number, 1)
                    sorted_by_time = sorted_by_time or any("%" in c for c in cells)
                    blocks += 1
                    in_block = set()
                    continue
                if columns is None:
                    raise fail(
                        path,
                        "expected the counters header 'layerName;execStatus;layerType;execType;realTime (ms);cpuTime (ms);'",
                        number,
                        1,
                    )
                cells = next(csv.reader([text], delimiter=separator))
                name = cells[0].strip()
                time_index = columns[wanted]
                time_cell = cells[time_index].strip() if time_index < len(cells) else ""
                if name == "Total" and not (
                    cells[columns["execstatus"]].strip() if len(cells) > 1 else ""
                ):
                    if time_cell:
                        totals.append(
                            self._ms(path, time_cell, number, text, time_index, separator, "Total")
                        )
                    continue
                if not name:
                    raise fail(path, "a row without a layerName", number, 1)
                status_cell = (
                    cells[columns["execstatus"]].strip()
                    if columns["execstatus"] < len(cells)
                    else ""
                )
                status = status_cell.removeprefix("Status.").upper()
                if status not in _RUN_STATUS:
                    raise fail(
                        path,
                        f"unknown execStatus {status_cell!r} (expected EXECUTED, NOT_RUN or OPTIMIZED_OUT)",
                        number,
                        field_column(text, columns["execstatus"], separator),
                        layer=name,
                    )
                if name in in_block:
                    raise fail(
                        path, f"layer {name!r} appears twice in one block", number, 1, layer=name
                    )
                in_block.add(name)
                layer = layers.get(name)
                if layer is None:
                    if len(layers) >= MAX_LAYERS:
                        raise fail(
                            path,
                            f"more than {MAX_LAYERS} distinct layers: this is not a per-layer profile",
                            number,
                        )
                    type_index = columns["layertype"]
                    layer = layers[name] = _Layer(
                        name, number, cells[type_index].strip() if type_index < len(cells) else ""
                    )
                if _RUN_STATUS[status]:
                    if not time_cell:
                        raise fail(
                            path,
                            f"missing {_TIME_COLUMNS[wanted]} for an executed layer",
                            number,
                            field_column(text, time_index, separator),
                            layer=name,
                        )
                    layer.executed = True
                    layer.samples.append(
                        self._ms(path, time_cell, number, text, time_index, separator, name)
                    )
        if not layers:
            raise fail(
                path,
                "no layer rows (expected benchmark_app counters: a header line, then one row per layer)",
            )
        notes = [
            f"times from column {_TIME_COLUMNS[wanted]!r}",
            f"{blocks} counters block(s) (infer requests)",
        ]
        if sorted_by_time:
            notes.append(
                "rows were sorted by time (sort_detailed_counters): order is not execution order"
            )
        timings = []
        for index, layer in enumerate(layers.values()):
            kind = layer.layer_type.lower()
            if not layer.executed:
                status = RefStatus.NOT_RUN
            elif kind in _OVERHEAD_TYPES:
                status = RefStatus.OVERHEAD
            elif kind in _INPUT_TYPES:
                status = RefStatus.INPUT
            else:
                status = RefStatus.TIMED
            stats = sample_stats(layer.samples) if layer.executed else {"count": 0}
            timings.append(
                ReferenceTiming(
                    engine=self.engine,
                    source=str(path),
                    index=index,
                    name=layer.name,
                    raw_type=layer.layer_type or None,
                    status=status,
                    time_kind=TimeKind.DEVICE,
                    line=layer.line,
                    **stats,  # type: ignore[arg-type]
                )
            )
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(timings),
            total_ms=sample_stats(totals).get("median_ms"),  # type: ignore[arg-type]
            notes=tuple(notes),
        )

    @staticmethod
    def _ms(
        path: Path, cell: str, line: int, text: str, index: int, separator: str, name: str
    ) -> float:
        where = (line, field_column(text, index, separator))
        try:
            value, unit = parse_number(cell, separator)
        except ValueError as exc:
            raise fail(path, f"{exc}: {cell!r}", *where, layer=name) from None
        if unit not in (None, "ms"):
            raise fail(path, f"unexpected unit in {cell!r}", *where, layer=name)
        if value < 0:
            raise fail(path, f"negative time {cell!r}", *where, layer=name)
        return value


READER = OpenVinoReader()
