"""Inside a package, modules import one way: no module imports, at the top, inside a function
or for types only, a module that imports it back, however many steps around (the command
layer's commands share their pieces through modules both import: compare, the gate and its
outputs, run and its torchrun variant). Between packages: test_layering.py."""

from __future__ import annotations

import pytest

from tests.unit.architecture.imports import PACKAGE, circle, module_graph

PACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package: str) -> None:
    assert circle(module_graph(package)) is None
