"""What an ONNX file must be before anything reads it: each problem one located line (exit 2).

- external data (weights kept in a file beside the model): the file exists, lies inside the
  model's folder (a location such as `../x` or an absolute path could read any file on the
  machine), and holds every byte the tensor needs;
- opsets: every domain a node uses is imported, and the default domain's opset is one this
  importer knows (the installed `onnx` package's newest: its shape inference and reference
  evaluator, which constant folding runs, define what each op means);
- the graph: every node input is made by a node, an initializer or a graph input; the nodes
  can be ordered (no cycle). A file whose nodes are merely out of order is sorted, as ONNX
  Runtime does.

Checked on the onnx_ir model right after `onnx_ir.load`, which reads external data lazily:
without these checks a missing or short file surfaced as a traceback from the first read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opbench.errors import InputError, Location


def check_file(model: Any, path: Path) -> None:
    """InputError for the first problem of the file; sorts nodes that are out of order."""
    where = Location(file=str(path))
    for owner, tensor in _external_tensors(model):
        problem = _external_problem(tensor, path.parent)
        if problem:
            raise InputError(f"{owner}: external data {tensor.location!r} {problem}", where)
    problem = _opset_problem(model) or _dangling_problem(model.graph)
    if problem:
        raise InputError(problem, where)
    _sort_or_refuse(model.graph, where)


def newest_opset() -> int:
    import onnx

    return int(onnx.defs.onnx_opset_version())


def _external_tensors(model: Any) -> Iterator[tuple[str, Any]]:
    """(what holds it, tensor) for every tensor kept in external data: initializers and
    tensor attributes (Constant nodes), in subgraphs too."""
    from onnxscript import ir

    for value in model.graph.initializers.values():
        if isinstance(value.const_value, ir.ExternalTensor):
            yield f"initializer {value.name!r}", value.const_value
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for attr in node.attributes.values():
            if isinstance(attr.value, ir.ExternalTensor):
                yield f"node {node.name!r} ({node.op_type})", attr.value


def _external_problem(tensor: Any, folder: Path) -> str | None:
    location = Path(str(tensor.location))
    if location.is_absolute():
        return "is an absolute path: ONNX external data lies in the model's folder"
    base = folder.resolve()
    target = (base / location).resolve()
    if not target.is_relative_to(base):
        return f"points outside the model's folder {str(base)!r} (to {str(target)!r})"
    if not target.is_file():
        return f"is missing: no file {str(target)!r}"
    need = tensor.nbytes
    if tensor.length is not None and tensor.length < need:
        return f"gives a length of {tensor.length} bytes, but the tensor takes {need}"
    offset = tensor.offset or 0
    size = target.stat().st_size
    if size < offset + need:
        return (
            f"is too short: {str(target)!r} holds {size} bytes, the tensor needs bytes "
            f"{offset} to {offset + need}"
        )
    return None


def _opset_problem(model: Any) -> str | None:
    from onnxscript import ir

    imported = {"" if d == "ai.onnx" else d: v for d, v in model.opset_imports.items()}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in imported:
            label = "the default ONNX domain" if not domain else f"domain {domain!r}"
            return (
                f"node {node.name!r} ({node.op_type}) is of {label}, but the model imports no "
                "opset for it (its opset_import lacks that domain): re-export the model"
            )
    version, newest = imported.get(""), newest_opset()
    if version is not None and version > newest:
        return (
            f"the model's opset {version} is newer than any this importer knows (up to "
            f"{newest}, from the installed onnx package): re-export it at opset {newest} or "
            "lower, or upgrade onnx"
        )
    return None


def _dangling_problem(graph: Any) -> str | None:
    """A value read by a node (or a graph output) that nothing makes. onnx_ir creates such a
    value to load the file anyway; the import would then call the nodes after it unsupported."""
    for node in graph:
        for value in node.inputs:
            if value is not None and _made_by_nothing(value):
                return (
                    f"node {node.name!r} ({node.op_type}) reads {value.name!r}, which no "
                    "node, initializer or graph input makes"
                )
    for value in graph.outputs:
        if _made_by_nothing(value):
            return f"graph output {value.name!r} is made by no node, initializer or input"
    return None


def _made_by_nothing(value: Any) -> bool:
    return (
        value.producer() is None
        and not value.is_graph_input()
        and not value.is_initializer()
        and value.const_value is None
    )


def _sort_or_refuse(graph: Any, where: Location) -> None:
    nodes = list(graph)
    position = {id(n): i for i, n in enumerate(nodes)}
    late = [
        n
        for i, n in enumerate(nodes)
        for v in n.inputs
        if v is not None and v.producer() is not None and position.get(id(v.producer()), -1) >= i
    ]
    if not late:
        return
    cycle = _cycle(nodes)
    if cycle:
        names = " → ".join(f"{n.name!r} ({n.op_type})" for n in (*cycle, cycle[0]))
        raise InputError(f"the graph has a cycle: {names}; ONNX graphs are acyclic", where)
    graph.sort()


def _cycle(nodes: list) -> list | None:
    """One cycle of the nodes in data-flow order, or None. Kahn's walk removes every node
    whose producers are all removed; each node left reads a node left, so walking back from
    one along those producers must come round to a node already seen."""
    owned = {id(n) for n in nodes}

    def producers(node) -> list:
        found = (v.producer() for v in node.inputs if v is not None)
        return [p for p in found if p is not None and id(p) in owned]

    waiting = {id(n): len({id(p) for p in producers(n)}) for n in nodes}
    users: dict[int, list] = {}
    for node in nodes:
        for producer in {id(p): p for p in producers(node)}.values():
            users.setdefault(id(producer), []).append(node)
    ready = [n for n in nodes if waiting[id(n)] == 0]
    while ready:
        for user in users.get(id(ready.pop()), []):
            waiting[id(user)] -= 1
            if waiting[id(user)] == 0:
                ready.append(user)
    left = {id(n) for n in nodes if waiting[id(n)] > 0}
    if not left:
        return None
    node = next(n for n in nodes if id(n) in left)
    walk: list = []
    while node not in walk:
        walk.append(node)
        node = next(p for p in producers(node) if id(p) in left)
    return walk[walk.index(node) :][::-1]
