"""What opbench's modules import, read from the source (so it holds whatever a test run
happens to import): every import statement, at the top, inside a function or under
`if TYPE_CHECKING:`, relative ones made absolute. Shared by the architecture tests."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "opbench"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of opbench by dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, known: Iterable[str] = (), name: str | None = None) -> set[str]:
    """The dotted names a file imports: `import a.b` gives a.b; `from a import b` gives a.b
    where that is a module of `known`, else a; `from . import b` is resolved against the
    file's package (its dotted `name`: by default from its place under opbench/)."""
    known = set(known)
    here = (name or module_name(path)).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
    return found


def module_graph(package: str) -> dict[str, set[str]]:
    """The modules of one opbench package (subpackages included) -> those of it they import."""
    inside = {n: p for n, p in modules().items() if n.startswith(f"opbench.{package}")}
    return {n: imports(p, inside) & set(inside) - {n} for n, p in inside.items()}


def unit(name: str) -> str | None:
    """The package (or top-level module) of opbench a dotted name belongs to."""
    parts = name.split(".")
    return parts[1] if parts[0] == "opbench" and len(parts) > 1 else None


def unit_arrows() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) between opbench's packages and top-level modules -> the import
    lines that make the arrow, as `file imports name`."""
    arrows: dict[tuple[str, str], list[str]] = {}
    every = modules()
    names = units()
    for name, path in every.items():
        source = unit(name)
        for imported in sorted(imports(path, every)):
            target = unit(imported)
            if source and target and target != source and target in names:
                line = f"{path.relative_to(PACKAGE.parent)} imports {imported}"
                arrows.setdefault((source, target), []).append(line)
    return arrows


def units() -> set[str]:
    """opbench's packages and top-level modules (without the package's own __init__)."""
    return {unit(name) for name in modules() if unit(name)}


def circle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import circle, as the nodes around it (the first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None
