"""Which CSV column holds what: the layer name, the time, the statistics, their units.

csvsniff.classify says what each header cell could mean; this module chooses, for one file
and the user's options, the time column (median beats a plain time, which beats a mean;
`--time-column` beats all), the other statistics, and the unit of each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opbench.errors import InputError
from opbench.reference.csvsniff import Column, Role, Stat
from opbench.reference.interface import ReaderOptions

_TIME_PRIORITY = (Stat.MEDIAN, Stat.TIME, Stat.MEAN)

AtHeader = Callable[..., InputError]  # (message, column=None) -> the error to raise


@dataclass
class Layout:
    """The columns a table is read from (indices into each row)."""

    name: Column
    time: Column
    stats: dict[str, Column]
    units: dict[int, str | None]
    ident: Column | None
    layer_type: Column | None
    activation: Column | None
    output: Column | None
    run: Column | None
    inputs: Column | None = None  # a graph's edges (sas-prefix cuts): rows may lack a time
    status: Column | None = None


def _choose_time(
    columns: list[Column], options: ReaderOptions, cumulative: bool, at_header: AtHeader
) -> Column:
    headers = ", ".join(repr(c.header) for c in columns if c.header)
    wanted = options.time_column
    if wanted is not None:
        for column in columns:
            if column.header.strip().lower() == wanted.strip().lower():
                if column.role == Role.VALUE and column.stat != Stat.COUNT:
                    return column
                return Column(column.index, column.header, Role.VALUE, Stat.TIME, None, cumulative)
        raise at_header(f"no column {wanted!r}; the header has {headers}")
    values = [c for c in columns if c.role == Role.VALUE and c.stat in _TIME_PRIORITY]
    for stat in _TIME_PRIORITY:
        for column in values:
            if column.stat == stat and column.cumulative == cumulative:
                return column
    if cumulative:
        hint = "a header with 'cumulative' or 'prefix', e.g. 'Prefix time (ms)'"
        if values:
            hint += f"; {values[0].header!r} looks like a per-layer time: use --format sas"
    else:
        hint = "a header like 'Time (ms)', 'time_us', 'Elapsed' or 'Duration'"
        if values:
            hint += f"; {values[0].header!r} is a cumulative time: use --format sas-prefix"
    raise at_header(f"no time column ({hint}); the header has {headers}; or pass --time-column")


def choose_layout(
    columns: list[Column],
    options: ReaderOptions,
    cumulative: bool,
    notes: list[str],
    at_header: AtHeader,
) -> Layout:
    """Which column holds what, from the classified header and the user's options.

    `cumulative` asks for a prefix time column (sas-prefix) rather than a per-layer one;
    `notes` receives remarks for the profile; `at_header(message, column)` makes the error
    for a problem with the header.
    """
    by_role: dict[str, Column] = {}
    for column in columns:
        if column.role not in (Role.VALUE, Role.OTHER):
            by_role.setdefault(column.role, column)
    if Role.NAME not in by_role:
        headers = ", ".join(repr(c.header) for c in columns if c.header)
        raise at_header(
            f"no layer-name column (a header like 'Layer', 'name' or 'layer_name'); the header has {headers}"
        )
    time = _choose_time(columns, options, cumulative, at_header)
    stats: dict[str, Column] = {}
    for column in columns:
        if (
            column.role != Role.VALUE
            or column.index == time.index
            or column.stat in (Stat.TIME, time.stat)
        ):
            continue
        spread_or_count = column.stat in (Stat.STD, Stat.COUNT)
        if column.cumulative == cumulative or spread_or_count:
            # a spread labelled "prefix std" wins over a bare "std" in prefix files
            if column.stat not in stats or (column.cumulative and cumulative):
                stats[column.stat] = column  # type: ignore[index]
    run = by_role.get(Role.RUN)
    if run is not None and stats:
        ignored = ", ".join(repr(c.header) for c in stats.values())
        notes.append(f"one row per run: statistics come from the samples; ignored {ignored}")
        stats = {}
    units = {c.index: _unit(c, time, options, notes) for c in [time, *stats.values()]}
    return Layout(
        name=by_role[Role.NAME],
        time=time,
        stats=stats,
        units=units,
        ident=by_role.get(Role.ID),
        layer_type=by_role.get(Role.TYPE),
        activation=by_role.get(Role.ACTIVATION),
        output=by_role.get(Role.OUTPUT),
        run=run,
        inputs=by_role.get(Role.INPUTS),
        status=by_role.get(Role.STATUS),
    )


def _unit(column: Column, time: Column, options: ReaderOptions, notes: list[str]) -> str | None:
    option = options.unit
    if column.unit is None:
        return option or time.unit
    if option is not None and option != column.unit and column is time:
        notes.append(
            f"unit {option!r} from the options overrides {column.unit!r} of column {column.header!r}"
        )
        return option
    return column.unit
