"""TensorRT per-layer profiles (format `tensorrt`): `trtexec --exportProfile=FILE`.

The file is a JSON list. The first element is `{"count": N}`, the number of inferences
profiled; then one object per engine layer, in execution order:
`{"name", "timeMs", "averageMs", "medianMs", "percentage"}` (timeMs is the total over the N
inferences; older trtexec versions write no medianMs).

- Engine layers fuse ONNX nodes and join their names with " + " ("Conv_5 + Add_6 + Relu_7");
  pointwise fusions read "PWN(Add_6, Relu_7)". Both become `members`.
- TensorRT inserts format conversions ("Reformatting CopyNode for Input Tensor 0 to …") and
  shuffles around Gemm ("reshape_before_…", "reshape_after_…"): RefStatus.OVERHEAD.
- If `X.graph.json` (`trtexec --exportLayerInfo --profilingVerbosity=detailed`) lies beside
  `X.profile.json`, layer types and output shapes are taken from it (shapes include the batch).

Times are GPU times measured by trtexec per layer: TimeKind.DEVICE. The representative time
is medianMs where present, else averageMs; `--time-column averageMs` forces the mean.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from opbench.errors import InputError
from opbench.reference.interface import ReaderOptions
from opbench.reference.jsonstream import JsonEvents
from opbench.reference.model import Device, ReferenceProfile, ReferenceTiming, RefStatus, TimeKind
from opbench.reference.textio import LineCounter, fail, read_json_text

_OVERHEAD_NAME = re.compile(r"reformat|^(reshape_(before|after)_|shuffle_between_)", re.IGNORECASE)
_TIME_KEYS = ("medianMs", "averageMs")
_COUNT_HEAD = re.compile(r'^\[\s*\{\s*"count"\s*:\s*\d+\s*\}')


def split_members(name: str) -> tuple[str, ...]:
    """ONNX node names inside a fused TensorRT layer name; () for a single node."""
    parts: list[str] = []

    def expand(text: str) -> None:
        text = text.strip()
        if text.startswith("PWN(") and text.endswith(")"):
            depth, start, inner = 0, 0, text[4:-1]
            for i, char in enumerate(inner):
                depth += (char == "(") - (char == ")")
                if char == "," and depth == 0:
                    expand(inner[start:i])
                    start = i + 1
            expand(inner[start:])
        elif text:
            parts.append(text)

    for piece in name.split(" + "):
        expand(piece)
    return tuple(parts) if len(parts) > 1 else ()


def _graph_info(profile_path: Path, notes: list[str]) -> dict[str, dict[str, Any]]:
    """Layer name -> {"type", "shape"} from the sibling .graph.json, if there is one."""
    if not profile_path.name.endswith(".profile.json"):
        return {}
    graph_path = profile_path.with_name(profile_path.name[: -len(".profile.json")] + ".graph.json")
    if not graph_path.is_file():
        return {}
    try:
        text = read_json_text(graph_path)
        events = JsonEvents(graph_path, text, events_key="Layers")
        layers = [layer for _, layer in events]
    except InputError as exc:
        notes.append(f"ignored {graph_path.name}: {exc.message}")
        return {}
    info: dict[str, dict[str, Any]] = {}
    for layer in layers:
        if not isinstance(layer, dict) or not isinstance(layer.get("Name"), str):
            continue
        shape = None
        outputs = layer.get("Outputs")
        if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):
            dims = outputs[0].get("Dimensions")
            if isinstance(dims, list) and all(isinstance(d, int) for d in dims):
                shape = tuple(dims)
        layer_type = layer.get("LayerType")
        info[layer["Name"]] = {
            "type": layer_type if isinstance(layer_type, str) else None,
            "shape": shape,
        }
    notes.append(f"layer types and output shapes from {graph_path.name}")
    return info


class TensorRtReader:
    name = "tensorrt"
    engine = "tensorrt"
    description = "TensorRT trtexec --exportProfile JSON"

    def sniff(self, head: str) -> float:
        text = head.lstrip("\ufeff \t\r\n")
        if _COUNT_HEAD.match(text) and ('"averageMs"' in text or '"timeMs"' in text):
            return 0.95
        if _COUNT_HEAD.match(text):
            return 0.6
        return 0.0

    def read(self, path: Path, options: ReaderOptions) -> ReferenceProfile:
        if options.unit not in (None, "ms"):
            raise fail(path, f"trtexec profiles are in ms; --unit {options.unit} contradicts that")
        wanted = options.time_column
        if wanted is not None and wanted not in _TIME_KEYS:
            raise fail(
                path,
                f"--time-column for tensorrt must be one of {', '.join(_TIME_KEYS)}, not {wanted!r}",
            )
        text = read_json_text(path)
        lines = LineCounter(text)
        events = JsonEvents(path, text)
        if events.top != "[":
            raise fail(
                path,
                'expected a JSON list starting with {"count": N} (trtexec --exportProfile)',
                1,
                1,
            )
        notes: list[str] = []
        graph = _graph_info(path, notes)
        count: int | None = None
        layers: list[ReferenceTiming] = []
        seen: dict[str, int] = {}
        for pos, entry in events:
            line = lines.line_at(pos)
            where = (line, lines.column_at(pos))
            if not isinstance(entry, dict):
                raise fail(path, "an entry that is not a JSON object", *where)
            if count is None:
                value = entry.get("count")
                if (
                    "name" in entry
                    or not isinstance(value, int)
                    or isinstance(value, bool)
                    or value < 1
                ):
                    raise fail(path, 'the first entry must be {"count": N} with N >= 1', *where)
                count = value
                continue
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise fail(path, "a layer entry without a 'name'", *where)
            if name in seen:
                raise fail(
                    path,
                    f"layer {name!r} appears twice (first on line {seen[name]})",
                    *where,
                    layer=name,
                )
            seen[name] = line
            stats = {
                key: self._ms(path, entry, key, where, name)
                for key in ("timeMs", "averageMs", "medianMs")
            }
            mean = stats["averageMs"]
            if mean is None and stats["timeMs"] is not None:
                mean = stats["timeMs"] / count
            if mean is None and stats["medianMs"] is None:
                raise fail(
                    path,
                    f"layer {name!r} has none of timeMs, averageMs, medianMs",
                    *where,
                    layer=name,
                )
            median = None if wanted == "averageMs" else stats["medianMs"]
            info = graph.get(name, {})
            raw_type = info.get("type")
            overhead = bool(_OVERHEAD_NAME.search(name)) or raw_type == "Reformat"
            layers.append(
                ReferenceTiming(
                    engine=self.engine,
                    source=str(path),
                    index=len(layers),
                    name=name,
                    raw_type=raw_type,
                    members=() if overhead else split_members(name),
                    status=RefStatus.OVERHEAD if overhead else RefStatus.TIMED,
                    time_kind=TimeKind.DEVICE,
                    count=count,
                    median_ms=median,
                    mean_ms=mean,
                    total_ms=stats["timeMs"],
                    output_shape=info.get("shape"),
                    line=line,
                )
            )
        if count is None:
            raise fail(path, 'the file holds no entries (expected {"count": N} and layers)')
        if not layers:
            raise fail(path, 'the file holds no layer entries after {"count": N}')
        if events.truncated:
            notes.append("the file ends early; read up to its last complete entry")
        notes.append(f"{count} inference(s) profiled by trtexec")
        times = [layer.time_ms for layer in layers if layer.time_ms is not None]
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(layers),
            total_ms=sum(times) if times else None,
            notes=tuple(notes),
            device=Device.GPU,  # TensorRT runs on NVIDIA GPUs only
        )

    @staticmethod
    def _ms(path: Path, entry: dict, key: str, where: tuple[int, int], name: str) -> float | None:
        if key not in entry:
            return None
        value = entry[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise fail(
                path,
                f"{key} of layer {name!r} is not a finite number: {value!r}",
                *where,
                layer=name,
                field=key,
            )
        if value < 0:
            raise fail(
                path, f"{key} of layer {name!r} is negative: {value}", *where, layer=name, field=key
            )
        return float(value)


READER = TensorRtReader()
