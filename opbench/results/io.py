"""The only JSON (de)serializer for run results.

Writes are atomic (temporary file + rename), so a run killed mid-write leaves the previous
complete file, never a half-written one.

A run.json holds every sample of every result (hundreds of thousands in a large suite), and
the run file is rewritten after every result so that nothing measured is lost. Re-encoding
all of it each time made that quadratic: 79 s of JSON for the first 49 results of
suites/gemm.yaml (20 MB). So each layer result is encoded once, to one line of compact JSON,
and `RunWriter` assembles the file from those lines; the run's other fields stay indented.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from opbench.errors import InputError, Location
from opbench.results.jsonfile import read_json_object
from opbench.results.model import SCHEMA_VERSION, Correctness, EndToEnd, LayerResult, RunResult
from opbench.time_bounds import MAX_TIME_MS, time_problem

RUN_FILE = "run.json"
LATEST = "latest"


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: store them as strings so a round trip keeps them."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _float(value: Any) -> float:
    return float(value)


class BadTime(ValueError):
    """A time in a run file that no timed call can take (0, negative, NaN, inf, above a day).
    Judged, it would be a speed-up of infinity or zero, or overflow the gate's statistics."""


def _whose(values: dict[str, Any]) -> str:
    parts = [values.get("model"), values.get("layer"), values.get("backend")]
    return "/".join(str(p) for p in parts if p is not None)


def _samples(values: dict[str, Any], where: str) -> tuple[tuple[float, ...], ...]:
    """The samples_ms rounds, each sample a time a call can take, else BadTime."""
    rounds = tuple(tuple(_float(t) for t in r) for r in values.get("samples_ms") or ())
    for i, samples in enumerate(rounds):
        if all(0.0 < t <= MAX_TIME_MS for t in samples):  # NaN fails every comparison
            continue
        j, bad = next((j, t) for j, t in enumerate(samples) if time_problem(t))
        raise BadTime(
            f"{where} ({_whose(values)}): samples_ms round {i + 1}, sample {j + 1} is {bad!r}, "
            f"{time_problem(bad)}: not a time a call took"
        )
    for name in ("host_ms", "stream_ms"):
        if values.get(name) is not None:
            value = values[name] = _float(values[name])
            if problem := time_problem(value):
                raise BadTime(f"{where} ({_whose(values)}): {name} is {value!r}, {problem}")
    return rounds


def result_to_dict(result: LayerResult | EndToEnd) -> dict[str, Any]:
    """One result as JSON-ready data. A layer's correctness also says `passed`, the outcome of
    its checks, so that a script reading run.json needs no rule of its own: a result with
    status "ok" whose output failed a check has `correctness.passed: false`."""
    data = asdict(result)
    if isinstance(result, LayerResult) and result.correctness is not None:
        data["correctness"]["passed"] = result.correctness.passed
    return _clean(data)


def run_to_dict(run: RunResult) -> dict[str, Any]:
    data = asdict(run)
    data["suite_spec"] = dict(run.suite_spec)
    data["env"] = dict(run.env)
    data["layers"] = [result_to_dict(r) for r in run.layers]
    data["end_to_end"] = [result_to_dict(e) for e in run.end_to_end]
    return _clean(data)


def _tuple_shape(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value or ())


# The fields every reader takes for text (names, keys of dictionaries, colours of plots): a
# hand-edited `"backend": null` would otherwise fail far from the file, as an AttributeError.
_TEXT = {
    LayerResult: ("model", "layer", "op", "backend", "status", "dtype"),
    EndToEnd: ("model", "backend", "status"),
    RunResult: ("suite", "started_at", "device"),
}
_MAPPINGS = ("suite_spec", "env", "origin", "options")


