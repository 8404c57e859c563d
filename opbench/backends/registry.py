"""Every backend: the built-in ones and those plugins register, through one path.

`register_backend(name, factory, origin)` claims the name in the vocabulary (a plugin
may not shadow a built-in or another plugin) and keeps a zero-argument factory. Built-in
factories import their module only when the backend is used, so names are known without
importing torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from opbench import vocabulary
from opbench.vocabulary import BUILTIN

if TYPE_CHECKING:
    from opbench.backends.base import Backend

Factory = Callable[[], "Backend"]

# The built-in names only (opbench/vocabulary.py lists them); `backend_names()` adds plugins.
BACKEND_NAMES = vocabulary.BUILTIN_BACKENDS

_factories: dict[str, Factory] = {}
# Backends whose kernels are Triton's: on the CPU they run in Triton's interpreter, and their
# times are marked as no performance figures.
_triton: set[str] = set()


def register_backend(name: str, factory: Factory, origin: str, triton: bool = False) -> None:
    """Make `name` runnable: `factory()` gives the backend. Raises vocabulary.NameClash."""
    vocabulary.claim_backend(name, origin)
    _factories[name] = factory
    if triton:
        _triton.add(name)


def runs_triton(name: str) -> bool:
    return name in _triton


def _lazy(target: str) -> Factory:
    def make() -> Backend:
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)()

    return make


def backend_names() -> tuple[str, ...]:
    """Every registered backend, built-ins first."""
    return vocabulary.backend_names()


def get_backend(name: str) -> Backend:
    return _factories[name]()


def all_backends() -> dict[str, Backend]:
    """One instance of every registered backend, by name."""
    return {name: get_backend(name) for name in backend_names()}


def snapshot() -> tuple[dict[str, Factory], set[str]]:
    return dict(_factories), set(_triton)


def restore(state: tuple[dict[str, Factory], set[str]]) -> None:
    factories, triton = state
    _factories.clear()
    _factories.update(factories)
    _triton.clear()
    _triton.update(triton)


for _name, _target in vocabulary.BUILTIN_BACKEND_FACTORIES.items():
    register_backend(_name, _lazy(_target), BUILTIN, triton=_name == "triton")
