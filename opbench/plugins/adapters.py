"""Thin adapters from the public API (opbench.api) to the internal protocols the pipeline
uses: a plugin `Backend` becomes a one-layer backend, a plugin `Op` an internal op.

The adapters are where a plugin's mistakes are caught and named: a constructor or an
`available` that raises makes the backend unavailable with the reason; a shape or cost
function that raises or returns nonsense fails suite validation (exit 2, naming the layer);
`build` returning something other than a callable or a `Built` fails that layer's build.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from opbench import api
from opbench.backends.base import Built, Unsupported, Weights, cast_weights, singles
from opbench.ops.base import Op as InternalOp
from opbench.ops.base import ShapeError
from opbench.spec.model import DTYPES

if TYPE_CHECKING:
    import torch

    from opbench.spec.model import LayerSpec, ModelSpec


def last_line(exc: BaseException) -> str:
    """The line Python's traceback ends with, `ModuleNotFoundError: No module named 'x'`: one
    line (a message's first), with the file and line of a syntax error."""
    text = traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[0]
    if isinstance(exc, SyntaxError) and exc.filename:
        text += f" ({exc.filename}:{exc.lineno})"
    return text


def layer_view(spec: LayerSpec) -> api.Layer:
    return api.Layer(
        name=spec.name,
        op=spec.op,
        dtype=spec.dtype,
        params=MappingProxyType(dict(spec.params)),
        quant=spec.quant,
        input_shape=tuple(spec.input_shape),
        output_shape=tuple(spec.output_shape),
        inputs=tuple(spec.inputs),
        input_shapes=tuple(tuple(s) for s in spec.input_shapes),
    )


class PluginBackend:
    """A plugin's `api.Backend` class behind the pipeline's backend protocol. One layer per
    build (no fusion), however many inputs it reads (`fn(*xs)`); the plugin object is made on
    first use, so a failing constructor makes the backend unavailable instead of ending the
    run."""

    def __init__(self, cls: type[api.Backend]) -> None:
        self.name = cls.name
        self._cls = cls
        self._instance: api.Backend | None = None

    def _backend(self) -> api.Backend:
        if self._instance is None:
            self._instance = self._cls()
        return self._instance

    def unavailable_reason(self, device: str) -> str | None:
        try:
            return self._backend().available(device)
        except Exception as exc:
            return f"plugin backend {self.name!r} failed: {last_line(exc)}"

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        return singles(model)

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        (spec,) = layers
        layer = layer_view(spec)
        backend = self._backend()
        reason = backend.supports(layer)
        if reason:
            raise Unsupported(str(reason))
        made = backend.build(layer, cast_weights(weights[0], spec.dtype), device)
        return as_built(made, self.name)


def as_built(made: object, backend: str) -> Built:
    if isinstance(made, Built):
        return made
    if callable(made):
        return Built(fn=made)
    raise TypeError(
        f"backend {backend!r}: build() returned {type(made).__name__}, "
        "not a callable or opbench.api.Built"
    )


def _shape(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in value
    ):
        raise ShapeError(f"{what} returned {value!r}, not a tuple of positive integers")
    return tuple(value)


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ShapeError(f"{what} returned {value!r}, not a non-negative integer")
    return value


class PluginOp(InternalOp):
    """A plugin's `api.Op` behind the internal op interface.

    `infer_shape` is what the suite loader calls for every layer; it also runs the op's
    weight shapes and costs for that layer, so a plugin's pure functions fail at validation
    (one line, the layer named, exit 2), never in the middle of a run."""

    def __init__(self, op: api.Op) -> None:
        self.plugin = op
        self.name = op.name
        self.summary = op.summary
        self.params = tuple(op.params)
        arity = op.arity
        if (
            not isinstance(arity, int)
            or isinstance(arity, bool)
            or not (arity >= 1 or arity == api.VARIADIC)
        ):
            raise ValueError(
                f"op {op.name!r}: arity must be a positive integer or opbench.api.VARIADIC, "
                f"not {arity!r}"
            )
        self.arity = arity

    def _plain(self, in_shape: Any) -> Any:
        """The shape argument as the plugin gets it: a tuple of ints, or for a join a tuple of
        such tuples (never lists)."""
        if self.arity == 1:
            return tuple(in_shape)
        return tuple(tuple(s) for s in in_shape)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except ShapeError:
            raise
        except Exception as exc:
            raise ShapeError(f"op {self.name!r}: {what} raised {last_line(exc)}") from None

    def infer_shape(self, in_shape, p):
        out = _shape(
            self._call("output_shape", self.plugin.output_shape, self._plain(in_shape), p),
            f"op {self.name!r}: output_shape",
        )
        self.weight_shapes(in_shape, p)
        self.flops(in_shape, out, p)
        for dtype in DTYPES:
            self.min_bytes(in_shape, out, p, dtype)
        return out

    def weight_shapes(self, in_shape, p):
        shapes = self._call("weight_shapes", self.plugin.weight_shapes, self._plain(in_shape), p)
        if not isinstance(shapes, Mapping):
            raise ShapeError(f"op {self.name!r}: weight_shapes returned {shapes!r}, not a dict")
        return {
            str(k): _shape(v, f"op {self.name!r}: weight_shapes[{k!r}]") for k, v in shapes.items()
        }

    def flops(self, in_shape, out_shape, p):
        value = self._call("flops", self.plugin.flops, self._plain(in_shape), tuple(out_shape), p)
        return _count(value, f"op {self.name!r}: flops")

    def min_bytes(self, in_shape, out_shape, p, dtype):
        value = self._call(
            "min_bytes", self.plugin.min_bytes, self._plain(in_shape), tuple(out_shape), p, dtype
        )
        return _count(value, f"op {self.name!r}: min_bytes")

    def make_weights(self, layer: LayerSpec, generator: torch.Generator) -> dict[str, Any]:
        return self.plugin.make_weights(layer_view(layer), generator)

    def forward(self, x, weights, layer):
        return self.plugin.forward(x, weights, layer_view(layer))

    def reference(self, x, weights, layer):
        return self.plugin.reference(x, weights, layer_view(layer))