def _checked(kind: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    """`values`, once each text field of `kind` is text and each mapping a mapping."""
    for name in _TEXT[kind]:
        if not isinstance(values.get(name), str):
            raise ValueError(f"{where}: {name!r} is {json.dumps(values.get(name))}, not text")
    for name in _MAPPINGS:
        if name in values and not isinstance(values[name], dict):
            raise ValueError(f"{where}: {name!r} is not an object")
    return values


def _layer_from_dict(data: dict[str, Any], where: str = "layer result") -> LayerResult:
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an object")
    known = {f.name for f in fields(LayerResult)}
    values = _checked(LayerResult, {k: v for k, v in data.items() if k in known}, where)
    values["input_shape"] = _tuple_shape(values.get("input_shape"))
    values["output_shape"] = _tuple_shape(values.get("output_shape"))
    values["covers"] = tuple(values.get("covers") or ())
    values["samples_ms"] = _samples(values, where)
    values["correctness"] = _correctness(values.get("correctness"))
    return LayerResult(**values)


def _correctness(corr: dict[str, Any] | None) -> Correctness | None:
    if corr is None:
        return None
    limit = corr.get("max_abs_limit")
    return Correctness(
        rel_l2=_float(corr["rel_l2"]),
        max_abs=_float(corr["max_abs"]),
        nonfinite=int(corr["nonfinite"]),
        tolerance=_float(corr["tolerance"]),
        reference=corr.get("reference", "float64-cpu"),
        max_abs_limit=None if limit is None else _float(limit),
        unwritten=int(corr.get("unwritten", 0)),
        failures=tuple(corr.get("failures") or ()),
        loose_tolerance=bool(corr.get("loose_tolerance", False)),
        tolerance_of=corr.get("tolerance_of"),
    )


def _e2e_from_dict(data: dict[str, Any], where: str = "end-to-end result") -> EndToEnd:
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an object")
    known = {f.name for f in fields(EndToEnd)}
    values = _checked(EndToEnd, {k: v for k, v in data.items() if k in known}, where)
    values["samples_ms"] = _samples(values, where)
    # Older run files have neither: None, as for a row that was never checked.
    values["correctness"] = _correctness(values.get("correctness"))
    values["outputs"] = tuple(values.get("outputs") or ())
    return EndToEnd(**values)


def run_from_dict(data: dict[str, Any]) -> RunResult:
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {version!r} is not supported (this opbench reads {SCHEMA_VERSION})"
        )
    known = {f.name for f in fields(RunResult)}
    values = _checked(RunResult, {k: v for k, v in data.items() if k in known}, "the run")
    values["layers"] = tuple(
        _layer_from_dict(d, f"layers[{i}]") for i, d in enumerate(data.get("layers") or ())
    )
    values["end_to_end"] = tuple(
        _e2e_from_dict(d, f"end_to_end[{i}]") for i, d in enumerate(data.get("end_to_end") or ())
    )
    if values.get("shard") is not None:
        values["shard"] = tuple(values["shard"])
    return RunResult(**values)


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, allow_nan=False)
            fh.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# Stand in for the result lists while the rest of the run is encoded; never real values.
_SLOTS = {"layers": "\u0000opbench-layers\u0000", "end_to_end": "\u0000opbench-e2e\u0000"}


def _write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunWriter:
    """Writes one run file again and again as results arrive, encoding each result once.

    Results are frozen, so a result seen before (the same object) reuses its encoded line.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lines: dict[int, tuple[LayerResult | EndToEnd, str]] = {}

    def _line(self, result: LayerResult | EndToEnd) -> str:
        cached = self._lines.get(id(result))
        if cached is None or cached[0] is not result:
            cached = (result, json.dumps(result_to_dict(result), allow_nan=False))
            self._lines[id(result)] = cached
        return cached[1]

    def write(self, run: RunResult) -> None:
        head = run_to_dict(replace(run, layers=(), end_to_end=()))
        head.update(_SLOTS)
        text = json.dumps(head, indent=1, allow_nan=False)
        for name, slot in _SLOTS.items():
            lines = [self._line(result) for result in getattr(run, name)]
            listed = "[\n  " + ",\n  ".join(lines) + "\n ]" if lines else "[]"
            text = text.replace(json.dumps(slot), listed, 1)
        _write_text_atomic(self.path, text + "\n")


def write_run(run: RunResult, path: Path) -> None:
    RunWriter(path).write(run)


def read_run(path: Path | str) -> RunResult:
    """Read a run.json, or the run.json inside a run folder. Bad files raise InputError."""
    path = Path(path)
    if path.is_dir():
        path = path / RUN_FILE
    data = read_json_object(path, "run file")
    try:
        return run_from_dict(data)
    except BadTime as exc:  # measured-looking, but no call took that time: never judged
        raise InputError(str(exc), Location(file=str(path))) from None
    except ValueError as exc:  # the file's own mistakes, said in words
        raise InputError(f"not an opbench run: {exc}", Location(file=str(path))) from None
    except (AttributeError, KeyError, TypeError) as exc:
        raise InputError(
            f"not an opbench run: {type(exc).__name__}: {exc}", Location(file=str(path))
        ) from None


def utc_stamp(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def new_run_dir(out_root: Path, suite: str, stamp: str | None = None) -> Path:
    base = out_root / suite / (stamp or utc_stamp())
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    candidate.mkdir(parents=True)
    return candidate


def point_latest(run_dir: Path) -> None:
    """Make `<suite>/latest` point to run_dir: a relative symlink, or a text file where links fail."""
    link = run_dir.parent / LATEST
    tmp = run_dir.parent / f".{LATEST}.tmp"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:
        if link.is_symlink():
            link.unlink()
        link.write_text(run_dir.name + "\n", encoding="utf-8")


def resolve_latest(suite_dir: Path) -> Path | None:
    link = suite_dir / LATEST
    if link.is_symlink() or link.is_dir():
        target = link.resolve()
        return target if target.is_dir() else None
    if link.is_file():
        target = suite_dir / link.read_text(encoding="utf-8").strip()
        return target if target.is_dir() else None
    return None


def find_latest_run(reports_root: Path, suite: str | None = None) -> Path | None:
    """The newest run folder: of `suite` if given, else of any suite under reports_root."""
    if suite:
        return resolve_latest(reports_root / suite)
    candidates = []
    if reports_root.is_dir():
        for suite_dir in reports_root.iterdir():
            if suite_dir.is_dir():
                latest = resolve_latest(suite_dir)
                if latest and (latest / RUN_FILE).is_file():
                    candidates.append(latest)
    if not candidates:
        return None
    return max(candidates, key=lambda p: (p / RUN_FILE).stat().st_mtime)
