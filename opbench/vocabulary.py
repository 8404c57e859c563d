"""The names a suite may use: backends and ops, and where each one came from.

It sits below every package (it imports none): the spec reads it to validate a suite, and
ops/ and backends/ claim names in it without importing the spec. Built-in backend names are
listed here, so a suite can be validated without importing any backend; backends/registry.py and ops/registry.py claim
their names through `claim_backend` and `claim_op` (built-ins and plugins alike), and a
plugin that would shadow a built-in name, or another plugin's, is refused.

A suite's `plugins:` list is loaded through a loader that opbench.plugins installs
(`set_plugin_loader`): loading user code is not the spec's job, and keeps the spec
free of torch and triton.

Pure Python: no torch, no triton, no opbench package.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

BUILTIN = "built-in"

# The built-in backends, in the order reports show them: name -> "module:attribute" of a
# zero-argument factory (backends/registry.py imports it when the backend is used; the spec
# knows the names without importing any backend). The one list of them.
BUILTIN_BACKEND_FACTORIES: dict[str, str] = {
    "torch": "opbench.backends.torch_eager:TorchEager",
    "torch-compile": "opbench.backends.torch_compile:TorchCompile",
    "torch-compile-max-autotune": "opbench.backends.torch_compile:TorchCompileMaxAutotune",
    "torch-int8": "opbench.backends.torch_int8:TorchInt8",
    "torch-fp8": "opbench.backends.torch_fp8:TorchFp8",
    "triton": "opbench.backends.triton:TritonBackend",
}
BUILTIN_BACKENDS: tuple[str, ...] = tuple(BUILTIN_BACKEND_FACTORIES)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def unknown_backend(name: str, known: Sequence[str], suggestion: str = "") -> str:
    """The one line for a backend name nobody registered: the known names, and how a plugin's
    backend gets registered (a backend defined in the user's own code is unknown until its
    file or module is loaded)."""
    return (
        f"unknown backend {name!r}{suggestion}; known: {', '.join(known)}; a backend from a "
        "plugin needs --plugin PATH_OR_MODULE (or `plugins:` in the suite), see docs/plugins.md"
    )


class NameClash(ValueError):
    """A name is already taken (by a built-in or another plugin), or is not a valid name."""


_backend_origins: dict[str, str] = {}
_op_origins: dict[str, str] = {}

PluginLoader = Callable[[Sequence[str], Path], None]
_plugin_loader: PluginLoader | None = None


def _claim(table: dict[str, str], kind: str, name: str, origin: str, reserved: Sequence[str]):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise NameClash(f"{kind} name {name!r} is not a valid name (letters, digits, _ . -)")
    holder = table.get(name) or (BUILTIN if name in reserved else None)
    if holder == BUILTIN and origin != BUILTIN:
        raise NameClash(f"{kind} {name!r} from {origin} would shadow the built-in {kind}")
    if name in table:
        raise NameClash(f"{kind} {name!r} from {origin} is already registered by {holder}")
    table[name] = origin


def claim_backend(name: str, origin: str) -> None:
    """Take a backend name for `origin` (BUILTIN for opbench's own); NameClash when it is
    taken or not a valid name. Built-in names are reserved before their backends register."""
    _claim(_backend_origins, "backend", name, origin, BUILTIN_BACKENDS)


def claim_op(name: str, origin: str) -> None:
    """Take an op name for `origin` (BUILTIN for opbench's own, claimed when ops/ loads)."""
    _claim(_op_origins, "op", name, origin, ())


def backend_names() -> tuple[str, ...]:
    """Every backend a suite may name: the built-ins, then plugins in load order."""
    plugins = tuple(n for n in _backend_origins if n not in BUILTIN_BACKENDS)
    return (*BUILTIN_BACKENDS, *plugins)


def backend_origin(name: str) -> str:
    return BUILTIN if name in BUILTIN_BACKENDS else _backend_origins[name]


def op_origin(name: str) -> str:
    return _op_origins[name]


def set_plugin_loader(loader: PluginLoader | None) -> None:
    global _plugin_loader
    _plugin_loader = loader


def load_suite_plugins(specs: Sequence[str], suite_dir: Path) -> None:
    """Load what a suite's `plugins:` names (paths relative to the suite's folder).

    Raises ValueError when no loader is installed: only commands that load plugins
    (run, compare, validate, list) can read a suite that needs them."""
    if not specs:
        return
    if _plugin_loader is None:
        raise ValueError("this suite names plugins, and this command does not load plugins")
    _plugin_loader(specs, suite_dir)


def snapshot() -> tuple[dict[str, str], dict[str, str], PluginLoader | None]:
    """The vocabulary's state, for `restore` (tests load plugins and put things back)."""
    return dict(_backend_origins), dict(_op_origins), _plugin_loader


def restore(state: tuple[dict[str, str], dict[str, str], PluginLoader | None]) -> None:
    global _plugin_loader
    backends, ops, loader = state
    _backend_origins.clear()
    _backend_origins.update(backends)
    _op_origins.clear()
    _op_origins.update(ops)
    _plugin_loader = loader
