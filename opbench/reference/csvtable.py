"""Reading a per-layer timing CSV into layers and their samples (shared by sas and sas-prefix).

The file is streamed row by row, so a 100 MB export costs memory for its layers and samples
only. A header line names the columns (see csvsniff.classify). Rows are then:

- layer rows: a name and a time (or, for input rows, possibly no time);
- footer rows (`Summary`, `Total…` in the name, id or first column; or rows without a name
  and without a time, like DLPy's "Total number of parameters" line): not layers; a time in
  a footer row becomes the profile's total;
- blank lines and lines starting with `#` are skipped.

With a run column (`run`, `iteration`, …) every row is one sample of one layer: samples are
grouped per layer, the first `skip_runs` runs (in order of first appearance) are dropped as
warm-up, and statistics are computed from the rest. Without one, each layer appears once.
"""

from __future__ import annotations

import csv
import re
import statistics
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from opbench.reference.csvsniff import (
    Column,
    Role,
    Stat,
    classify,
    detect_separator,
    field_column,
    parse_number,
)
from opbench.reference.interface import MAX_LAYERS, UNIT_TO_MS, ReaderOptions
from opbench.reference.textio import fail, open_text

_FOOTER = re.compile(
    r"^(summary|totals?|total\b.*|sum|overall|all layers|model total|whole model|e2e|end.to.end)$",
    re.IGNORECASE,
)
_TIME_PRIORITY = (Stat.MEDIAN, Stat.TIME, Stat.MEAN)


@dataclass
class TableLayer:
    """One layer of the table, before it becomes a ReferenceTiming."""

    name: str
    line: int
    raw_type: str | None
    activation: str | None
    output_size: str | None
    samples: array = field(default_factory=lambda: array("d"))  # time column, ms
    extras: dict[str, float] = field(default_factory=dict)  # other statistics (ms; count as is)
    runs: set[object] = field(default_factory=set)


@dataclass
class LayerTable:
    path: Path
    time_column: Column
    has_runs: bool
    runs_total: int
    runs_kept: int
    layers: list[TableLayer]
    total_ms: float | None
    notes: list[str]


