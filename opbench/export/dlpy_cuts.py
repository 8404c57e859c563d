"""Which DLPy layer-API layers build each cut of a model (the forms are dlpy_layers.py's).

A cut is the layer and everything it depends on (cuts.py). With the layer API it is built from
one input of tokens, [batch, S, E] (a rank-2 [batch, F] is one token): the model input, or the
output of a layer before which nothing can be built (a ViT's patch embedding: a conv, a
reshape, the class token's concat, the position add). Such a layer is a *boundary*: the layers
after it read its output as a fresh input, a piece of their own whose baseline is timed
like a model input's. That is only done where every path from what comes before to the layers
after goes through the boundary (so each cut's equation stays that of its layers), and where
DLPy's ONNX import refuses the boundary's cut as well. The script's CSV then names the piece
input (`<layer>.output`) in the `inputs` column, so opbench solves the cut equations of the
piece from its own baseline (docs/sas.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opbench.export.dlpy_layers import Form, dlpy_name, forms

PIECE_SUFFIX = ".output"


@dataclass(frozen=True)
class Plan:
    """The layer-API view of one model.

    forms: what each layer becomes.
    reads: per layer, what it reads in the script's CSV (a boundary replaced by its output).
    inputs: every input a layer-API cut may start from (model inputs of rank 2 or 3, and
        boundary outputs), with its shape (batch first).
    blocked: per layer, why no cut holding it can be built with the layer API ("" if one can).
    """

    forms: dict[str, Form]
    reads: dict[str, list[str]]
    inputs: dict[str, list[int]]
    blocked: dict[str, str]
    order: tuple[str, ...]

    def members(self, name: str) -> list[str]:
        """The layers of `name`'s cut, through the reads (pieces stop at their input)."""
        seen: set[str] = set()
        stack = [name]
        while stack:
            m = stack.pop()
            if m in seen or m not in self.forms:
                continue
            seen.add(m)
            stack.extend(self.reads[m])
        return [m for m in self.order if m in seen]

    def cut_inputs(self, name: str) -> list[str]:
        members = self.members(name)
        reached = {r for m in members for r in self.reads[m] if r not in self.forms}
        return sorted(reached)


def _ancestors(layers: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    names = {layer["name"] for layer in layers}
    out: dict[str, set[str]] = {}
    for layer in layers:
        members = {layer["name"]} | {r for r in layer["inputs"] if r not in names}
        for r in layer["inputs"]:
            members |= out.get(r, set())
        out[layer["name"]] = members
    return out


def _articulation(name: str, layers: Sequence[Mapping[str, Any]], anc: Mapping[str, set]) -> bool:
    """Whether every layer outside A(name) reaches A(name) through `name` only."""
    inside = anc[name] - {name}
    return not any(
        r in inside for layer in layers if layer["name"] not in anc[name] for r in layer["inputs"]
    )


def plan(
    layers: Sequence[Mapping[str, Any]],
    params: Mapping[str, Mapping[str, Any]],
    model_inputs: Mapping[str, Sequence[int]],
    onnx_ok: set[str],
) -> Plan:
    """The layer-API plan of a model: manifest layers (walk order), their op parameters, the
    model inputs' shapes (batch first), and the layers whose ONNX cut DLPy imports."""
    found = forms(layers, params)
    by = {layer["name"]: layer for layer in layers}
    anc = _ancestors(layers)
    reads: dict[str, list[str]] = {}
    blocked: dict[str, str] = {}
    inputs = {n: list(s) for n, s in model_inputs.items() if len(s) in (2, 3)}
    boundaries: dict[str, str] = {}
    starts: dict[str, set[str]] = {}  # the inputs each layer's cut reads
    for layer in layers:
        name = layer["name"]
        form = found[name]
        why = form.why if form.kind == "none" else ""
        mine: list[str] = []
        for r in layer["inputs"]:
            if r not in by:
                mine.append(r)
                if r not in inputs and not why:
                    why = f"it reads {r!r}, which is not a token sequence"
                continue
            if r not in boundaries and blocked[r] and r not in onnx_ok and len(
                by[r]["output_shape"]
            ) in (2, 3) and _articulation(r, layers, anc):  # fmt: skip
                boundaries[r] = r + PIECE_SUFFIX
                inputs[boundaries[r]] = list(by[r]["output_shape"])
            if r in boundaries:
                mine.append(boundaries[r])
                continue
            mine.append(r)
            if blocked[r] and not why:
                why = blocked[r] if blocked[r].startswith("its cut holds") else (
                    f"its cut holds {r!r}: {blocked[r]}")  # fmt: skip
        reads[name] = mine
        starts[name] = {r for r in mine if r not in by}.union(*(starts[r] for r in mine if r in by))
        if not why and len(starts[name]) != 1:  # one input per DLPy model
            why = f"a DLPy model has one input; this cut reads {', '.join(sorted(starts[name]))}"
        blocked[name] = why
    return Plan(found, reads, inputs, blocked, tuple(by))


def cut_layers(p: Plan, name: str) -> tuple[dict[str, Any] | None, str]:
    """(the cut's DLPy layers as JSON, "") or (None, why the layer API cannot build it)."""
    if p.blocked[name]:
        return None, p.blocked[name]
    form = p.forms[name]
    if form.kind == "inside":
        return None, (f"DLPy's MultiHeadAttention ends in its output projection: the attention "
                      f"is timed together with {form.host!r}")  # fmt: skip
    members = p.members(name)
    absorbed = {a for m in members if p.forms[m].kind == "mha" for a in p.forms[m].absorbs}
    (start,) = p.cut_inputs(name)

    def carrier(r: str) -> str:
        f = p.forms.get(r)
        if f is None:
            return dlpy_name(r)
        return carrier(f.host) if f.kind == "act" else dlpy_name(r)

    built: list[dict[str, Any]] = []
    acts: dict[str, tuple[str, str]] = {}  # host -> (act, the activation layer)
    notes: list[str] = []
    for m in members:
        f = p.forms[m]
        if f.why:
            notes.append(f"{m}: {f.why}")
        if f.kind == "act":
            acts[dlpy_name(f.host)] = (f.config["act"], m)
            continue
        if f.kind == "inside" or (m in absorbed and f.kind != "mha"):
            continue
        sources = p.reads[f.absorbs[0]] if f.kind == "mha" else p.reads[m]
        built.append({"name": dlpy_name(m), "type": f.kind, "config": dict(f.config),
                      "sources": [carrier(s) for s in sources],
                      "covers": [*(a for a in f.absorbs if a in members), m]})  # fmt: skip
    for entry in built:
        if entry["name"] in acts:  # the activation layer is part of what its host times
            entry["config"]["act"], folded = acts[entry["name"]]
            entry["covers"].append(folded)
    shape = p.inputs[start]
    tokens, width = (shape[1], shape[2]) if len(shape) == 3 else (1, shape[1])
    return {
        "input": {"name": dlpy_name(start), "tensor": start, "tokens": tokens, "width": width},
        "layers": built,
        "output": carrier(name),
        "notes": notes,
    }, ""
