"""Understanding hand-made timing CSVs: separator, header meaning, units, numbers.

Users export per-layer times from spreadsheets, pandas or SAS in many dialects:

- separators `,` `;` or tab (the header line decides: the most frequent one outside quotes);
- decimal commas ("0,52") where the separator is not a comma; thousands separators
  ("1,234.5", "1.234,5", "1 234,5"); a unit after the number ("0.52 ms");
- headers that name a role and often a unit: `Time(s)`, `Time (ms)`, `time_ms`, `Elapsed`,
  `Time [µs]`, `Duration`, `median_ms`, `Std (ms)`, `Count`, `Prefix time (ms)`.

`classify(header)` turns one header cell into a `Column` (role, statistic, unit, cumulative);
`parse_number(cell, separator)` turns one cell into a float and the unit the cell names, if any.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass

from opbench.reference.interface import normalize_unit

SEPARATORS = ("\t", ";", ",", "|")  # tie-break order when counts are equal


class Role:
    NAME = "name"  # the layer's name
    ID = "id"  # a layer number (DLPy "Layer Id"); used to recognise footer rows
    TYPE = "type"  # the engine's layer type
    ACTIVATION = "activation"  # an activation fused into the layer (DLPy "Activation")
    OUTPUT = "output"  # the layer's output size/shape
    RUN = "run"  # run / iteration number: one row per (layer, run) sample
    INPUTS = "inputs"  # the layers (or model inputs) the row's layer reads: a graph's edges
    STATUS = "status"  # free text on the row: why it was not timed, a substitution
    VALUE = "value"  # a number: a time statistic or a count
    OTHER = "other"  # anything else (FLOPS, parameters, percentages): ignored


class Stat:
    TIME = "time"  # a time of unstated statistic (one sample, or a mean if a count says so)
    MEDIAN = "median"
    MEAN = "mean"
    MIN = "min"
    MAX = "max"
    STD = "std"  # any spread (std, IQR, MAD): becomes noise_ms
    TOTAL = "total"
    COUNT = "count"


@dataclass(frozen=True)
class Column:
    """What one header cell means."""

    index: int  # 0-based position in the row
    header: str  # as written (stripped)
    role: str  # a Role
    stat: str | None = None  # a Stat, for VALUE columns
    unit: str | None = None  # "s" | "ms" | "us" | "ns" from the header, if it names one
    cumulative: bool = False  # a cumulative / prefix time (sas-prefix)


def _phrases(*texts: str) -> frozenset[tuple[str, ...]]:
    return frozenset(tuple(t.split()) for t in texts)


_NAME = _phrases(
    "layer", "layer name", "layername", "layer names", "name", "node", "node name", "op name",
    "module", "module name", "operator", "operator name", "block",
)  # fmt: skip
_ID = _phrases("layer id", "id", "index", "idx", "layer index", "layer no", "#", "no")
_TYPE = _phrases(
    "type", "layer type", "op", "op type", "optype", "kind", "node type", "operator type"
)
_ACTIVATION = _phrases("activation", "act", "activation function")
_OUTPUT = _phrases("output size", "output shape", "out shape", "shape", "output dims", "output")
_INPUTS = _phrases("inputs", "src layers", "source layers", "producers", "input layers")
_STATUS = _phrases("status", "error", "note", "notes", "remark")
_RUN = _phrases(
    "run", "run id", "run no", "run number", "iteration", "iter", "iteration id", "rep",
    "repeat", "repetition", "sample", "trial", "step", "round",
)  # fmt: skip

_STAT_WORDS: dict[str, str] = {
    "median": Stat.MEDIAN, "p50": Stat.MEDIAN, "med": Stat.MEDIAN,
    "mean": Stat.MEAN, "avg": Stat.MEAN, "average": Stat.MEAN,
    "min": Stat.MIN, "minimum": Stat.MIN, "best": Stat.MIN, "fastest": Stat.MIN,
    "max": Stat.MAX, "maximum": Stat.MAX, "worst": Stat.MAX, "slowest": Stat.MAX,
    "std": Stat.STD, "stdev": Stat.STD, "stddev": Stat.STD, "sd": Stat.STD, "sigma": Stat.STD,
    "spread": Stat.STD, "deviation": Stat.STD, "iqr": Stat.STD, "mad": Stat.STD,
    "total": Stat.TOTAL, "sum": Stat.TOTAL,
    "count": Stat.COUNT, "n": Stat.COUNT, "samples": Stat.COUNT, "runs": Stat.COUNT,
    "repeats": Stat.COUNT, "iterations": Stat.COUNT, "calls": Stat.COUNT, "reps": Stat.COUNT,
}  # fmt: skip
_TIME_WORDS = frozenset(
    "time times elapsed duration latency runtime wall wallclock walltime clock".split()
)
_CUMULATIVE_WORDS = frozenset(
    "cumulative cum cumul cumsum prefix running accumulated upto truncated through".split()
)
_IGNORED_WORDS = frozenset(
    "%  percent percentage pct share ratio relative rel flops gflops".split()
)

_BRACKETED = re.compile(r"[(\[{]\s*([^)\]}]*?)\s*[)\]}]")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_TOKEN = re.compile(r"[a-z0-9µμ%#]+")


def classify(index: int, header: str) -> Column:
    """The meaning of one header cell."""
    text = header.strip()
    unit: str | None = None
    for inner in _BRACKETED.findall(text):
        unit = unit or normalize_unit(inner)
    tokens = _TOKEN.findall(_CAMEL.sub(r"\1 \2", _BRACKETED.sub(" ", text)).lower())
    words: list[str] = []
    for token in tokens:
        token_unit = normalize_unit(token)
        if token_unit is not None and (token != "s" or len(tokens) > 1):
            unit = unit or token_unit
        else:
            words.append(token)
    phrase = tuple(words)
    bracket_words = [w for inner in _BRACKETED.findall(text) for w in _TOKEN.findall(inner.lower())]
    if not phrase and unit is None:
        return Column(index, text, Role.OTHER)
    if _IGNORED_WORDS.intersection(words) or _IGNORED_WORDS.intersection(bracket_words):
        return Column(index, text, Role.OTHER)
    if unit is None:
        for role, phrases in (
            (Role.NAME, _NAME),
            (Role.ID, _ID),
            (Role.TYPE, _TYPE),
            (Role.ACTIVATION, _ACTIVATION),
            (Role.OUTPUT, _OUTPUT),
            (Role.RUN, _RUN),
            (Role.INPUTS, _INPUTS),
            (Role.STATUS, _STATUS),
        ):
            if phrase in phrases:
                return Column(index, text, role)
    cumulative = bool(_CUMULATIVE_WORDS.intersection(words))
    stat = next((_STAT_WORDS[w] for w in words if w in _STAT_WORDS), None)
    timed = bool(_TIME_WORDS.intersection(words)) or unit is not None
    if stat == Stat.COUNT and unit is None:
        return Column(index, text, Role.VALUE, Stat.COUNT)
    if stat == Stat.COUNT:
        stat = None  # "runs (ms)" is not a count
    if timed or (stat is not None and cumulative):
        return Column(index, text, Role.VALUE, stat or Stat.TIME, unit, cumulative)
    if len(words) == 1 and (stat is not None or cumulative):
        return Column(index, text, Role.VALUE, stat or Stat.TIME, unit, cumulative)  # "median"
    return Column(index, text, Role.OTHER)


def detect_separator(line: str) -> str | None:
    """The separator of a header line: the most frequent candidate outside quotes."""
    counts = dict.fromkeys(SEPARATORS, 0)
    quoted = False
    for char in line:
        if char == '"':
            quoted = not quoted
        elif not quoted and char in counts:
            counts[char] += 1
    best = max(SEPARATORS, key=lambda s: (counts[s], -SEPARATORS.index(s)))
    return best if counts[best] else None


def field_column(line: str, field_index: int, separator: str) -> int:
    """1-based character column where field `field_index` (0-based) starts in `line`."""
    if field_index == 0:
        return 1
    quoted = False
    seen = 0
    for pos, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            seen += 1
            if seen == field_index:
                return pos + 2
    return len(line.rstrip("\r\n")) + 1


_SPACES = re.compile(r"[\s\u00a0\u2009\u202f']+")
_NUMBER_AND_UNIT = re.compile(r"^([+-]?[0-9.,]*[0-9](?:[eE][+-]?[0-9]+)?)([a-zA-Zµμ]*)$")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(,\d{3})+$")


def parse_number(cell: str, separator: str) -> tuple[float, str | None]:
    """(value, unit named in the cell or None). Raises ValueError with a reason.

    Decimal commas are read where the separator is not a comma; with a comma separator a
    quoted "1,234" is a thousands grouping. NaN and infinities are refused.
    """
    try:
        value = float(cell)
    except ValueError:
        value, unit = _parse_slow(cell, separator)
    else:
        unit = None
        if "_" in cell:  # float() accepts "1_000"; people do not write that
            raise ValueError("not a number")
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value, unit


def _parse_slow(cell: str, separator: str) -> tuple[float, str | None]:
    text = cell.strip()
    lowered = text.lower()
    if lowered in ("nan", "-nan", "+nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
        raise ValueError("not a finite number")
    text = _SPACES.sub("", text)
    match = _NUMBER_AND_UNIT.match(text)
    if not match:
        raise ValueError("not a number")
    number, unit_text = match.groups()
    unit = None
    if unit_text:
        unit = normalize_unit(unit_text)
        if unit is None:
            raise ValueError(f"unknown unit {unit_text!r}")
    mantissa, _, exponent = number.replace("E", "e").partition("e")
    if "," in mantissa and "." in mantissa:
        if mantissa.rfind(",") > mantissa.rfind("."):  # 1.234,5
            mantissa = mantissa.replace(".", "").replace(",", ".")
        else:  # 1,234.5
            mantissa = mantissa.replace(",", "")
    elif "," in mantissa:
        if separator == "," and _GROUPED.match(mantissa):
            mantissa = mantissa.replace(",", "")
        elif mantissa.count(",") == 1:
            mantissa = mantissa.replace(",", ".")
        elif _GROUPED.match(mantissa):
            mantissa = mantissa.replace(",", "")
        else:
            raise ValueError("not a number")
    elif mantissa.count(".") > 1:
        if not re.match(r"^[+-]?\d{1,3}(\.\d{3})+$", mantissa):
            raise ValueError("not a number")
        mantissa = mantissa.replace(".", "")  # 1.234.567 (European grouping)
    value = float(mantissa + ("e" + exponent if exponent else ""))
    return value, unit


def header_columns(head: str) -> list[Column] | None:
    """The classified columns of the first header line in `head`, or None if it is not a CSV
    header (JSON, a single column, no separator). Used by the CSV readers' sniff()."""
    for raw in head.lstrip("\ufeff").splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw.lstrip()[:1] in ("[", "{"):
            return None
        separator = detect_separator(raw)
        if separator is None:
            return None
        cells = next(csv.reader([raw], delimiter=separator, skipinitialspace=True))
        return [classify(i, cell) for i, cell in enumerate(cells)]
    return None


_SHAPE_SPLIT = re.compile(r"[,x×*\s]+")


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """'(28, 28, 64)', '[1, 64]', '28x28x64' or '2' -> a tuple of ints; None if not a shape."""
    if not text:
        return None
    inner = text.strip().strip("()[]{} ")
    if not inner:
        return None
    parts = [p for p in _SHAPE_SPLIT.split(inner) if p]
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)
