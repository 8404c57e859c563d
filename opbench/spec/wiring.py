"""Which values each layer of a suite's model reads, checked before any shape is inferred.

A layer reads the values its `inputs:` names (earlier layers, model inputs), or fresh data of
its own `input:` shape, or by default the layer before it (the first layer: the model input).
Every mistake is collected, each located at the name that is wrong: an unknown name (with a
did-you-mean), a layer that comes later (which also rules out cycles: the list order is the
walk), a layer reading itself, `input:` and `inputs:` together, a count of inputs the op does
not take, a model with both or neither of `input:` / `inputs:`, a layer named like a model
input. Warnings (the model falls apart into pieces, an output nothing reads, a declared input
nothing reads) come from the resolved graph, in `graph_warnings`.

Batch-independent: done once per model, before the sweep's instances resolve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opbench.errors import InputError
from opbench.ops.base import VARIADIC
from opbench.ops.registry import OPS, suggest
from opbench.spec.graph import INPUT, Graph, OrderError, Row, fresh_input
from opbench.spec.problems import Locator, SuiteWarning

if TYPE_CHECKING:  # pydantic stays at the YAML boundary: match and compare import this module
    from opbench.spec.model import ModelSpec
    from opbench.spec.schema import ModelModel

Dims = tuple[int, ...]


def default_reads(i: int, names: Sequence[str], declared: Sequence[str]) -> tuple[str, ...] | None:
    """The suite format's rule for layer `i` when it names no `inputs:` (nor its own `input:`):
    it reads the layer before it; the first layer reads the model's one declared input. None
    where the rule gives nothing (a first layer of a model declaring none or several). The one
    place the rule is written: the loader reads by it, `spells_out` inverts it for writers."""
    if i > 0:
        return (names[i - 1],)
    if len(declared) == 1:
        return (declared[0],)
    return None


def spells_out(i: int, names: Sequence[str], declared: Sequence[str], reads: Sequence[str]) -> bool:
    """The rule inverted, for a writer of suite files (the ONNX importer): whether layer `i`
    must write `inputs:` to read `reads` (the default would read something else)."""
    return default_reads(i, names, declared) != tuple(reads)


def recorded_graph(model: Mapping[str, Any]) -> Graph:
    """The graph of a model as run.json records it (the suite spec's model: `inputs` and
    `layers`, each layer with `inputs`, `output_shape`, `input_shapes`). The one adapter for a
    run.json from before graphs: a layer without `inputs` reads as the suite format's default
    says, or its own fresh input where it set one (`starts_chain` after the first layer).
    InputError when a layer reads itself or a later layer."""
    layers = [la for la in model.get("layers") or () if isinstance(la, Mapping)]
    layers = [la for la in layers if isinstance(la.get("name"), str)]
    names = [la["name"] for la in layers]
    declared = model.get("inputs")
    declared = dict(declared) if isinstance(declared, Mapping) and declared else {INPUT: ()}
    rows = []
    for i, layer in enumerate(layers):
        given = layer.get("inputs")
        if isinstance(given, (list, tuple)) and given:
            reads = tuple(str(v) for v in given)
        elif i > 0 and layer.get("starts_chain"):
            reads = (fresh_input(names[i]),)
        else:
            reads = default_reads(i, names, list(declared)) or (INPUT,)
        shapes = layer.get("input_shapes")
        shapes = tuple(tuple(s) for s in shapes) if isinstance(shapes, (list, tuple)) else ()
        out = layer.get("output_shape")
        rows.append(Row(names[i], reads, tuple(out) if isinstance(out, (list, tuple)) else (),
                        shapes if len(shapes) == len(reads) else ()))  # fmt: skip
    shaped = {k: tuple(v) if isinstance(v, (list, tuple)) else () for k, v in declared.items()}
    try:
        return Graph.from_rows(rows, shaped)
    except OrderError as e:  # a hand-edited run.json: one line, not a traceback
        raise InputError(f"the run's suite spec, model {model.get('name')!r}: {e}") from None


@dataclass(frozen=True)
class Wiring:
    """A model's wiring: its declared inputs (name → dims without the batch), and for each
    layer the values it reads (None where the layer's inputs are wrong: it is skipped, and so
    is every layer that reads it). fresh: the dims of the layers that set their own `input`."""

    declared: Mapping[str, Dims]
    reads: tuple[tuple[str, ...] | None, ...]
    fresh: Mapping[int, Dims]


def wire_model(
    model: ModelModel,
    index: int,
    locate: Locator,
    problems: list[InputError],
    params: Mapping[int, Mapping[str, object]],
) -> Wiring:
    """The values each layer of `model` reads; every mistake appended to `problems`.
    params: the resolved parameters of each layer that has sound ones (by index): the number
    of inputs an op takes may depend on them (`Op.input_count`)."""
    path = ("models", index)
    declared = _declared_inputs(model, path, locate, problems)
    names = [layer.name for layer in model.layers]
    position = {}
    for i, name in enumerate(names):
        position.setdefault(name, i)
    for i, name in enumerate(names):
        if name in declared:
            problems.append(
                InputError(
                    f"layer name {name!r} is also the name of a model input: a layer reading "
                    f"{name!r} could mean either",
                    locate((*path, "layers", i, "name"), "name"),
                )
            )
    reads: list[tuple[str, ...] | None] = []
    fresh: dict[int, Dims] = {}
    for i, layer in enumerate(model.layers):
        where = (*path, "layers", i)
        if layer.input is not None and layer.inputs is not None:
            problems.append(
                InputError(
                    "a layer reads either fresh data (`input: [dims]`) or named values "
                    "(`inputs: [names]`), not both",
                    locate((*where, "inputs"), "inputs"),
                )
            )
            reads.append(None)
            continue
        if layer.input is not None:
            fresh[i] = tuple(layer.input)
            reads.append((fresh_input(layer.name),))
        elif layer.inputs is not None:
            reads.append(
                _named(layer.inputs, i, names, position, declared, where, locate, problems)
            )
        elif (implied := default_reads(i, names, list(declared))) is not None:
            reads.append(implied)
        elif not declared:
            reads.append(None)  # the model's missing input is reported at the model
        else:
            problems.append(
                InputError(
                    f"the model declares {len(declared)} inputs ({', '.join(declared)}): its "
                    "first layer must name the ones it reads (`inputs: [names]`)",
                    locate(where, "inputs"),
                )
            )
            reads.append(None)
        if reads[-1] is not None and layer.op in OPS:
            op, given = OPS[layer.op], params.get(i)
            if given is None and op.arity == VARIADIC:
                reads[-1] = None  # the count depends on parameters that are wrong (reported)
            elif not op.takes(len(reads[-1]), given):
                got = len(reads[-1])
                how = "" if layer.inputs is not None else " (name them with `inputs: [names]`)"
                takes = op.arity_text(given)
                problems.append(
                    InputError(
                        f"op {layer.op!r} takes {takes}, this layer reads {got}{how}",
                        locate((*where, "inputs"), "inputs"),
                    )
                )
                reads[-1] = None
    return Wiring(declared, tuple(reads), fresh)


def input_dims(value) -> list[int]:
    """The dims of a declared input: its list, or an InputModel's `shape`."""
    return value if isinstance(value, list) else value.shape


