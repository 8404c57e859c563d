"""Every op, and the one path by which each becomes usable: `register_op(op, origin)` claims the
name in the vocabulary (opbench/vocabulary.py) and keeps the op.

The built-in ops are found, not listed: every `Op` subclass with a `name` that a module of this
package defines (helpers and bases have no name; a class imported from another module counts
only there). Order: modules by file name, then each module's ops in the order written, so
`opbench list ops` is the same on every machine. Plugins register theirs after these.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil

import opbench.ops as _package
from opbench import vocabulary
from opbench.ops.base import Op
from opbench.vocabulary import BUILTIN

OPS: dict[str, Op] = {}
_engine_families: dict[str, str] | None = None


def register_op(op: Op, origin: str) -> None:
    """Make `op` usable in suites under `op.name`. Raises vocabulary.NameClash."""
    global _engine_families
    vocabulary.claim_op(op.name, origin)
    OPS[op.name] = op
    _engine_families = None


def snapshot() -> dict[str, Op]:
    return dict(OPS)


def restore(state: dict[str, Op]) -> None:
    global _engine_families
    OPS.clear()
    OPS.update(state)
    _engine_families = None


def builtin_op_classes() -> list[type[Op]]:
    """The ops this package defines, in the documented order (see the module docstring)."""
    found: list[type[Op]] = []
    for info in sorted(pkgutil.iter_modules(_package.__path__), key=lambda m: m.name):
        if info.name == "registry":
            continue
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        found += [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Op)
            and value.__module__ == module.__name__
            and value.name
        ]
    return found


for _cls in builtin_op_classes():
    register_op(_cls(), BUILTIN)


def get_op(name: str) -> Op:
    return OPS[name]


def family_of(op_name: str) -> str:
    """The op whose engine names an op's reference rows carry: its own, or `same_rows_as`."""
    op = OPS.get(op_name)
    return (op.same_rows_as or op.name) if op is not None else op_name


def engine_families() -> dict[str, str]:
    """Engine op type (case-folded) → the registered op it is, from each op's `engine_names`
    (built once per change of the registry)."""
    global _engine_families
    if _engine_families is None:
        _engine_families = {
            engine.casefold(): op.name for op in OPS.values() for engine in op.engine_names.split()
        }
    return _engine_families


def suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""
