"""Reading a per-layer timing CSV into layers and their samples (shared by sas and sas-prefix).

The file is streamed row by row, so a 100 MB export costs memory for its layers and samples
only. A header line names the columns (see csvsniff.classify). Rows are then:

- layer rows: a name and a time (input rows may have no time; nor may the rows of a
  cumulative file with an `inputs` column, whose untimed rows are cuts that could not be
  timed, kept for the graph's edges);
- footer rows (`Summary`, `Total…` in the name, id or first column; or rows without a name
  and without a time, like DLPy's "Total number of parameters" line): not layers; a time in
  a footer row becomes the profile's total;
- blank lines and lines starting with `#` are skipped.

With a run column (`run`, `iteration`, …) every row is one sample of one layer: samples are
grouped per layer, the first `skip_runs` runs (in order of first appearance) are dropped as
warm-up, and statistics are computed from the rest. Without one, each layer appears once,
and a second row with the same name (ignoring case, as SAS does) is an error.
"""

from __future__ import annotations

import csv
import re
import statistics
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from opbench.errors import InputError
from opbench.reference.csvlayout import Layout, choose_layout
from opbench.reference.csvsniff import (
    Column,
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
_FOOTER_START = frozenset("sStToOaAmMwWeE ")
_INPUT_NAME = re.compile(r"^input(layer)?[_\-\s]*\d*$", re.IGNORECASE)
_INPUT_TYPES = frozenset({"input", "inputlayer", "input layer", "placeholder", "parameter"})


@dataclass
class TableLayer:
    """One layer of the table, before it becomes a ReferenceTiming."""

    name: str
    line: int
    raw_type: str | None
    activation: str | None
    output_size: str | None
    inputs: str | None = None  # the `inputs` cell: what this layer reads (a graph's edges)
    status: str | None = None  # the `status` cell
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
    has_inputs: bool = False  # an `inputs` column: the rows are the cuts of a graph


def is_input_layer(layer: TableLayer) -> bool:
    """An input/placeholder row: DLPy type `input`, or no type and a name like `InputLayer_1`."""
    if layer.raw_type is not None:
        return layer.raw_type.strip().lower() in _INPUT_TYPES
    return bool(_INPUT_NAME.match(layer.name))


def _is_footer(text: str) -> bool:
    return bool(text) and text[0] in _FOOTER_START and bool(_FOOTER.match(text))


class _TableReader:
    def __init__(self, path: Path, options: ReaderOptions, cumulative: bool) -> None:
        self.path = path
        self.options = options
        self.cumulative = cumulative
        self.notes: list[str] = []
        self.header_line = 0
        self._rows: Any = None  # the csv reader, for line numbers in decoding errors

    # -- header and columns -----------------------------------------------------------------

    def _read_header(self, stream: TextIO) -> list[Column]:
        number = 0
        for raw in iter(stream.readline, ""):
            number += 1
            if raw.strip() and not raw.lstrip().startswith("#"):
                break
        else:
            raise fail(self.path, "the file holds no header line (it is empty or only comments)")
        separator = detect_separator(raw)
        if separator is None:
            raise fail(
                self.path,
                "cannot find a column separator in the header line (expected ',', ';' or tab)",
                number,
                1,
            )
        self.separator, self.header_line, self.header_raw = separator, number, raw
        header = next(csv.reader([raw], delimiter=separator, skipinitialspace=True))
        return [classify(i, cell) for i, cell in enumerate(header)]

    def _at_header(self, message: str, column: Column | None = None) -> InputError:
        if column is None:
            return fail(self.path, message, self.header_line, 1)
        where = field_column(self.header_raw, column.index, self.separator)
        return fail(self.path, message, self.header_line, where, field=column.header)

    # -- rows ---------------------------------------------------------------------------------

    def read(self) -> LayerTable:
        with open_text(self.path) as stream:
            try:
                columns = self._read_header(stream)
                layout = choose_layout(
                    columns, self.options, self.cumulative, self.notes, self._at_header
                )
                rows = csv.reader(
                    stream, delimiter=self.separator, skipinitialspace=True, strict=True
                )
                self._rows = rows
                return self._read_rows(rows, layout, len(columns))
            except UnicodeDecodeError as exc:
                line = self.header_line + (self._rows.line_num if self._rows else 0) + 1
                raise fail(self.path, f"not valid {exc.encoding} text", line) from None
            except csv.Error as exc:
                line = self.header_line + (self._rows.line_num if self._rows else 0)
                raise fail(self.path, f"malformed CSV: {exc}", line) from None

    def _bad(self, message: str, line: int, column: Column, name: str = "") -> InputError:
        """An error at one cell (its character column found by re-reading that line)."""
        raw = ""
        with open_text(self.path) as stream:
            for number, text in enumerate(stream, start=1):
                if number == line:
                    raw = text
                    break
        where = field_column(raw, column.index, self.separator)
        return fail(self.path, message, line, where, layer=name or None, field=column.header)

    def _number(
        self, cells: list[str], column: Column, unit: str | None, line: int, name: str
    ) -> float | None:
        cell = cells[column.index].strip()
        if not cell:
            return None
        try:
            value, cell_unit = parse_number(cell, self.separator)
        except ValueError as exc:
            raise self._bad(
                f"{exc} in column {column.header!r}: {cell!r}", line, column, name
            ) from None
        if value < 0:
            raise self._bad(
                f"negative time {cell!r} in column {column.header!r}", line, column, name
            )
        if column.stat == Stat.COUNT:
            if value != int(value) or value < 1:
                raise self._bad(f"count {cell!r} is not a whole number >= 1", line, column, name)
            return value
        unit = cell_unit or unit
        if unit is None:
            raise self._at_header(
                f"cannot tell the unit of column {column.header!r}: write it in the header "
                f"(e.g. '{column.header} (ms)') or pass --unit s|ms|us|ns",
                column,
            )
        return value * UNIT_TO_MS[unit]

    def _read_rows(self, rows: Any, layout: Layout, width: int) -> LayerTable:
        layers: dict[str, TableLayer] = {}
        run_order: dict[object, int] = {}
        skip = self.options.skip_runs if layout.run is not None else 0
        footer_totals: list[float] = []
        name_i, time_col, time_unit = (
            layout.name.index,
            layout.time,
            layout.units[layout.time.index],
        )
        ident_i = layout.ident.index if layout.ident is not None else None
        run_i = layout.run.index if layout.run is not None else None
        extra_cols = [
            (stat, column, layout.units[column.index]) for stat, column in layout.stats.items()
        ]
        header_line = self.header_line

        time_i = time_col.index
        time_scale = UNIT_TO_MS[time_unit] if time_unit is not None else None
        infinity = float("inf")
        footer_start = _FOOTER_START

        for cells in rows:
            if len(cells) < width:
                if not cells:
                    continue
                cells += [""] * (width - len(cells))
            name = cells[name_i].strip()
            lead = cells[0]
            if (
                (name[:1] in footer_start and _is_footer(name))
                or (lead[:1] in footer_start and _is_footer(lead.strip()))
                or (
                    ident_i is not None
                    and cells[ident_i][:1] in footer_start
                    and _is_footer(cells[ident_i].strip())
                )
            ):
                total = self._number(cells, time_col, time_unit, header_line + rows.line_num, "")
                if total is not None:
                    footer_totals.append(total)
                continue
            if not name or name[0] == "#":
                if name[:1] == "#" or lead.lstrip().startswith("#"):
                    continue  # a comment line
                if cells[time_i].strip():
                    raise self._bad(
                        "a row with a time but no layer name",
                        header_line + rows.line_num,
                        layout.name,
                    )
                continue  # a blank row, or DLPy's "Total number of parameters" line
            kept, run_key = True, None
            if run_i is not None:
                run_text = cells[run_i].strip()
                if not run_text:
                    raise self._bad(
                        "missing run number", header_line + rows.line_num, layout.run, name
                    )  # type: ignore[arg-type]
                run_key = int(run_text) if run_text.isdigit() else run_text
                kept = run_order.setdefault(run_key, len(run_order)) >= skip
            key = name.casefold()
            layer = layers.get(key)
            if layer is None:
                line = header_line + rows.line_num
                if len(layers) >= MAX_LAYERS:
                    raise fail(
                        self.path,
                        f"more than {MAX_LAYERS} distinct layers: this is not a per-layer profile",
                        line,
                    )
                layer = layers[key] = TableLayer(
                    name=name,
                    line=line,
                    raw_type=_cell(cells, layout.layer_type),
                    activation=_cell(cells, layout.activation),
                    output_size=_cell(cells, layout.output),
                    inputs=_cell(cells, layout.inputs),
                    status=_cell(cells, layout.status),
                )
            elif run_i is None or run_key in layer.runs:
                again = f" in run {run_key}" if run_i is not None else ""
                case = (
                    ""
                    if layer.name == name
                    else f" ({layer.name!r} and {name!r} differ only in case, which SAS does not keep)"
                )
                message = f"duplicate layer name {name!r}{again} (first on line {layer.line}){case}"
                raise self._bad(message, header_line + rows.line_num, layout.name, name)
            if run_i is not None:
                layer.runs.add(run_key)
            cell = cells[time_i]
            try:  # fast path: a plain number in a column whose unit is known
                value = float(cell)
                plain = time_scale is not None and 0.0 <= value < infinity and "_" not in cell
            except ValueError:
                plain = False
            if plain:
                value *= time_scale  # type: ignore[operator]
            else:
                value = self._number(cells, time_col, time_unit, header_line + rows.line_num, name)  # type: ignore[assignment]
            if value is None:
                if not is_input_layer(layer) and not (self.cumulative and layout.inputs):
                    message = f"missing time in column {time_col.header!r}"
                    raise self._bad(message, header_line + rows.line_num, time_col, name)
            elif kept:
                layer.samples.append(value)
            for stat, column, unit in extra_cols:
                extra = self._number(cells, column, unit, header_line + rows.line_num, name)
                if extra is not None:
                    layer.extras[stat] = extra

        if not layers:
            raise fail(self.path, "no layer rows after the header", header_line)
        runs_total = len(run_order)
        if layout.run is not None and runs_total <= skip:
            raise fail(
                self.path,
                f"the file holds {runs_total} run(s) and the first {skip} are skipped as warm-up, "
                f"which leaves none; pass --skip-runs {max(runs_total - 1, 0)} (or 0) to keep some",
            )
        if skip:
            self.notes.append(f"dropped the first {skip} of {runs_total} runs as warm-up")
        return LayerTable(
            path=self.path,
            time_column=time_col,
            has_runs=layout.run is not None,
            runs_total=runs_total,
            runs_kept=runs_total - skip,
            layers=list(layers.values()),
            total_ms=statistics.median(footer_totals) if footer_totals else None,
            notes=self.notes,
            has_inputs=layout.inputs is not None,
        )


def _cell(cells: list[str], column: Column | None) -> str | None:
    return (cells[column.index].strip() or None) if column is not None else None


def read_layer_table(path: Path, options: ReaderOptions, *, cumulative: bool) -> LayerTable:
    """Read a per-layer CSV; `cumulative` picks prefix (sas-prefix) or per-layer (sas) times."""
    return _TableReader(path, options, cumulative).read()
