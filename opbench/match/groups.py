"""From links to groups: the reference rows and suite layers that must be compared together.

Rows and layers linked by matching, directly or through a fused opbench result (one result
covering several layers), form one group: its reference time is the sum of its rows, each
backend's time the sum of its results. A suite layer in no group with a row is MISSING,
unless it moves no data (flatten): then it is exempt.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opbench.match.links import ModelMatch
from opbench.match.suite_layers import SuiteModel
from opbench.results.model import LayerResult

Node = tuple[str, Any]  # ("r", row position) or ("l", layer name)


@dataclass(frozen=True)
class Group:
    """Suite layers (execution order) and the reference rows (profile order) that cover them.

    sources: how the rows were matched; ambiguity: why the cover is not certain, else None.
    """

    model: str
    layers: tuple[str, ...]
    rows: tuple[int, ...]
    sources: tuple[str, ...]
    ambiguity: str | None = None


@dataclass(frozen=True)
class ModelGroups:
    """One model's groups, in execution order; missing: timed-or-not layers no row covers
    (execution order); exempt: layers no row covers that move no data."""

    model: str
    groups: tuple[Group, ...]
    missing: tuple[str, ...]
    exempt: tuple[str, ...]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Node, Node] = {}

    def find(self, node: Node) -> Node:
        self.parent.setdefault(node, node)
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]
            node = self.parent[node]
        return node

    def union(self, a: Node, b: Node) -> None:
        self.parent[self.find(a)] = self.find(b)

    def components(self) -> list[list[Node]]:
        out: dict[Node, list[Node]] = {}
        for node in list(self.parent):
            out.setdefault(self.find(node), []).append(node)
        return list(out.values())


def group_model(
    model: SuiteModel, match: ModelMatch, results: Iterable[LayerResult]
) -> ModelGroups:
    """Group one model's links and fused results (results of other models are ignored)."""
    sets = _UnionFind()
    sources: dict[int, set[str]] = {}
    for link in match.links:
        sets.union(("r", link.row), ("l", link.layer))
        sources.setdefault(link.row, set()).add(link.source)
    for result in results:
        if result.model != model.name:
            continue
        members = result.members
        sets.find(("l", members[0]))
        for member in members[1:]:
            sets.union(("l", members[0]), ("l", member))
    for layer in model.layers:
        sets.find(("l", layer.name))
    doubts = dict(match.ambiguities)
    order = {layer.name: layer.index for layer in model.layers}
    by_name = {layer.name: layer for layer in model.layers}
    groups: list[Group] = []
    uncovered: list[str] = []
    for component in sets.components():
        layers = sorted(
            (name for kind, name in component if kind == "l"),
            key=lambda n: order.get(n, 1 << 30),
        )
        positions = sorted(pos for kind, pos in component if kind == "r")
        if not positions:
            uncovered.extend(layers)
            continue
        reasons = [doubts[p] for p in positions if p in doubts]
        groups.append(
            Group(
                model=model.name,
                layers=tuple(layers),
                rows=tuple(positions),
                sources=tuple(sorted({s for p in positions for s in sources.get(p, ())})),
                ambiguity="; ".join(reasons) if reasons else None,
            )
        )
    groups.sort(key=lambda g: order.get(g.layers[0], 1 << 30) if g.layers else 1 << 30)
    uncovered.sort(key=lambda n: order.get(n, 1 << 30))
    moves_data = {n: by_name[n].moves_data if n in by_name else True for n in uncovered}
    return ModelGroups(
        model=model.name,
        groups=tuple(g for g in groups if g.layers),
        missing=tuple(n for n in uncovered if moves_data[n]),
        exempt=tuple(n for n in uncovered if not moves_data[n]),
    )
