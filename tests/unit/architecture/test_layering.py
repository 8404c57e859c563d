"""Guard rails for the architecture: the pure stages stay pure, and imports flow one way.

docs/architecture.md draws the stages; these tests keep the drawing true.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "opbench"

# Stages that must run on any laptop or CI box from a run.json: no torch, no triton.
PURE_STAGES = ("spec", "reference", "match", "compare", "report", "results")


def _modules(stage: str) -> list[str]:
    root = PACKAGE / stage
    names = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        names.append(".".join(parts))
    return names


_BLOCKED_IMPORT = """
import importlib, importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


@pytest.mark.parametrize("stage", PURE_STAGES)
def test_pure_stage_imports_without_torch_or_triton(stage: str) -> None:
    modules = _modules(stage)
    assert modules, f"opbench/{stage} has no modules"
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, *modules],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported torch or triton:\n{done.stdout}"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function (lazy imports count)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


# package -> opbench packages it must never import, lazily or not.
FORBIDDEN = {
    "kernels": ("backends", "cli", "pipeline", "compare", "report", "reference", "match"),
    "spec": ("backends", "kernels", "pipeline", "cli", "measure"),
    "results": ("backends", "kernels", "pipeline", "cli", "measure", "compare", "report"),
    "reference": ("backends", "kernels", "pipeline", "cli", "compare", "report"),
    "match": ("backends", "kernels", "pipeline", "cli", "compare", "report"),
    "compare": ("backends", "kernels", "pipeline", "cli", "report"),
    "report": ("backends", "kernels", "pipeline", "cli"),
    "measure": ("backends", "kernels", "pipeline", "cli", "compare", "report"),
    # An input stage beside the suite loader: what a layer is (spec, ops), nothing downstream.
    "importers": (
        "backends",
        "kernels",
        "pipeline",
        "export",
        "cli",
        "measure",
        "compare",
        "report",
        "match",
    ),
}


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for name in sorted(_imports(path)):
            parts = name.split(".")
            if parts[0] == "opbench" and len(parts) > 1 and parts[1] in forbidden:
                out.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package: str) -> None:
    assert (PACKAGE / package).is_dir()
    assert _violations(package, FORBIDDEN[package]) == []


def test_the_layering_check_sees_lazy_imports(tmp_path: Path) -> None:
    # The rule would be worthless if an import inside a function slipped past it.
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from opbench.backends.registry import x\n    return x\n")
    assert "opbench.backends.registry" in _imports(src)