class _Lines:
    """The file's lines for csv.reader, skipping comments and remembering where we are."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.number = 0  # physical line number of the last line handed out
        self.current = ""

    def __iter__(self) -> Iterator[str]:
        for line in self._stream:
            self.number += 1
            if line.lstrip().startswith("#"):
                continue
            self.current = line
            yield line


def cells_of(column: Column | None, cells: list[str]) -> str:
    """The stripped cell of `column` in a row ('' where the row is short or there is no column)."""
    if column is None or column.index >= len(cells):
        return ""
    return cells[column.index].strip()


def median_or_none(values: array) -> float | None:
    return statistics.median(values) if len(values) else None


class _TableReader:
    def __init__(self, path: Path, options: ReaderOptions, cumulative: bool) -> None:
        self.path = path
        self.options = options
        self.cumulative = cumulative
        self.notes: list[str] = []

    # -- header ---------------------------------------------------------------------------

    def _header(self, lines: _Lines) -> tuple[str, list[Column], Iterator[list[str]]]:
        it = iter(lines)
        for raw in it:
            if raw.strip():
                break
        else:
            raise fail(self.path, "the file holds no header line (it is empty or only comments)")
        separator = detect_separator(raw)
        if separator is None:
            raise fail(
                self.path,
                "cannot find a column separator in the header line (expected ',', ';' or tab)",
                lines.number,
                1,
            )
        self.separator = separator
        self.header_line = lines.number
        self.header_raw = raw
        header = next(csv.reader([raw], delimiter=separator, skipinitialspace=True))
        columns = [classify(i, cell) for i, cell in enumerate(header)]
        rows = csv.reader(it, delimiter=separator, skipinitialspace=True)
        return separator, columns, rows

    def _where(self, column: Column) -> dict[str, object]:
        return {
            "line": self.header_line,
            "column": field_column(self.header_raw, column.index, self.separator),
            "field": column.header,
        }

    def _choose_time(self, columns: list[Column]) -> Column:
        headers = ", ".join(repr(c.header) for c in columns if c.header)
        wanted = self.options.time_column
        if wanted is not None:
            for column in columns:
                if column.header.strip().lower() == wanted.strip().lower():
                    if column.role == Role.VALUE and column.stat != Stat.COUNT:
                        return column
                    return Column(
                        column.index, column.header, Role.VALUE, Stat.TIME, None, self.cumulative
                    )
            raise fail(
                self.path, f"no column {wanted!r}; the header has {headers}", self.header_line, 1
            )
        values = [c for c in columns if c.role == Role.VALUE and c.stat in _TIME_PRIORITY]
        mine = [c for c in values if c.cumulative == self.cumulative]
        for stat in _TIME_PRIORITY:
            for column in mine:
                if column.stat == stat:
                    return column
        if self.cumulative:
            hint = "a header with 'cumulative' or 'prefix', e.g. 'Prefix time (ms)'"
            if values:
                hint += f"; {values[0].header!r} looks like a per-layer time: use --format sas"
        else:
            hint = "a header like 'Time (ms)', 'time_us', 'Elapsed' or 'Duration'"
            if values:
                hint += f"; {values[0].header!r} is a cumulative time: use --format sas-prefix"
        raise fail(
            self.path,
            f"no time column ({hint}); the header has {headers}; or pass --time-column",
            self.header_line,
            1,
        )

    def _unit(self, column: Column, time_column: Column) -> str | None:
        option = self.options.unit
        if column.unit is not None:
            if option is not None and option != column.unit and column is time_column:
                self.notes.append(
                    f"unit {option!r} from the options overrides {column.unit!r} of column {column.header!r}"
                )
                return option
            return column.unit
        if option is not None:
            return option
        return time_column.unit

    # -- rows -----------------------------------------------------------------------------

    def read(self) -> LayerTable:
        with open_text(self.path) as stream:
            lines = _Lines(stream)
            try:
                return self._read(lines)
            except UnicodeDecodeError as exc:
                raise fail(self.path, f"not valid {exc.encoding} text", lines.number + 1) from None
            except csv.Error as exc:
                raise fail(self.path, f"malformed CSV: {exc}", lines.number) from None

    def _read(self, lines: _Lines) -> LayerTable:
        path = self.path
        separator, columns, rows = self._header(lines)
        by_role: dict[str, Column] = {}
        for column in columns:
            if column.role not in (Role.VALUE, Role.OTHER):
                by_role.setdefault(column.role, column)
        name_col = by_role.get(Role.NAME)
        if name_col is None:
            headers = ", ".join(repr(c.header) for c in columns if c.header)
            raise fail(
                path,
                f"no layer-name column (a header like 'Layer', 'name' or 'layer_name'); the header has {headers}",
                self.header_line,
                1,
            )
        time_col = self._choose_time(columns)
        stat_cols: dict[str, Column] = {}
        for column in columns:
            if (
                column.role != Role.VALUE
                or column.index == time_col.index
                or column.stat in stat_cols
            ):
                continue
            if column.stat == Stat.TIME or (
                column.cumulative != self.cumulative and column.stat not in (Stat.STD, Stat.COUNT)
            ):
                continue
            if column.stat == time_col.stat:
                continue
            stat_cols[column.stat] = column  # type: ignore[index]
        if self.cumulative:  # a spread labelled "prefix std" wins over a bare "std"
            for column in columns:
                if column.role == Role.VALUE and column.stat == Stat.STD and column.cumulative:
                    stat_cols[Stat.STD] = column
                    break
        units = {c.index: self._unit(c, time_col) for c in [time_col, *stat_cols.values()]}
        run_col = by_role.get(Role.RUN)
        if run_col is not None and stat_cols:
            ignored = ", ".join(repr(c.header) for c in stat_cols.values())
            self.notes.append(
                f"one row per run: statistics come from the samples; ignored {ignored}"
            )
            stat_cols = {}

        def number(cells: list[str], column: Column, line: int, name: str) -> float | None:
            cell = cells[column.index].strip() if column.index < len(cells) else ""
            if not cell:
                return None
            try:
                value, cell_unit = parse_number(cell, separator)
            except ValueError as exc:
                raise fail(
                    path,
                    f"{exc} in column {column.header!r}: {cell!r}",
                    line,
                    field_column(lines.current, column.index, separator),
                    layer=name or None,
                    field=column.header,
                ) from None
            where = (line, field_column(lines.current, column.index, separator))
            if value < 0:
                raise fail(
                    path,
                    f"negative time {cell!r} in column {column.header!r}",
                    *where,
                    layer=name or None,
                    field=column.header,
                )
            if column.stat == Stat.COUNT:
                if value != int(value) or value < 1:
                    raise fail(
                        path,
                        f"count {cell!r} is not a whole number >= 1",
                        *where,
                        layer=name or None,
                        field=column.header,
                    )
                return value
            unit = cell_unit or units[column.index]
            if unit is None:
                raise fail(
                    path,
                    f"cannot tell the unit of column {column.header!r}: write it in the header "
                    f"(e.g. '{column.header} (ms)') or pass --unit s|ms|us|ns",
                    **self._where(column),  # type: ignore[arg-type]
                )
            return value * UNIT_TO_MS[unit]

        layers: dict[str, TableLayer] = {}
        run_order: dict[object, int] = {}
        skip = self.options.skip_runs if run_col is not None else 0
        footer_totals: list[float] = []
        id_col = by_role.get(Role.ID)
        type_col, act_col, out_col = (
            by_role.get(Role.TYPE),
            by_role.get(Role.ACTIVATION),
            by_role.get(Role.OUTPUT),
        )

        for cells in rows:
            line = lines.number
            if not cells or not any(c.strip() for c in cells):
                continue
            name = cells_of(name_col, cells)
            ident = cells_of(id_col, cells)
            first = cells[0].strip()
            if _FOOTER.match(name) or _FOOTER.match(ident) or _FOOTER.match(first):
                total = number(cells, time_col, line, "")
                if total is not None:
                    footer_totals.append(total)
                continue
            if not name:
                if cells_of(time_col, cells):
                    raise fail(
                        path,
                        "a row with a time but no layer name",
                        line,
                        field_column(lines.current, name_col.index, separator),
                        field=name_col.header,
                    )
                continue  # DLPy's "Total number of parameters" line and similar
            kept = True
            run_key: object = None
            if run_col is not None:
                run_text = cells_of(run_col, cells)
                if not run_text:
                    raise fail(
                        path,
                        "missing run number",
                        line,
                        field_column(lines.current, run_col.index, separator),
                        layer=name,
                        field=run_col.header,
                    )
                run_key = int(run_text) if run_text.isdigit() else run_text
                ordinal = run_order.setdefault(run_key, len(run_order))
                kept = ordinal >= skip
            key = name.casefold()
            layer = layers.get(key)
            if layer is None:
                if len(layers) >= MAX_LAYERS:
                    raise fail(
                        path,
                        f"more than {MAX_LAYERS} distinct layers: this is not a per-layer profile",
                        line,
                    )
                layer = TableLayer(
                    name=name,
                    line=line,
                    raw_type=cells_of(type_col, cells) or None,
                    activation=cells_of(act_col, cells) or None,
                    output_size=cells_of(out_col, cells) or None,
                )
                layers[key] = layer
            elif run_col is None or run_key in layer.runs:
                again = f" in run {run_key}" if run_col is not None else ""
                same = (
                    ""
                    if layer.name == name
                    else f" ({layer.name!r} and {name!r} differ only in case, which SAS does not keep)"
                )
                raise fail(
                    path,
                    f"duplicate layer name {name!r}{again} (first on line {layer.line}){same}",
                    line,
                    field_column(lines.current, name_col.index, separator),
                    layer=name,
                )
            if run_col is not None:
                layer.runs.add(run_key)
            value = number(cells, time_col, line, name)
            if value is None:
                if not _is_input(layer):
                    raise fail(
                        path,
                        f"missing time in column {time_col.header!r}",
                        line,
                        field_column(lines.current, time_col.index, separator),
                        layer=name,
                        field=time_col.header,
                    )
            elif kept:
                layer.samples.append(value)
            for stat, column in stat_cols.items():
                extra = number(cells, column, line, name)
                if extra is not None:
                    layer.extras[stat] = extra

        if not layers:
            raise fail(path, "no layer rows after the header", self.header_line)
        runs_total = len(run_order)
        if run_col is not None and runs_total <= skip:
            raise fail(
                path,
                f"the file holds {runs_total} run(s) and {skip} are skipped as warm-up, which leaves "
                f"none; pass --skip-runs {max(runs_total - 1, 0)} (or 0) to keep some",
            )
        if skip:
            self.notes.append(f"dropped the first {skip} of {runs_total} runs as warm-up")
        totals = array("d", footer_totals)
        return LayerTable(
            path=path,
            time_column=time_col,
            has_runs=run_col is not None,
            runs_total=runs_total,
            runs_kept=runs_total - skip,
            layers=list(layers.values()),
            total_ms=median_or_none(totals),
            notes=self.notes,
        )


_INPUT_NAME = re.compile(r"^input(layer)?[_\-\s]*\d*$", re.IGNORECASE)
_INPUT_TYPES = frozenset({"input", "inputlayer", "input layer", "placeholder", "parameter"})


def _is_input(layer: TableLayer) -> bool:
    if layer.raw_type is not None:
        return layer.raw_type.strip().lower() in _INPUT_TYPES
    return bool(_INPUT_NAME.match(layer.name))


def is_input_layer(layer: TableLayer) -> bool:
    """An input/placeholder row: DLPy type `input`, or no type and a name like `InputLayer_1`."""
    return _is_input(layer)


def read_layer_table(path: Path, options: ReaderOptions, *, cumulative: bool) -> LayerTable:
    """Read a per-layer CSV; `cumulative` picks prefix (sas-prefix) or per-layer (sas) times."""
    return _TableReader(path, options, cumulative).read()