def _declared_inputs(
    model: ModelModel, path: tuple, locate: Locator, problems: list[InputError]
) -> dict[str, Dims]:
    if model.input is not None and model.inputs is not None:
        problems.append(
            InputError(
                "a model declares `input: [dims]` (one input) or `inputs: {name: [dims]}` "
                "(several), not both",
                locate((*path, "inputs"), "inputs"),
            )
        )
        return {INPUT: tuple(model.input)}
    if model.inputs is not None:
        return {name: tuple(input_dims(value)) for name, value in model.inputs.items()}
    if model.input is None:
        problems.append(
            InputError(
                "missing required field 'input' (the model's input shape without the batch; "
                "or `inputs: {name: [dims]}` for several)",
                locate(path, "input"),
            )
        )
        return {}
    return {INPUT: tuple(model.input)}


def _named(
    given: Sequence[str],
    i: int,
    names: Sequence[str],
    position: Mapping[str, int],
    declared: Mapping[str, Dims],
    where: tuple,
    locate: Locator,
    problems: list[InputError],
) -> tuple[str, ...] | None:
    """The names of one layer's `inputs:`, or None when one of them is wrong."""
    ok = True
    for k, name in enumerate(given):
        at = locate((*where, "inputs", k), "inputs")
        if name in declared:
            continue
        j = position.get(name)
        if j is not None and j < i:
            continue
        ok = False
        if j == i:
            message = f"layer {name!r} cannot read its own output"
        elif j is not None:
            message = (
                f"input {name!r} is a later layer (layer {j + 1} of the model, this is layer "
                f"{i + 1}): layers stand in the order they run, so a layer reads only layers "
                "above it (a cycle cannot be written)"
            )
        else:
            known = [*declared, *names[:i]]
            message = f"unknown input {name!r}{suggest(name, known)}; " + (
                f"known here: {', '.join(known)}" if known else "nothing is known here"
            )
        problems.append(InputError(message, at))
    return tuple(given) if ok else None


def graph_warnings(
    spec: ModelSpec, model: ModelModel, index: int, locate: Locator
) -> list[SuiteWarning]:
    """What is legal but most likely a mistake, from the resolved graph: a model that falls
    apart into disconnected pieces, a layer whose output nothing reads before the end of its
    piece (a dead branch: it becomes an extra model output), a declared input nothing reads."""
    graph = spec.graph
    path = ("models", index)
    rows = {layer.name: i for i, layer in enumerate(model.layers)}
    found: list[SuiteWarning] = []

    def at(layer: int, field: str | None = None):
        return locate((*path, "layers", rows[graph.names[layer]]), field)

    pieces = graph.pieces
    if len(pieces) > 1:
        starts = [graph.names[p[0]] for p in pieces[1:]]
        shown = ", ".join(repr(n) for n in starts[:4]) + (", ..." if len(starts) > 4 else "")
        found.append(
            SuiteWarning(
                f"the model falls apart into {len(pieces)} disconnected pieces (later ones start "
                f"at {shown}): a layer that sets its own `input:` gets fresh data, so the "
                "whole-model run is not one network; `inputs:` joins pieces",
                at(pieces[1][0], "input"),
            )
        )
    for piece in pieces:
        for i in piece[:-1]:
            if not graph.consumers[i]:
                found.append(
                    SuiteWarning(
                        f"the output of layer {graph.names[i]!r} is read by no later layer: it "
                        "becomes an extra model output (a dead branch?)",
                        at(i, "name"),
                    )
                )
    for name in model.inputs or {}:  # the named form: `input:` is read by the first layer
        if name not in graph.last_reader:
            found.append(
                SuiteWarning(
                    f"model input {name!r} is read by no layer",
                    locate((*path, "inputs", name), "inputs"),
                )
            )
    return found
