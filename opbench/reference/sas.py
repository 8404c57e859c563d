"""SAS per-layer times: a CSV with one row per layer (format name `sas`).

SAS Viya deep learning has no built-in per-layer timing export. Users start from the layer
inventory DLPy prints (`Network.print_summary()`: `Layer Id, Layer, Type, Kernel Size,
Stride, Activation, Output Size, Number of Parameters, FLOPS(forward pass)`), time each layer
themselves, and save a CSV with an added time column. Any CSV with a layer-name column and a
time column is read the same way (see csvtable and csvsniff for the dialects understood).

SAS specifics kept for the matcher:
- names are kept as written (SAS lower-cases them; matching normalises later);
- an `input` layer row becomes RefStatus.INPUT;
- SAS fuses the activation into convolution, batch-norm and fully connected layers, and its
  `output` layer is fully connected + softmax: `members` lists the ops such a row covers,
  e.g. type `convo` with Activation `Relu` -> ("conv", "relu"); `output` -> ("fc", "softmax");
- `Output Size` "(28, 28, 64)" becomes output_shape as SAS writes it (height, width,
  channels; no batch).
"""

from __future__ import annotations

from pathlib import Path

from opbench.reference.aggregate import sample_stats
from opbench.reference.csvsniff import Role, Stat, header_columns, parse_shape
from opbench.reference.csvtable import LayerTable, TableLayer, is_input_layer, read_layer_table
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus, TimeKind

# SAS layer type -> the op it computes before its fused activation.
_FUSING_TYPES: dict[str, str] = {
    "convo": "conv",
    "conv": "conv",
    "convolution": "conv",
    "groupconvo": "conv",
    "transconvo": "transconv",
    "batchnorm": "batchnorm",
    "fc": "fc",
    "fullconnect": "fc",
    "output": "fc",
    "residual": "add",
}
# What SAS's act=AUTO means for each layer kind (our reading of the SAS documentation).
_AUTO_ACTIVATION: dict[str, str | None] = {"conv": "relu", "transconv": "relu", "fc": "relu"}
_NO_ACTIVATION = frozenset({"", "none", "identity", "linear"})


def fused_members(
    raw_type: str | None, activation: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(members, flags) for a SAS layer type and its Activation cell."""
    if raw_type is None:
        return (), ()
    kind_key = raw_type.strip().lower().replace(".", "").replace(" ", "")
    kind = _FUSING_TYPES.get(kind_key)
    if kind is None:
        return (), ()
    is_output = kind_key == "output"
    act = activation.strip().lower() if activation is not None else ("softmax" if is_output else "")
    flags: tuple[str, ...] = ()
    if act == "auto":
        flags = (Flag.ACTIVATION_AUTO,)
        act = "softmax" if is_output else (_AUTO_ACTIVATION.get(kind) or "")
    if act in _NO_ACTIVATION:
        return (), flags
    return (kind, act), flags


def _statistics(layer: TableLayer, table: LayerTable) -> dict[str, object]:
    """count/median/mean/min/max/total/noise for one layer, from samples or single values."""
    samples = layer.samples
    if table.has_runs:
        return sample_stats(samples)
    extras = layer.extras
    count = int(extras.get(Stat.COUNT, 1))
    stats: dict[str, object] = {
        "count": count if samples else 0,
        "median_ms": extras.get(Stat.MEDIAN),
        "mean_ms": extras.get(Stat.MEAN),
        "min_ms": extras.get(Stat.MIN),
        "max_ms": extras.get(Stat.MAX),
        "total_ms": extras.get(Stat.TOTAL),
        "noise_ms": extras.get(Stat.STD),
    }
    if samples:
        value = samples[0]
        kind = table.time_column.stat
        if kind == Stat.MEDIAN:
            stats["median_ms"] = value
        elif kind == Stat.MEAN or count > 1:
            stats["mean_ms"] = value  # one number standing for several samples: their mean
        else:
            stats["median_ms"] = stats["mean_ms"] = value
    return stats


def table_notes(table: LayerTable) -> list[str]:
    notes = [f"times from column {table.time_column.header!r}", *table.notes]
    if table.has_runs:
        notes.append(f"{table.runs_kept} run(s) kept of {table.runs_total}")
    return notes


class SasReader:
    name = "sas"
    engine = "sas"
    description = (
        "CSV of per-layer times (SAS DLPy layer summary plus a time column, or any layer/time CSV)"
    )

    def sniff(self, head: str) -> float:
        columns = header_columns(head)
        if not columns or len(columns) < 2:
            return 0.0
        roles = {c.role for c in columns}
        times = [c for c in columns if c.role == Role.VALUE and c.stat != Stat.COUNT]
        if Role.NAME in roles and any(not c.cumulative for c in times):
            dlpy = {Role.ID, Role.TYPE, Role.OUTPUT} <= roles
            return 0.8 if dlpy else 0.7
        if Role.NAME in roles or times:
            return 0.3  # a table of some kind: reading it explains what is missing
        return 0.0

    def read(self, path: Path, options: ReaderOptions) -> ReferenceProfile:
        table = read_layer_table(path, options, cumulative=False)
        layers = []
        shapes = 0
        for index, layer in enumerate(table.layers):
            members, flags = fused_members(layer.raw_type, layer.activation)
            stats = _statistics(layer, table)
            if table.has_runs and 0 < int(stats["count"]) < table.runs_kept:  # type: ignore[call-overload]
                flags = (*flags, Flag.MISSING_IN_SOME_RUNS)
            shape = parse_shape(layer.output_size)
            shapes += shape is not None
            layers.append(
                ReferenceTiming(
                    engine=self.engine,
                    source=str(path),
                    index=index,
                    name=layer.name,
                    raw_type=layer.raw_type,
                    members=members,
                    status=RefStatus.INPUT if is_input_layer(layer) else RefStatus.TIMED,
                    time_kind=TimeKind.HOST,
                    output_shape=shape,
                    line=layer.line,
                    flags=flags,
                    **stats,  # type: ignore[arg-type]
                )
            )
        notes = table_notes(table)
        if shapes:
            notes.append(
                "output_shape as written in the file (DLPy: height, width, channels; no batch)"
            )
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(layers),
            total_ms=table.total_ms,
            notes=tuple(notes),
        )


READER = SasReader()
