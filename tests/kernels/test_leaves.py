"""Kernels are leaves: no kernel module imports a backend, the CLI, the pipeline or a later
stage; the kernel modules import each other without a cycle; and a family folder
(`kernels/attention/`, `kernels/gemm/`, `kernels/conv/`, `kernels/memory/`) reaches into another
family only through its public names, never by a module-name string (read from the source, so
this holds whatever a test run happens to import)."""

from __future__ import annotations

import ast
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "opbench" / "kernels"
FAMILIES = ("attention", "gemm", "conv", "memory")
FORBIDDEN = ("opbench.backends", "opbench.cli", "opbench.pipeline", "opbench.compare",
             "opbench.report", "opbench.reference", "opbench.spec")  # fmt: skip


def module_name(path: Path) -> str:
    rel = path.relative_to(KERNELS.parent.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def kernel_files() -> list[Path]:
    return sorted(KERNELS.rglob("*.py"))


def imported_names(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for every import; name is None for `import module`."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def imports(path: Path, modules: set[str]) -> set[str]:
    names = set()
    for module, name in imported_names(path):
        names.add(module)
        if name and f"{module}.{name}" in modules:  # `from opbench.kernels.memory import rows`
            names.add(f"{module}.{name}")
    return names


def kernel_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in kernel_files() if p.name != "__init__.py"}
    modules = set(paths)
    return {name: imports(path, modules) & modules - {name} for name, path in paths.items()}


def family(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[2] in FAMILIES else None


def test_kernels_import_no_backend_cli_pipeline_or_later_stage() -> None:
    for path in kernel_files():
        bad = sorted(m for m, _ in imported_names(path) if m.startswith(FORBIDDEN))
        assert not bad, f"{path.name} imports {bad}"


def test_every_kernel_file_sits_in_a_family_or_is_shared_infrastructure() -> None:
    for folder in FAMILIES:
        assert (KERNELS / folder / "__init__.py").read_text().strip(), f"{folder} has no summary"
    for path in KERNELS.glob("*.py"):
        assert not path.stem.startswith(("attention", "linear", "conv", "gemm")), path.name


def test_no_family_imports_another_familys_private_names() -> None:
    for path in kernel_files():
        own = family(module_name(path))
        for module, name in imported_names(path):
            other = family(module)
            if other and other != own and name:
                assert not name.startswith("_"), f"{path.name} imports {module}.{name}"


def test_no_kernel_dispatches_by_module_name() -> None:
    # A launcher names the function it calls by importing it, never by a "module.function"
    # string resolved at run time: grep and the import checks above then see every edge.
    for path in kernel_files():
        assert "importlib" not in {m for m, _ in imported_names(path)}, path.name


def test_kernel_modules_import_each_other_without_a_cycle() -> None:
    graph = kernel_graph()
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", "import cycle: " + " -> ".join([*trail, node])
        state[node] = "open"
        for target in sorted(graph[node]):
            visit(target, [*trail, node])
        state[node] = "done"

    for node in sorted(graph):
        visit(node, [])
    # The int8 variants build on their float siblings, never the other way round.
    for fam, base in (("gemm", "linear"), ("conv", "conv"), ("attention", "attention")):
        float_mod, int8_mod = f"opbench.kernels.{fam}.{base}", f"opbench.kernels.{fam}.{base}_int8"
        assert float_mod in graph[int8_mod] and int8_mod not in graph[float_mod]


def test_every_kernel_file_stays_small() -> None:
    for path in kernel_files():
        assert len(path.read_text().splitlines()) <= 400, path.name
