"""An op's parameters as a suite writes them: `Param` (name, kind, default, choices),
`coerce_param` (checks and normalises one value, with a user-facing reason) and
`DerivedChoices` (choices computed from the registered ops). ops/base.py re-exports them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """One op parameter as written in a suite.

    kind: "int", "pos_int", "nonneg_int", "float", "pos_float", "bool", "choice",
        "pair" (an int or [a, b]; stored as a 2-tuple), "int_list", "str".
    """

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def coerce_param(param: Param, value: Any) -> Any:
    """Check and normalise one parameter value; raise ValueError with a user-facing reason."""
    kind = param.kind
    if value is None and param.default is None:
        return None

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind in ("int", "pos_int", "nonneg_int"):
        if not is_int(value):
            raise ValueError(f"must be an integer, got {value!r}")
        if kind == "pos_int" and value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        if kind == "nonneg_int" and value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return value
    if kind in ("float", "pos_float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number, got {value!r}")
        if kind == "pos_float" and value <= 0:
            raise ValueError(f"must be positive, got {value}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {value!r}")
        return value
    if kind == "choice":
        if value is None:
            value = "none"
        if not isinstance(value, str) or value.lower() not in param.choices:
            raise ValueError(f"must be one of {', '.join(param.choices)}; got {value!r}")
        return value.lower()
    if kind == "pair":
        if is_int(value):
            pair = (value, value)
        elif isinstance(value, (list, tuple)) and len(value) == 2 and all(is_int(v) for v in value):
            pair = (int(value[0]), int(value[1]))
        else:
            raise ValueError(f"must be an integer or a pair [a, b], got {value!r}")
        if any(v < 0 for v in pair):
            raise ValueError(f"must not be negative, got {value!r}")
        return pair
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise ValueError(f"must be a non-empty string, got {value!r}")
        return value
    if kind == "int_list":
        if not isinstance(value, (list, tuple)) or not all(is_int(v) for v in value):
            raise ValueError(f"must be a list of integers, got {value!r}")
        return tuple(int(v) for v in value)
    raise AssertionError(f"unknown parameter kind {kind}")


class DerivedChoices(Sequence[str]):
    """A parameter's choices computed from the registered ops each time they are read: the ops
    are not all defined when this module is, and an op registered later (a plugin's) counts."""

    def __init__(self, compute: Callable[[], tuple[str, ...]]) -> None:
        self._compute = compute

    def __getitem__(self, i):  # type: ignore[override]
        return self._compute()[i]

    def __len__(self) -> int:
        return len(self._compute())

    def __repr__(self) -> str:
        return repr(self._compute())
