"""Kernels are leaves: no kernel module imports a backend, the CLI, the pipeline or a later
stage, and the kernel modules import each other without a cycle (read from the source, so
this holds whatever a test run happens to import)."""

from __future__ import annotations

import ast
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "opbench" / "kernels"
FORBIDDEN = ("opbench.backends", "opbench.cli", "opbench.pipeline", "opbench.compare",
             "opbench.report", "opbench.reference", "opbench.spec")  # fmt: skip


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "opbench.kernels":  # `from opbench.kernels import rows`
                names |= {f"opbench.kernels.{alias.name}" for alias in node.names}
    return names


def kernel_graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in KERNELS.glob("*.py") if p.stem != "__init__"}
    return {
        name: {m.rsplit(".", 1)[1] for m in imports(path)
               if m.startswith("opbench.kernels.") and m.rsplit(".", 1)[1] in modules}
        for name, path in modules.items()
    }  # fmt: skip


def test_kernels_import_no_backend_cli_pipeline_or_later_stage() -> None:
    for path in KERNELS.glob("*.py"):
        bad = sorted(m for m in imports(path) if m.startswith(FORBIDDEN))
        assert not bad, f"{path.name} imports {bad}"


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
    for base in ("linear", "conv", "attention"):
        assert base in graph[f"{base}_int8"] and f"{base}_int8" not in graph[base]


def test_every_kernel_file_stays_small() -> None:
    for path in KERNELS.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name
