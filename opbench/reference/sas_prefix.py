"""SAS prefix times: the model cut after each layer, timed whole (format `sas-prefix`).

Each row is the cut of a layer and everything it depends on, timed whole: the layer name and
the cut's time. An `inputs` column (as `opbench export sas` writes it) names what each layer
reads (earlier rows, or model inputs), and rows of type `input` are each model input's baseline
(the input passed through). Without that column the rows are a chain, as users write them when
they time the model cut after layer 1, after layer 2, …: each row reads the row before it (the
first, the model input). Layer times are solved from the cut times (prefix_graph.py,
docs/sas.md): on a chain, t_i = C_i - C_{i-1}. Rows without a time are cuts that were not
timed, and their `status` says why.

Those are DERIVED times, and they are fragile: noisy numbers subtracted. Each layer records
- noise_ms = √(Σ c² s²) over the cut times it combines (coefficients c = ±1; on a chain
  √(s_i² + s_{i-1}²)), where the file gives a spread s: a std column (the spread of the
  calls of one cut, kept as is: calls made back to back share the server's state, and the
  drift between cuts is larger), or, with a run column (`--rounds` of the SAS script: every
  cut timed again in turn), the standard error of the median over the rounds;
- flag `below_noise` when t < noise_ms, or, with no spread known, when t is under 2% of its
  cut's time (the run-to-run variation of a whole-model time is rarely smaller);
- flag `negative_difference` when t < 0 (the cut got faster by adding a layer).
The raw difference is kept even when negative; compare must look at the flags.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from opbench.reference.csvsniff import Role, Stat, header_columns
from opbench.reference.csvtable import LayerTable, TableLayer, is_input_layer, read_layer_table
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus, TimeKind
from opbench.reference.prefix_graph import CutRow, solve
from opbench.reference.sas import fused_members, table_notes
from opbench.spec.graph import INPUT

NOISE_FRACTION = 0.02  # without a spread: differences below 2% of the prefix are noise-level
NO_SPREAD = (
    "no spread column (std or per-run samples): no interval was available for the prefix "
    "differences, so a difference inside the noise cannot be told apart"
)
# The standard error of a median of n normal samples is about √(π/2) ≈ 1.2533 times that of
# their mean, σ/√n.
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)
# Student's t at 97.5% by degrees of freedom: a spread from few rounds is itself uncertain, so
# the standard error is widened by t / 1.96 (the 95% interval compare draws is then right).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}  # fmt: skip


def round_noise(samples: list[float]) -> float | None:
    """The uncertainty (as one standard deviation) of the median of independent rounds."""
    n = len(samples)
    if n < 2:
        return None
    t = next(_T975[df] for df in sorted(_T975, reverse=True) if df <= n - 1)
    return MEDIAN_EFFICIENCY * statistics.stdev(samples) / math.sqrt(n) * max(t, 1.96) / 1.96


def _cut_time(layer: TableLayer, table: LayerTable) -> tuple[float | None, float | None, int]:
    """(cut time, its spread, samples) of one row."""
    samples = list(layer.samples)
    if table.has_runs:
        cumulative = statistics.median(samples) if samples else None
        return cumulative, round_noise(samples), len(samples)
    if not samples:
        return None, None, 0
    count = int(layer.extras.get(Stat.COUNT, 1))
    return samples[0], layer.extras.get(Stat.STD), count


def _flags(difference: float, noise: float | None, cumulative: float) -> tuple[str, ...]:
    flags: tuple[str, ...] = ()
    threshold = noise if noise is not None else NOISE_FRACTION * cumulative
    if difference < 0:
        flags = (Flag.NEGATIVE,)
    if difference < threshold:
        flags = (*flags, Flag.BELOW_NOISE)
    return flags


class SasPrefixReader:
    name = "sas-prefix"
    engine = "sas"
    description = "CSV of cumulative times of the model truncated after each layer"

    def sniff(self, head: str) -> float:
        columns = header_columns(head)
        if not columns:
            return 0.0
        has_name = any(c.role == Role.NAME for c in columns)
        cumulative = any(
            c.role == Role.VALUE and c.cumulative and c.stat != Stat.STD for c in columns
        )
        return 0.85 if has_name and cumulative else 0.0

    def read(self, path: Path, options: ReaderOptions) -> ReferenceProfile:
        table = read_layer_table(path, options, cumulative=True)
        layers, notes, total = self._graph(path, table)
        if layers and all(layer.noise_ms is None for layer in layers):
            notes.append(NO_SPREAD)
        flagged = sum(bool({Flag.NEGATIVE, Flag.BELOW_NOISE} & set(x.flags)) for x in layers)
        if flagged:
            notes.append(f"{flagged} layer(s) flagged negative or within noise")
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(layers),
            total_ms=table.total_ms if table.total_ms is not None else total,
            notes=tuple(notes),
        )

    def _timing(self, path: Path, table: LayerTable, index: int, **fields) -> ReferenceTiming:
        value = fields.pop("value")
        as_mean = table.time_column.stat == Stat.MEAN
        return ReferenceTiming(
            engine=self.engine,
            source=str(path),
            index=index,
            time_kind=TimeKind.DERIVED,
            median_ms=None if as_mean else value,
            mean_ms=value if as_mean else None,
            **fields,
        )

    def _graph(
        self, path: Path, table: LayerTable
    ) -> tuple[list[ReferenceTiming], list[str], float | None]:
        rows = []
        counts: dict[str, int] = {}
        for index, layer in enumerate(table.layers):
            cumulative, spread, counts[layer.name] = _cut_time(layer, table)
            rows.append(
                CutRow(layer.name, _reads(table, index), cumulative, spread, is_input_layer(layer),
                       layer.line, layer.status)
            )  # fmt: skip
        solution = solve(rows, str(path))
        by_name = {layer.name: layer for layer in table.layers}
        layers = []
        for index, layer in enumerate(table.layers):
            row = rows[index]
            if row.is_input:
                layers.append(
                    self._timing(path, table, index, name=layer.name, raw_type=layer.raw_type,
                                 count=counts[layer.name], value=row.value, line=layer.line,
                                 noise_ms=row.spread, status=RefStatus.INPUT)
                )  # fmt: skip
                continue
            found = solution.derived.get(layer.name)
            if found is None:
                continue  # not derived, or measured with a later layer: in that row
            types = [by_name[m].raw_type or "" for m in found.members]
            # A row of one layer may be a SAS layer with its activation fused in (convo, Relu).
            fused, flags = ((), ())
            if len(found.members) == 1:
                fused, flags = fused_members(layer.raw_type, layer.activation)
            layers.append(
                self._timing(
                    path, table, index, name=" + ".join(found.members),
                    raw_type=" + ".join(types) or None, members=fused, count=counts[layer.name],
                    value=found.value, line=layer.line, noise_ms=found.noise,
                    flags=(*flags, *_flags(found.value, found.noise, found.cumulative)),
                    derived_from=found.terms,
                )
            )  # fmt: skip
        return layers, _graph_notes(table, rows, solution), _whole_model(rows)


def _reads(table: LayerTable, index: int) -> tuple[str, ...]:
    """What row `index` reads: its `inputs` cell; without that column (a chain of prefixes)
    the row before it, the first row the model input."""
    if table.has_inputs:
        return tuple((table.layers[index].inputs or "").split())
    return (table.layers[index - 1].name,) if index else (INPUT,)


def _graph_notes(table: LayerTable, rows: list[CutRow], solution) -> list[str]:
    notes = table_notes(table)
    if table.has_inputs:
        notes.append(
            "per-layer times are solved from the times of cuts (each layer and every layer it "
            "depends on, from the file's inputs column): a layer's time is its cut's time minus "
            "the input's baseline and the layers inside it (docs/sas.md)"
        )
    else:
        notes.append(
            "no inputs column: each row is the model cut after the row before it, so per-layer "
            "times are differences of consecutive cumulative prefix times"
        )
    together = [" + ".join(d.members) for d in solution.derived.values() if len(d.members) > 1]
    if together:
        notes.append(f"measured together (a cut inside was not timed): {'; '.join(together)}")
    if solution.not_derived:
        listed = "; ".join(f"{k} ({why})" for k, why in list(solution.not_derived.items())[:8])
        more = f"; … {len(solution.not_derived) - 8} more" if len(solution.not_derived) > 8 else ""
        notes.append(f"{len(solution.not_derived)} layer(s) have no SAS time: {listed}{more}")
    stand_ins: dict[str, list[str]] = {}  # why → the rows (35 ReLU6s are one note)
    for r in rows:
        if r.status and r.status.startswith("stand-in: "):
            stand_ins.setdefault(r.status[len("stand-in: ") :], []).append(r.name)
    for why, names in stand_ins.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        notes.append(f"timed with a stand-in in SAS ({why}): {len(names)} row(s): {shown}")
    for name in solution.inputs_without_baseline:
        notes.append(
            f"no timed baseline for input {name!r}: the fixed cost of a call is in the layers "
            "that read it first"
        )
    return notes


def _whole_model(rows: list[CutRow]) -> float | None:
    """The time of the cut that holds every layer, where one does (a model with one output)."""
    layers = [r for r in rows if not r.is_input]
    if not layers or layers[-1].value is None:
        return None
    last = layers[-1]
    read = {name for r in layers for name in r.reads}
    ends = [r.name for r in layers if r.name not in read]
    return last.value if ends == [last.name] else None


READER = SasPrefixReader()
