"""ONNX Runtime profiles (format `onnxruntime`): the JSON written by `enable_profiling`.

The file is a Chrome trace: a list of events. Those used here:

- `cat: "Session", name: "model_run"`: one window per `InferenceSession.run`;
- `cat: "Node", name: "<node>_kernel_time"`: one node's execution, `dur` in µs, with `args`
  (`op_name`, `provider`, `output_type_shape`; all values are strings in old ORT versions).
  `<node>_fence_before/after` events are ignored;
- `cat: "Kernel"` (ORT built with CUDA/ROCm profiling): GPU kernels, written right after the
  node that launched them; their durations summed give that node's device time.

The first `skip_runs` model_run windows are warm-up and dropped; each node's time per kept run
is summed (a node may run several times inside Loop/If) and aggregated across runs.

A node is its `node_index` (`graph_index` in old versions) and its name together, never the
name alone: nodes of one name are rows of their own, the one of the lowest index keeping the
name and each other named `<name>#<index>`, as the ONNX import names a later node of a name
already taken (importers/onnx/load.py `node_ids`; ONNX Runtime's index of a node it keeps is
its position in the file). A node with several events in one run (a Loop or Scan body, or,
without an index, maybe nodes of one name) is summed per run, said in a note and flagged
`repeated_in_run`: matching doubts such a row, so it never PASSes as one layer's time.

ORT rewrites the graph before running it, so the profile is not the ONNX graph:
- fused nodes: `FusedConv`/`FusedGemm` (an activation folded in) -> members ("Conv", act);
  a MatMul+Add turned into Gemm (`…/MatMulAddFusion`) -> members ("MatMul", "Add");
  old ORT and NCHWc layouts name the fused node after the activation's output
  (`r1_nchwc`, `Relu_3`): flagged `renamed_by_engine`;
- inserted nodes (layout reorders, memory copies, reshapes around Gemm) -> RefStatus.OVERHEAD.

Time kinds: node times are host clocks around synchronous CPU kernels (DEVICE for CPU
providers, where the host is the device); for GPU providers without Kernel events they are
launch times of asynchronous work (HOST, flagged `async_host_time`); Kernel sums are DEVICE.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from opbench.reference.aggregate import sample_stats
from opbench.reference.interface import SPIKE_RATIO, Flag, ReaderOptions
from opbench.reference.jsonstream import JsonEvents
from opbench.reference.model import Device, ReferenceProfile, ReferenceTiming, RefStatus, TimeKind
from opbench.reference.onnxruntime_nodes import (
    _input_shapes,
    _number,
    _shape,
    is_overhead,
    node_members,
)
from opbench.reference.textio import LineCounter, fail, read_json_text

_SUFFIX = "_kernel_time"
_GPU_PROVIDERS = frozenset(
    {
        "CUDAExecutionProvider",
        "ROCMExecutionProvider",
        "TensorrtExecutionProvider",
        "MIGraphXExecutionProvider",
        "DmlExecutionProvider",
        "WebGpuExecutionProvider",
        "JsExecutionProvider",
    }
)
# GPU providers launch asynchronously: their node times are host times of the launch.
_ASYNC_PROVIDERS = _GPU_PROVIDERS


@dataclass
class _Occurrence:
    """One `_kernel_time` event."""

    node: str
    ts: float
    dur_us: float
    op: str | None
    provider: str | None
    shape: tuple[int, ...] | None
    pos: int
    device_us: float = 0.0
    kernels: int = 0
    inputs: tuple[tuple[int, ...] | None, ...] = ()
    node_index: str | None = None  # ONNX Runtime's index of the node in its graph

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.node, self.node_index)


@dataclass
class _Node:
    name: str
    first_pos: int
    host_us: list[float] = field(default_factory=list)  # per kept run
    device_us: list[float] = field(default_factory=list)  # per kept run, where kernels ran
    ops: Counter = field(default_factory=Counter)
    providers: Counter = field(default_factory=Counter)
    shape: tuple[int, ...] | None = None
    inputs: tuple[tuple[int, ...] | None, ...] = ()
    repeated: int = 1  # the most events it had in one kept run


class OnnxRuntimeReader:
    name = "onnxruntime"
    engine = "onnxruntime"
    description = "ONNX Runtime profiler JSON (SessionOptions.enable_profiling)"

    def sniff(self, head: str) -> float:
        text = head.lstrip("\ufeff \t\r\n")
        if not text.startswith(("[", "{")) or '"cat"' not in text.replace(" ", ""):
            return 0.0
        if _SUFFIX in head or '"model_run"' in head or '"session_initialization"' in head:
            return 0.95
        return 0.0

    def read(self, path: Path, options: ReaderOptions) -> ReferenceProfile:
        if options.time_column is not None:
            raise fail(
                path,
                "--time-column does not apply to onnxruntime profiles (times are event durations)",
            )
        notes: list[str] = []
        if options.unit not in (None, "us"):
            raise fail(
                path, f"onnxruntime durations are in µs; --unit {options.unit} contradicts that"
            )
        text = read_json_text(path)
        lines = LineCounter(text)
        events = JsonEvents(path, text)
        runs: list[tuple[float, float]] = []
        occurrences: list[_Occurrence] = []
        last: _Occurrence | None = None
        for pos, event in events:
            if not isinstance(event, dict):
                raise fail(
                    path,
                    "an event that is not a JSON object",
                    lines.line_at(pos),
                    lines.column_at(pos),
                )
            category, name = event.get("cat"), event.get("name")
            if category == "Kernel" and last is not None:
                last.device_us += self._duration(path, event, pos, lines)
                last.kernels += 1
            elif category == "Session" and name == "model_run":
                ts = self._timestamp(path, event, pos, lines)
                runs.append((ts, ts + self._duration(path, event, pos, lines)))
            elif category == "Node" and isinstance(name, str) and name.endswith(_SUFFIX):
                args = event.get("args") if isinstance(event.get("args"), dict) else {}
                op, provider = args.get("op_name"), args.get("provider")
                last = _Occurrence(
                    node=name[: -len(_SUFFIX)],
                    ts=self._timestamp(path, event, pos, lines),
                    dur_us=self._duration(path, event, pos, lines),
                    op=op if isinstance(op, str) else None,
                    provider=provider if isinstance(provider, str) else None,
                    shape=_shape(args),
                    inputs=_input_shapes(args),
                    pos=pos,
                    node_index=_node_index(args),
                )
                occurrences.append(last)
            elif category == "Node" and not str(name).endswith(("_fence_before", "_fence_after")):
                last = None  # another node's event: Kernel events after it are not `last`'s
        if events.truncated:
            notes.append(
                "the file ends early (profiling interrupted?); read up to its last complete event"
            )
        if not occurrences:
            raise fail(
                path,
                "no node timings: expected events with cat 'Node' named '<node>_kernel_time' "
                "(write the profile with SessionOptions.enable_profiling = True)",
            )
        nodes, kept, outside = self._aggregate(path, occurrences, runs, options.skip_runs, notes)
        if outside:
            notes.append(f"{outside} node event(s) outside every model_run window were ignored")
        layers = self._timings(path, nodes, kept, lines)
        run_ms = sorted((end - start) / 1e3 for start, end in runs[options.skip_runs :])
        total = sample_stats(run_ms).get("median_ms") if runs else None
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(layers),
            total_ms=total,  # type: ignore[arg-type]
            notes=tuple(notes),
            device=_device(nodes.values()),
        )

    @staticmethod
    def _timestamp(path: Path, event: dict, pos: int, lines: LineCounter) -> float:
        value = _number(event.get("ts"))
        if value is None or not math.isfinite(value):
            raise fail(
                path,
                f"event {event.get('name')!r} has no numeric 'ts'",
                lines.line_at(pos),
                lines.column_at(pos),
            )
        return value

    @staticmethod
    def _duration(path: Path, event: dict, pos: int, lines: LineCounter) -> float:
        value = _number(event.get("dur"))
        name = event.get("name")
        if value is None or not math.isfinite(value):
            raise fail(
                path,
                f"event {name!r} has no numeric 'dur'",
                lines.line_at(pos),
                lines.column_at(pos),
            )
        if value < 0:
            raise fail(
                path,
                f"event {name!r} has a negative 'dur' ({value})",
                lines.line_at(pos),
                lines.column_at(pos),
            )
        return value

    @staticmethod
    def _aggregate(
        path: Path,
        occurrences: list[_Occurrence],
        runs: list[tuple[float, float]],
        skip: int,
        notes: list[str],
    ) -> tuple[dict[str, _Node], int, int]:
        held = f"the profile holds {len(runs)} model_run(s)"
        if not runs:
            start = min(o.ts for o in occurrences)
            runs = [(start, max(o.ts + o.dur_us for o in occurrences))]
            notes.append("no model_run events: all node events taken as one run")
            held = "the profile has no model_run events, so all its nodes count as one run,"
        runs.sort()
        if len(runs) <= skip:
            raise fail(
                path,
                f"{held} and the first {skip} are skipped as warm-up, which leaves none: "
                f"profile more runs, or pass --skip-runs {max(len(runs) - 1, 0)} "
                "(0 keeps the warm-up run)",
            )
        starts = [start for start, _ in runs]
        per_run: list[dict[str, list[_Occurrence]]] = [{} for _ in runs]
        outside = 0
        for occ in occurrences:
            i = bisect.bisect_right(starts, occ.ts) - 1
            if i < 0 or occ.ts > runs[i][1]:
                outside += 1
                continue
            per_run[i].setdefault(occ.key, []).append(occ)
        names = _identities(occurrences, notes)
        nodes: dict[str, _Node] = {}
        for run in per_run[skip:]:
            for key, occs in sorted(run.items(), key=lambda item: item[1][0].ts):
                node = nodes.get(names[key])
                if node is None:
                    node = nodes[names[key]] = _Node(name=names[key], first_pos=occs[0].pos)
                node.repeated = max(node.repeated, len(occs))
                node.host_us.append(sum(o.dur_us for o in occs))
                if any(o.kernels for o in occs):
                    node.device_us.append(sum(o.device_us for o in occs))
                for o in occs:
                    node.ops[o.op] += 1
                    node.providers[o.provider] += 1
                    node.shape = node.shape or o.shape
                    node.inputs = node.inputs or o.inputs
        notes += _repetition_notes(nodes.values(), any(o.node_index for o in occurrences))
        if skip:
            notes.append(f"dropped the first {skip} of {len(runs)} model_run(s) as warm-up")
        notes.append(f"{len(runs) - skip} run(s) aggregated")
        return nodes, len(runs) - skip, outside

    def _timings(
        self, path: Path, nodes: dict[str, _Node], kept: int, lines: LineCounter
    ) -> list[ReferenceTiming]:
        layers = []
        ordered = list(nodes.values())  # first kept run's order, then later newcomers
        line_of = {pos: lines.line_at(pos) for pos in sorted(n.first_pos for n in ordered)}
        for index, node in enumerate(ordered):
            op = node.ops.most_common(1)[0][0]
            provider = node.providers.most_common(1)[0][0]
            members, flags = node_members(node.name, op, node.inputs, node.shape)
            if node.device_us:
                samples, kind = node.device_us, TimeKind.DEVICE
            elif provider in _ASYNC_PROVIDERS:
                samples, kind = node.host_us, TimeKind.HOST
                flags = (*flags, Flag.ASYNC_HOST_TIME)
            else:
                samples, kind = node.host_us, TimeKind.DEVICE
            if len(node.host_us) < kept:
                flags = (*flags, Flag.MISSING_IN_SOME_RUNS)
            if node.repeated > 1:
                flags = (*flags, Flag.REPEATED_IN_RUN)
            if _spiky(samples):
                flags = (*flags, Flag.SPIKES)
            layers.append(
                ReferenceTiming(
                    engine=self.engine,
                    source=str(path),
                    index=index,
                    name=node.name,
                    raw_type=op,
                    members=members,
                    status=RefStatus.OVERHEAD if is_overhead(node.name, op) else RefStatus.TIMED,
                    time_kind=kind,
                    output_shape=node.shape,
                    line=line_of[node.first_pos],
                    flags=flags,
                    **sample_stats(s / 1e3 for s in samples),  # type: ignore[arg-type]
                )
            )
        return layers


def _node_index(args: dict) -> str | None:
    value = args.get("node_index", args.get("graph_index"))
    return None if value is None else str(value)


def _identities(
    occurrences: list[_Occurrence], notes: list[str]
) -> dict[tuple[str, str | None], str]:
    """The row name of each (name, node_index): the name, or `<name>#<index>` for each node
    but the one of the lowest index where several nodes share a name."""
    indexes: dict[str, set[str | None]] = {}
    for occ in occurrences:
        indexes.setdefault(occ.node, set()).add(occ.node_index)
    names = {}
    for name, found in indexes.items():
        ordered = sorted(found, key=lambda i: (i is not None, _as_number(i)))
        names[(name, ordered[0])] = name
        for index in ordered[1:]:
            names[(name, index)] = f"{name}#{index}"
        if len(ordered) > 1:
            notes.append(
                f"{len(ordered)} nodes are named {name!r} (node_index "
                f"{', '.join(str(i) for i in ordered)}): one row each, `{name}#<index>` for "
                "all but the first"
            )
    return names


def _as_number(index: str | None) -> float:
    try:
        return float(index) if index is not None else -1.0
    except ValueError:
        return math.inf


def _repetition_notes(nodes: Iterable[_Node], indexed: bool) -> list[str]:
    repeated = [node for node in nodes if node.repeated > 1]
    if not repeated:
        return []
    names = ", ".join(f"{n.name!r} ×{n.repeated}" for n in repeated[:5])
    more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
    why = (
        "a Loop or Scan body runs its nodes once per iteration"
        if indexed
        else "without a node_index, they may also be different nodes of one name"
    )
    return [
        f"{len(repeated)} node(s) have several events in one run ({names}{more}): {why}; "
        "each is timed as the sum per run and flagged repeated_in_run, so no verdict rests "
        "on it alone"
    ]


def _spiky(samples: list[float]) -> bool:
    ordered = sorted(samples)
    median = ordered[len(ordered) // 2] if ordered else 0.0
    return len(ordered) >= 3 and median > 0 and ordered[-1] > SPIKE_RATIO * median


def _device(nodes: Iterable[_Node]) -> str | None:
    """GPU when any node ran on a GPU provider or launched kernels, CPU when every node ran on
    the CPU provider, else unknown."""
    providers = {p for node in nodes for p in node.providers if p}
    if any(node.device_us for node in nodes) or providers & _GPU_PROVIDERS:
        return Device.GPU
    if providers == {"CPUExecutionProvider"}:
        return Device.CPU
    return None


READER = OnnxRuntimeReader()
