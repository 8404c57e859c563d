"""The lists other stages keep about ops, derived from what each op declares (ops/base.py:
`is_activation`, `epilogue`, `engine_names`, `onnx_imports`), never written again: adding an
activation is one op module (and its kernel), and it appears in every list below (the ONNX
importer reads its nodes too); `epilogue_op` finds the op a conv's or linear's `activation:`
names, whose own code then computes and exports it.

Computed from the registry on every call: an op registered later (a plugin's, a test's) counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opbench.ops.base import DerivedChoices, Op, Param


def _ops():
    from opbench.ops.registry import OPS  # the registry imports every module here, this one too

    return OPS.values()


def activation_ops() -> frozenset[str]:
    """The elementwise activations (an engine's unnamed "activation" row may be any of them)."""
    return frozenset(op.name for op in _ops() if op.is_activation)


def epilogue_ops() -> tuple[str, ...]:
    """The ops a conv's or linear's epilogue can apply: the triton backend fuses them into the
    layer before, and builds them alone with the epilogue's elementwise kernel."""
    return tuple(op.name for op in _ops() if op.epilogue)


def activation_choices() -> tuple[str, ...]:
    """The values of a conv's or linear's `activation:` parameter: none, or an epilogue."""
    return ("none", *dict.fromkeys(op.epilogue for op in _ops() if op.epilogue))


def activation_engine_names() -> frozenset[str]:
    """Engine op types (case-folded) that are an activation: each activation op's
    `engine_names` (ONNX Runtime writes a fused conv's activation by them)."""
    return frozenset(
        n.casefold() for op in _ops() if op.is_activation for n in op.engine_names.split()
    )


def onnx_imports() -> dict[tuple[str, str], list[tuple[Op, Mapping[str, Any]]]]:
    """(domain, ONNX op type) → the ops that may read such a node, each with the parameters
    its pattern implies, in registration order (each op's `onnx_readings`)."""
    found: dict[tuple[str, str], list[tuple[Op, Mapping[str, Any]]]] = {}
    for op in _ops():
        for domain, op_type, implied in op.onnx_readings():
            found.setdefault((domain, op_type), []).append((op, implied))
    return found


def epilogue_op(name: str) -> Op:
    """The op a conv's or linear's `activation: name` applies: the first registered op whose
    `epilogue` it is (built-ins register first). ValueError for a name no op declares."""
    for op in _ops():
        if op.epilogue == name:
            return op
    raise ValueError(f"unknown activation {name!r}; known: {', '.join(activation_choices())}")


#: A linear's or conv's own activation: "none", or any op's `epilogue` name.
ACTIVATION = Param("activation", "choice", "none", DerivedChoices(activation_choices))
