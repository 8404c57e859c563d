"""PyTorch profiler traces (format `torch-profiler`): a Kineto Chrome trace with one
`torch.profiler.record_function("<layer>")` range around each layer.

    with torch.profiler.profile(activities=[CPU, CUDA]) as prof:
        for _ in range(iters):
            with record_function("conv1"): y = conv1(x)
            ...
    prof.export_chrome_trace("trace.json")

The trace is `{"traceEvents": [...], ...}` (possibly gzip-compressed: `.json.gz`). Each range
appears as a complete event (`ph: "X"`, `ts`/`dur` in µs, floats):
- `cat: "user_annotation"`: the range on the host thread (HOST time);
- `cat: "gpu_user_annotation"`: the same range on the GPU stream, from its first kernel's
  start to its last kernel's end (DEVICE time). Preferred wherever a name has one.

`ProfilerStep#N` ranges are ignored. Ranges torch itself adds (`Optimizer.step#…`,
`Optimizer.zero_grad#…`, `enumerate(DataLoader)#…`) are kept as RefStatus.OVERHEAD.
Ranges with the same name (iterations, or a layer called twice) are aggregated in order of
first appearance. A range inside another range is flagged `nested_range` (times overlap).
`--time-column host|device` forces one category.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from opbench.reference.aggregate import sample_stats
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.jsonstream import JsonEvents
from opbench.reference.model import Device, ReferenceProfile, ReferenceTiming, RefStatus, TimeKind
from opbench.reference.textio import LineCounter, fail, read_json_text

HOST = "user_annotation"
DEVICE = "gpu_user_annotation"
_STEP = re.compile(r"^ProfilerStep#\d+$")
_TORCH_RANGES = re.compile(r"^(Optimizer\.(step|zero_grad)#|enumerate\(DataLoader\)#|## )")


@dataclass
class _Range:
    category: str
    name: str
    ts: float
    dur: float
    track: tuple[object, object]
    pos: int
    nested: bool = False


@dataclass
class _Layer:
    name: str
    first_ts: float
    first_pos: int
    ranges: dict[str, list[_Range]] = field(default_factory=lambda: {HOST: [], DEVICE: []})


def _mark_nested(ranges: list[_Range]) -> None:
    """Flag ranges that lie inside an earlier range on the same thread or stream."""
    by_track: dict[tuple[object, object], list[_Range]] = {}
    for r in ranges:
        by_track.setdefault((r.category, *r.track), []).append(r)  # type: ignore[arg-type]
    for track in by_track.values():
        track.sort(key=lambda r: (r.ts, -r.dur))
        open_ends: list[float] = []
        for r in track:
            while open_ends and open_ends[-1] <= r.ts:
                open_ends.pop()
            r.nested = bool(open_ends) and r.ts + r.dur <= open_ends[-1] + 1e-3
            open_ends.append(r.ts + r.dur)


class TorchProfilerReader:
    name = "torch-profiler"
    engine = "pytorch"
    description = "PyTorch profiler (Kineto) Chrome trace with record_function ranges per layer"

    def sniff(self, head: str) -> float:
        text = head.lstrip("\ufeff \t\r\n")
        if not text.startswith("{") or '"traceEvents"' not in text:
            return 0.0
        if any(
            marker in text
            for marker in ('"schemaVersion"', '"deviceProperties"', HOST, "ProfilerStep#")
        ):
            return 0.9
        return 0.6  # some Chrome trace: the reader explains what is missing

    def read(self, path: Path, options: ReaderOptions) -> ReferenceProfile:
        if options.unit not in (None, "us"):
            raise fail(
                path, f"Chrome trace times are in µs; --unit {options.unit} contradicts that"
            )
        force = None
        if options.time_column is not None:
            force = {"host": HOST, HOST: HOST, "device": DEVICE, "gpu": DEVICE, DEVICE: DEVICE}.get(
                options.time_column.strip().lower()
            )
            if force is None:
                raise fail(
                    path,
                    f"--time-column for torch-profiler must be host or device, not {options.time_column!r}",
                )
        text = read_json_text(path)
        lines = LineCounter(text)
        events = JsonEvents(path, text)
        if events.top != "{":
            raise fail(
                path,
                'expected a JSON object with "traceEvents" (torch.profiler export_chrome_trace)',
                1,
                1,
            )
        ranges: list[_Range] = []
        for pos, event in events:
            if (
                not isinstance(event, dict)
                or event.get("cat") not in (HOST, DEVICE)
                or event.get("ph") != "X"
            ):
                continue
            name = event.get("name")
            if not isinstance(name, str) or _STEP.match(name):
                continue
            ts, dur = event.get("ts"), event.get("dur")
            for key, value in (("ts", ts), ("dur", dur)):
                if (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or not math.isfinite(value)
                ):
                    raise fail(
                        path,
                        f"range {name!r} has no numeric {key!r}",
                        lines.line_at(pos),
                        lines.column_at(pos),
                        layer=name,
                    )
            if dur < 0:
                raise fail(
                    path,
                    f"range {name!r} has a negative duration {dur}",
                    lines.line_at(pos),
                    lines.column_at(pos),
                    layer=name,
                )
            ranges.append(
                _Range(
                    event["cat"],
                    name,
                    float(ts),
                    float(dur),
                    (event.get("pid"), event.get("tid")),
                    pos,
                )
            )
        if not ranges:
            raise fail(
                path,
                "no record_function ranges (cat 'user_annotation' / 'gpu_user_annotation', other "
                "than ProfilerStep#N): wrap each layer in torch.profiler.record_function('<name>')",
            )
        _mark_nested(ranges)
        layers: dict[str, _Layer] = {}
        for r in sorted(ranges, key=lambda r: r.ts):
            layer = layers.get(r.name)
            if layer is None:
                layer = layers[r.name] = _Layer(r.name, r.ts, r.pos)
            layer.ranges[r.category].append(r)
        notes = []
        if events.truncated:
            notes.append("the trace ends early; read up to its last complete event")
        used = {HOST: 0, DEVICE: 0}
        line_of = {
            pos: lines.line_at(pos) for pos in sorted(layer.first_pos for layer in layers.values())
        }
        timings = []
        for index, layer in enumerate(layers.values()):
            category = force or (DEVICE if layer.ranges[DEVICE] else HOST)
            chosen = layer.ranges[category]
            used[category] += 1
            flags = (Flag.NESTED,) if any(r.nested for r in chosen) else ()
            timings.append(
                ReferenceTiming(
                    engine=self.engine,
                    source=str(path),
                    index=index,
                    name=layer.name,
                    status=RefStatus.OVERHEAD
                    if _TORCH_RANGES.match(layer.name)
                    else RefStatus.TIMED,
                    time_kind=TimeKind.DEVICE if category == DEVICE else TimeKind.HOST,
                    line=line_of[layer.first_pos],
                    flags=flags,
                    **sample_stats(r.dur / 1e3 for r in chosen),  # type: ignore[arg-type]
                )
            )
        notes.append(f"{used[DEVICE]} layer(s) timed on the GPU stream, {used[HOST]} on the host")
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(timings),
            notes=tuple(notes),
            device=Device.GPU if used[DEVICE] else None,
        )


READER = TorchProfilerReader()
