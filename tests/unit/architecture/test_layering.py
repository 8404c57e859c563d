"""Guard rails for the architecture: the pure stages stay pure, and imports flow one way.

docs/architecture.md draws the stages; these tests keep the drawing true. Imports are read
from the source (`imports.py`), at the top, inside functions and under TYPE_CHECKING alike, so
a deferred import cannot hide an arrow or a circle.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.architecture.imports import PACKAGE, circle, imports, unit_arrows, units

# Stages that must run on any laptop or CI box from a run.json: no torch, no triton.
PURE_STAGES = ("spec", "reference", "match", "compare", "report", "results")

# The declared layer order, lowest first. A package (or top-level module) of opbench imports
# only from lower layers; the packages of one layer import nothing from each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    # leaves: no opbench import at all
    ("errors", "targets", "time_bounds", "vocabulary", "exclusive"),
    ("ops", "kernels"),  # what a layer computes: declared (pure), and in Triton
    ("spec",),  # suites, resolved over the ops
    ("importers", "reference", "results"),  # ONNX models in; reference files in; run records
    ("match", "measure"),  # reference rows <-> layers; timer and checks
    ("backends", "compare"),  # layers built on kernels; verdicts
    ("api", "pipeline", "report"),  # the public surface; the GPU stages chained; reports
    ("distributed", "export", "plugins"),  # scale-out; models out to other engines; users' code
    ("engines",),  # the reference engines, run on exported models
    ("cli",),
    ("__main__",),
)
LAYER_OF = {name: depth for depth, layer in enumerate(LAYERS) for name in layer}

# The side that runs from files on any machine imports nothing from the GPU side, lazily
# or not (measure's timers import torch lazily; compare reads only its statistics).
NO_GPU_SIDE = (
    *PURE_STAGES,
    "importers",
    "measure",
    "ops",
    "errors",
    "targets",
    "time_bounds",
    "vocabulary",
)


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


def test_every_package_has_its_layer() -> None:
    assert sorted(LAYER_OF) == sorted(units())


def test_imports_flow_down_the_layers() -> None:
    against = [
        line
        for (source, target), lines in sorted(unit_arrows().items())
        if LAYER_OF[target] >= LAYER_OF[source]
        for line in lines
    ]
    assert against == [], "imports against the layer order:\n" + "\n".join(against)


def test_no_circle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in unit_arrows():
        graph.setdefault(source, set()).add(target)
    assert circle(graph) is None


def test_the_circle_finder_finds_one() -> None:
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None


def test_the_side_without_a_gpu_imports_nothing_of_the_gpu_side() -> None:
    bad = [
        line
        for (source, target), lines in sorted(unit_arrows().items())
        if source in NO_GPU_SIDE and target not in NO_GPU_SIDE
        for line in lines
    ]
    assert bad == []


def test_the_reading_sees_lazy_type_only_and_relative_imports(tmp_path: Path) -> None:
    # The rules would be worthless if an import inside a function, under TYPE_CHECKING or
    # written relative slipped past them. A file read as if it were opbench/spec/probe.py:
    src = tmp_path / "probe.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..pipeline import data\n"
        "def f():\n    from opbench.backends.registry import x\n    return x\n"
        "from . import graph\n"
    )
    found = imports(src, {"opbench.pipeline.data", "opbench.spec.graph"}, "opbench.spec.probe")
    assert {"opbench.pipeline.data", "opbench.backends.registry", "opbench.spec.graph"} <= found
