"""opbench's public API: what a plugin subclasses, receives and returns.

These names are the contract; everything else in opbench is internal and may change.
Importing this module needs neither a GPU nor triton (torch is imported only by the
methods that compute).

- `Backend`: runs layers of existing or plugin ops with your kernels.
- `Op`: a new layer type: its parameters, shapes, costs, torch baseline and reference; with
  `arity` above 1 (or `VARIADIC`), a join of several inputs (shape methods get a tuple of
  shapes, `forward` / `reference` a tuple of tensors, in the layer's `inputs:` order).
- `Layer`: the resolved layer a backend and an op receive.
- `Param`, `REQUIRED`: an op parameter as written in a suite, and "no default".
- `ShapeError`: raised by an op that cannot take an input shape or parameters.
- `Unsupported`: raised by a backend that cannot run a layer (the result says why).
- `Built`, `Bound`: the bind/launch split for a backend that prepares work per input.

Register a class through an entry point (group `opbench.backends` or `opbench.ops`), or load
its file or module with `--plugin` or a suite's `plugins:` list. docs/plugins.md walks
through an example.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from opbench.backends.base import Bound, Built, Unsupported
from opbench.ops.base import ITEMSIZE, REQUIRED, VARIADIC, Param, ShapeError, numel

if TYPE_CHECKING:
    import torch

__all__ = [
    "REQUIRED",
    "Backend",
    "Bound",
    "Built",
    "Layer",
    "Op",
    "Param",
    "Shape",
    "ShapeError",
    "Unsupported",
    "VARIADIC",
]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Layer:
    """One resolved layer of a suite, as a backend or an op receives it.

    name: the layer's name in its model.
    op: the op's name (`opbench list ops`).
    dtype: "float32", "float16" or "bfloat16": the input's, the output's and the weights'.
    params: the op's parameters, defaults filled in (read-only).
    quant: "none", or "int8" when the layer asks for int8 weights.
    input_shape / output_shape: full shapes, batch dimension first; input_shape is the first
        input's.
    inputs: what the layer reads, in order: earlier layers' names or model inputs' names.
    input_shapes: one full shape per input (for a one-input layer, `(input_shape,)`).
    """

    name: str
    op: str
    dtype: str
    params: Mapping[str, Any]
    quant: str
    input_shape: Shape
    output_shape: Shape
    inputs: tuple[str, ...] = ()
    input_shapes: tuple[Shape, ...] = ()

    @property
    def torch_dtype(self) -> torch.dtype:
        from opbench.backends.base import torch_dtype

        return torch_dtype(self.dtype)


class Backend:
    """Subclass this to run layers with your kernels. Set `name` (it may not be a built-in's:
    torch, torch-compile, torch-compile-max-autotune, triton) and override `build`."""

    #: The name suites list under `backends:` and reports show.
    name: ClassVar[str] = ""
    #: True when the kernels are Triton's: on the CPU they then run in Triton's interpreter
    #: (TRITON_INTERPRET=1), are timed briefly, and their times are marked as no performance
    #: figures, like the built-in `triton` backend's.
    uses_triton: ClassVar[bool] = False

    def available(self, device: str) -> str | None:
        """None when this backend can run on `device` ("cuda", "cuda:1", "cpu"), else why not.
        Every layer of an unavailable backend is reported `unsupported` with the reason."""
        return None

    def supports(self, layer: Layer) -> str | None:
        """None when this backend can run `layer`, else the reason it cannot (the layer's
        result is then `unsupported`, with the reason). Raising `Unsupported` in `build`
        works too."""
        return None

    def build(
        self, layer: Layer, weights: Mapping[str, torch.Tensor], device: str
    ) -> Callable[..., torch.Tensor] | Built:
        """Prepare `layer` once, before any timing: return `x -> y`, or a `Built`.

        weights: the layer's weights (see the op's `weight_shapes`), in `layer.dtype`, on
            `device`. Quantize, transpose or pack them here: build time is never timed.
        The callable gets the input (`layer.input_shape`, `layer.dtype`, on `device`) and must
        return the output (`layer.output_shape`, `layer.dtype`, on `device`): opbench checks
        all three, then the values against the op's high-precision reference. A layer with
        several inputs (an op whose `arity` is not 1) is called `fn(*xs)`, one tensor per
        input in `layer.inputs` order, shapes `layer.input_shapes`.
        Return `Built(fn, bind=...)` to do per-input work (output buffers, grids) once in
        `bind(*xs) -> Bound(launch, out)`, so that only `launch()` is timed.
        """
        raise NotImplementedError(f"backend {self.name!r} does not override build()")


class Op:
    """Subclass this to add a layer type. Set `name`, `summary` and `params`; override
    `output_shape`, `weight_shapes`, `forward`, and the costs if the op has any."""

    #: The name suites write as `op:`. It may not be a built-in op's.
    name: ClassVar[str] = ""
    #: One line for `opbench list ops`.
    summary: ClassVar[str] = ""
    #: The parameters a layer of this op takes, e.g. `Param("beta", "pos_float", 1.0)`.
    params: ClassVar[Sequence[Param]] = ()
    #: How many data inputs a layer of this op reads: 1 (the default), a fixed number, or
    #: VARIADIC (two or more). With arity != 1, `input_shape` below is a tuple of shapes and
    #: `x` a tuple of tensors, one per input, in the layer's `inputs:` order.
    arity: ClassVar[int] = 1

    # ---- pure Python: called while a suite is validated, with no torch ----------------
    def output_shape(self, input_shape: Shape, params: Mapping[str, Any]) -> Shape:
        """The output shape (batch first). Raise ShapeError for an input it cannot take
        (for a join, say which shapes: "inputs [2, 8] and [2, 5] do not broadcast")."""
        if self.arity != 1:
            return tuple(input_shape[0])  # type: ignore[arg-type]
        return tuple(input_shape)

    def weight_shapes(self, input_shape: Shape, params: Mapping[str, Any]) -> dict[str, Shape]:
        """The layer's weights by name and shape; opbench seeds them (random normal)."""
        return {}

    def flops(self, input_shape: Shape, output_shape: Shape, params: Mapping[str, Any]) -> int:
        """Floating-point operations of one call, for the reports' TFLOP/s."""
        return 0

    def min_bytes(
        self, input_shape: Shape, output_shape: Shape, params: Mapping[str, Any], dtype: str
    ) -> int:
        """Bytes one call must move at least, for the reports' GB/s: by default every input
        and the output once and every weight once, in `dtype`."""
        size = ITEMSIZE[dtype]
        weights = sum(numel(s) for s in self.weight_shapes(input_shape, params).values())
        shapes = (input_shape,) if self.arity == 1 else input_shape
        inputs = sum(numel(s) for s in shapes)  # type: ignore[arg-type]
        return (inputs + numel(output_shape) + weights) * size

    # ---- torch: called when layers run ---------------------------------------------------
    def make_weights(self, layer: Layer, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """float32 weights on the CPU, drawn from `generator`; by default random normal in
        the shapes of `weight_shapes`. Override to scale them (keep outputs of order 1)."""
        import torch

        shape_arg = layer.input_shape if self.arity == 1 else layer.input_shapes
        return {
            key: torch.randn(shape, generator=generator, dtype=torch.float32)
            for key, shape in self.weight_shapes(shape_arg, layer.params).items()
        }

    def forward(
        self, x: torch.Tensor, weights: Mapping[str, torch.Tensor], layer: Layer
    ) -> torch.Tensor:
        """The torch baseline: the call a PyTorch user writes, in the layer's dtype. The
        `torch` and `torch-compile` backends run it. `x` is a tuple for arity != 1."""
        raise NotImplementedError(f"op {self.name!r} does not override forward()")

    def reference(
        self, x: torch.Tensor, weights: Mapping[str, torch.Tensor], layer: Layer
    ) -> torch.Tensor:
        """The high-precision computation every backend is checked against. It receives
        float64 tensors (float32 on the GPU for very large layers); by default it is
        `forward`. Override when the baseline call has no float64 path."""
        return self.forward(x, weights, layer)
