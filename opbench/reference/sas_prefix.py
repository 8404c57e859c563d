"""SAS prefix times: the model truncated after each layer, timed whole (format `sas-prefix`).

When an engine cannot time single layers, users time the model cut after layer 1, after
layer 2, … and write one row per cut: the layer name and the cumulative time of the model up
to and including it. A layer's own time is then the difference of consecutive prefixes:

    t_i = C_i - C_{i-1}        (C_{-1} = 0)

Those differences are DERIVED times, and they are fragile: two noisy numbers subtracted.
Each layer records
- noise_ms = sqrt(s_i² + s_{i-1}²) where the file gives a spread s (a std column, or the
  samples of a run column), the uncertainty of a difference of two independent measurements;
- flag `below_noise` when t_i < noise_ms, or, with no spread known, when t_i is under 2% of
  C_i (the run-to-run variation of a whole-model time is rarely smaller);
- flag `negative_difference` when t_i < 0 (the prefix got faster by adding a layer).
The raw difference is kept even when negative; compare must look at the flags.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from opbench.reference.csvsniff import Role, Stat, header_columns
from opbench.reference.csvtable import is_input_layer, read_layer_table
from opbench.reference.interface import Flag, ReaderOptions
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus, TimeKind
from opbench.reference.sas import fused_members, table_notes

NOISE_FRACTION = 0.02  # without a spread: differences below 2% of the prefix are noise-level
NO_SPREAD = (
    "no spread column (std or per-run samples): no interval was available for the prefix "
    "differences, so a difference inside the noise cannot be told apart"
)


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
        layers = []
        previous_ms = 0.0
        previous_spread: float | None = 0.0
        flagged = 0
        for index, layer in enumerate(table.layers):
            samples = list(layer.samples)
            if table.has_runs:
                cumulative = statistics.median(samples) if samples else None
                spread = statistics.stdev(samples) if len(samples) >= 2 else None
                count = len(samples)
            else:
                cumulative = samples[0] if samples else None
                spread = layer.extras.get(Stat.STD)
                count = int(layer.extras.get(Stat.COUNT, 1)) if samples else 0
            members, flags = fused_members(layer.raw_type, layer.activation)
            difference = noise = None
            if cumulative is not None:
                difference = cumulative - previous_ms
                if spread is not None and previous_spread is not None:
                    noise = math.hypot(spread, previous_spread)
                threshold = noise if noise is not None else NOISE_FRACTION * cumulative
                if difference < 0:
                    flags = (*flags, Flag.NEGATIVE)
                if difference < threshold:
                    flags = (*flags, Flag.BELOW_NOISE)
                previous_ms, previous_spread = cumulative, spread
            flagged += bool({Flag.NEGATIVE, Flag.BELOW_NOISE} & set(flags))
            as_mean = table.time_column.stat == Stat.MEAN
            layers.append(
                ReferenceTiming(
                    engine=self.engine,
                    source=str(path),
                    index=index,
                    name=layer.name,
                    raw_type=layer.raw_type,
                    members=members,
                    status=RefStatus.INPUT if is_input_layer(layer) else RefStatus.TIMED,
                    time_kind=TimeKind.DERIVED,
                    count=count,
                    median_ms=None if as_mean else difference,
                    mean_ms=difference if as_mean else None,
                    line=layer.line,
                    noise_ms=noise,
                    flags=flags,
                )
            )
        notes = table_notes(table)
        notes.append("per-layer times are differences of consecutive cumulative prefix times")
        if layers and all(layer.noise_ms is None for layer in layers):
            notes.append(NO_SPREAD)
        if flagged:
            notes.append(f"{flagged} layer(s) flagged negative or within noise")
        return ReferenceProfile(
            engine=self.engine,
            source=str(path),
            format=self.name,
            layers=tuple(layers),
            total_ms=table.total_ms if table.total_ms is not None else previous_ms or None,
            notes=tuple(notes),
        )


READER = SasPrefixReader()
