"""Per-layer times from the times of graph cuts (each layer and everything it depends on).

`opbench export sas` times, for every layer k, the model made of k and all layers it depends
on: its ancestor set A(k) (docs/sas.md). Assuming a cut costs the fixed cost o of a call on
its input plus the sum of its layers' own times,

    T(A(k)) = o + Σ_{l ∈ A(k)} t_l,

the equations in walk order are triangular, and forward substitution gives every layer's time
as a signed sum of cut times, e.g. t_add = T(add) − T(bn3) − T(down_bn) + T(x) for a ResNet
downsample block. Its noise is √(Σ c² s²) over the cut times it uses (independent spreads s).

A cut that was not timed leaves its layer unknown; the next cut holding it measures the two
together (one group, `relu1 + pool1`) unless that cut holds part of another group, in which
case the layer is not derived at all. Nothing is guessed: a layer no group covers is left
out, and compare shows it MISSING.

Pure Python: no torch, no triton, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from opbench.errors import InputError
from opbench.spec.graph import Graph, OrderError, Row


@dataclass(frozen=True)
class CutRow:
    """One row of the file: a layer's cut (or, with `is_input`, a model input's baseline)."""

    name: str
    reads: tuple[str, ...]  # layers or model inputs the layer reads
    value: float | None  # the cut's time (ms); None: not timed
    spread: float | None  # its standard deviation, where known
    is_input: bool = False
    line: int | None = None
    status: str | None = None


@dataclass(frozen=True)
class Derived:
    """The time of one layer, or of a group measured together, as a sum of cut times."""

    members: tuple[str, ...]  # walk order; the last is the row it is reported at
    value: float
    noise: float | None
    terms: tuple[tuple[str, int], ...]  # (row name, coefficient), in file order
    cumulative: float  # the time of the head's own cut (for the 2%-of-the-cut rule)


@dataclass
class Solution:
    derived: dict[str, Derived] = field(default_factory=dict)  # head layer -> its time
    not_derived: dict[str, str] = field(default_factory=dict)  # layer -> why
    inputs_without_baseline: list[str] = field(default_factory=list)


def solve(rows: Sequence[CutRow], path: str = "") -> Solution:
    """Derive every layer's time it can from the cut times of `rows` (file order)."""
    layers = [r for r in rows if not r.is_input]
    baselines = {r.name: r for r in rows if r.is_input}
    try:
        graph = Graph.from_rows([Row(r.name, r.reads) for r in layers])
    except OrderError as e:
        row = layers[e.layer]
        where = f"{path}, line {row.line}: " if row.line is not None else f"{path}: "
        raise InputError(
            f"{where}layer {row.name!r} reads {e.value!r}, which comes at or after it: the "
            "rows of a cut file must be in the graph's walk order"
        ) from None
    ancestors = {graph.names[k]: frozenset(graph.names[m] for m in members)
                 for k, members in enumerate(graph.ancestor_sets)}  # fmt: skip
    inputs_of = {name: graph.inputs_reached(k) for k, name in enumerate(graph.names)}

    solution = Solution()
    missing_baselines: set[str] = set()
    group_of: dict[str, str] = {}  # layer -> head of the group that holds it
    groups: dict[str, tuple[frozenset[str], dict[str, int]]] = {}  # head -> members, coefficients
    spreads = {r.name: r.spread for r in rows}
    values = {r.name: r.value for r in rows}
    order = {r.name: i for i, r in enumerate(rows)}
    for row in rows:
        if row.is_input:
            continue
        name = row.name
        if row.value is None:
            solution.not_derived[name] = row.status or "its cut was not timed"
            continue
        rest = ancestors[name] - {name}
        heads = {group_of[m] for m in rest if m in group_of}
        split = sorted(h for h in heads if not groups[h][0] <= rest)
        if split:
            solution.not_derived[name] = (
                f"its cut holds part of the group {' + '.join(_ordered(groups[split[0]][0], order))}"
            )
            continue
        coefficients: dict[str, int] = {name: 1}
        for head in heads:
            for term, c in groups[head][1].items():
                coefficients[term] = coefficients.get(term, 0) - c
        for model_input in inputs_of[name]:
            base = baselines.get(model_input)
            if base is not None and base.value is not None:
                coefficients[model_input] = coefficients.get(model_input, 0) - 1
            else:
                missing_baselines.add(model_input)
        coefficients = {k: c for k, c in coefficients.items() if c}
        members = frozenset(m for m in rest if m not in group_of) | {name}
        for m in members:
            group_of[m] = name
            solution.not_derived.pop(m, None)
        groups[name] = (members, coefficients)
        value = sum(c * (values[k] or 0.0) for k, c in coefficients.items())
        noise: float | None = None
        if all(spreads[k] is not None for k in coefficients):
            noise = math.sqrt(sum((c * (spreads[k] or 0.0)) ** 2 for k, c in coefficients.items()))
        terms = tuple(sorted(coefficients.items(), key=lambda kv: order[kv[0]]))
        solution.derived[name] = Derived(_ordered(members, order), value, noise, terms, row.value)
    solution.inputs_without_baseline = sorted(missing_baselines)
    return solution


def _ordered(names: frozenset[str], order: dict[str, int]) -> tuple[str, ...]:
    return tuple(sorted(names, key=order.__getitem__))


def describe(terms: Sequence[tuple[str, int]]) -> str:
    """`T(add) − T(bn3) − T(down_bn) + T(x)` for the terms of a derived time."""
    text = ""
    for name, c in terms:
        sign = "+" if c > 0 else "−"
        times = "" if abs(c) == 1 else f"{abs(c)}·"
        text += f" {sign} {times}T({name})" if text else f"{'' if c > 0 else '−'}{times}T({name})"
    return text
