"""What every op provides, independent of any backend.

The shape and cost methods are pure Python (the suite loader uses them to validate a suite
without torch). `make_weights`, `forward` and `reference` import torch lazily: they are only
called by the stages that run layers.

Ops with several inputs (joins: add, concat, matmul, ...) set `arity` (the number of data
inputs, or VARIADIC for two or more). For them the shape and cost methods get `in_shape` as a
tuple of shapes and `forward` / `reference` get `x` as a tuple of tensors, one per input in the
layer's `inputs:` order; an op with `arity == 1` gets one shape and one tensor, as always.
Callers never branch on that themselves: `shape_arg` and `input_arg` turn the per-input
sequences every caller holds into what the op takes.

Two computations per op, kept apart on purpose:
- `forward` is the torch baseline: the one call a PyTorch user writes for the layer
  (`F.rms_norm`, `F.linear`, ...), run in the layer's dtype by the torch backends.
- `reference` is the high-precision result every backend is checked against (float64 on the
  CPU, float32 on the GPU for large layers). It is written out where that is short, so the
  baseline is itself checked against something it does not share code with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from opbench.ops.onnx_reading import OnnxNode, OnnxReading, elementwise
from opbench.ops.params import REQUIRED as REQUIRED  # re-exported: ops import them from here
from opbench.ops.params import DerivedChoices as DerivedChoices
from opbench.ops.params import Param as Param
from opbench.ops.params import coerce_param as coerce_param

if TYPE_CHECKING:
    import torch

Shape = tuple[int, ...]
#: `Op.arity` of an op that takes two or more inputs (concat).
VARIADIC = -1

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}


class LayerView(Protocol):
    """What an op reads of a resolved layer: the spec's `LayerSpec` (spec/model.py) and the
    public `api.Layer` are both one. Declared here so that ops import nothing from the spec,
    which builds on them."""

    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def input_shape(self) -> Shape: ...
    @property
    def input_shapes(self) -> tuple[Shape, ...]: ...
    @property
    def output_shape(self) -> Shape: ...


class ShapeError(ValueError):
    """The op cannot take this input shape or these parameters; the message says why."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


QUANT = Param("quant", "choice", "none", ("none", "int8"))
EPS = Param("eps", "pos_float", 1e-5)


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class Example:
    """A small layer of the op, for the tests that run every op (tests/unit/ops/ and the
    Triton builders' test): `input` without the batch as a suite writes it (for an op with
    several inputs, a tuple of such shapes, one per input), `params` as a suite writes them,
    and `output`, the shape the op infers at batch 2, without the batch. `integer`: positions
    of inputs that hold int64 ids (declared `{shape: [...], dtype: int64}`)."""

    input: Shape | tuple[Shape, ...]
    output: Shape
    params: Mapping[str, Any] = field(default_factory=dict)
    integer: tuple[int, ...] = ()

    def declared(self, names: Sequence[str]) -> str:
        """The model's `inputs:` mapping of these names, one per input (YAML flow style)."""
        parts = []
        for i, (n, s) in enumerate(zip(names, self.inputs, strict=True)):
            dims = json.dumps(list(s))
            parts.append(f"{n}: {{shape: {dims}, dtype: int64}}" if i in self.integer else
                         f"{n}: {dims}")  # fmt: skip
        return "{" + ", ".join(parts) + "}"

    @property
    def inputs(self) -> tuple[Shape, ...]:
        """One shape per input (the single input of a one-input op in a tuple of one)."""
        if self.input and all(isinstance(d, (tuple, list)) for d in self.input):
            return tuple(tuple(s) for s in self.input)  # type: ignore[union-attr]
        return (tuple(self.input),)  # type: ignore[arg-type]

    def suite_model(self, model: str, op: str, layer: str, batch: int = 2, extra: str = "") -> str:
        """The example as one model of a suite's `models:` list (YAML, indented for it): a
        one-input op reads the model's `input`; an op with several reads declared model inputs
        `x0`, `x1`, ... in order. `extra`: more keys of the layer's mapping (", dtype: float16")."""
        params = "".join(f", {key}: {json.dumps(value)}" for key, value in self.params.items())
        shapes = self.inputs
        if len(shapes) == 1 and not self.integer:
            head = f"    input: {json.dumps(list(shapes[0]))}\n"
            reads = ""
        else:
            names = [f"x{i}" for i in range(len(shapes))]
            head = f"    inputs: {self.declared(names)}\n"
            reads = f", inputs: [{', '.join(names)}]"
        return (
            f"  - name: {model}\n    batch: {batch}\n{head}    layers:\n"
            f"      - {{name: {layer}, op: {op}{reads}{params}{extra}}}\n"
        )


class Op:
    """Base class of an op. Subclasses set `name`, `params`, `summary` and override methods.

    Everything else opbench needs to know about an op is an attribute here, so that adding an
    op touches its own file and not a table elsewhere (ops/registry.py finds the class)."""

    name: str = ""
    summary: str = ""
    params: tuple[Param, ...] = ()
    #: The op only re-labels memory (a view); backends need no kernel for it. An op that is a
    #: view for some shapes only (slice, split) says so per layer in `view_layer`.
    is_view: bool = False
    #: Engine op or layer types (ONNX Runtime, TensorRT, OpenVINO, SAS, torch profiler; any
    #: case), separated by spaces, whose reference rows are this op: the match stage's
    #: signature fallback reads them.
    engine_names: str = ""
    #: The op whose engine names this op's rows carry when not its own (permute → transpose).
    same_rows_as: str = ""
    #: The torch call(s) the baseline makes, as a PyTorch user writes them
    #: ("torch.nn.functional.silu", "torch.Tensor.contiguous"): tests spy on them.
    torch_calls: tuple[str, ...] = ()
    #: `reference` is a formula of its own that makes none of `torch_calls` (tests check it).
    reference_written_out: bool = False
    #: The ONNX operator of the op's form when it is one node without attributes (`to_onnx`).
    onnx_op: str = ""

    @property
    def exports_to_onnx(self) -> bool:
        """Whether the op has an ONNX form: an `onnx_op`, or a `to_onnx` of its own."""
        return bool(self.onnx_op) or type(self).to_onnx is not Op.to_onnx

    def to_onnx(self, scope: Any, x: Any, weights: Mapping[str, Any], layer: LayerView) -> str:
        """The layer's ONNX nodes, added through `scope` (export/onnx_ops.py's LayerScope, passed
        in: ops import no exporter); the output tensor's name. `x`: one name, or a tuple as
        `input_arg` gives; `weights`: numpy float32. By default one `onnx_op` node reading every
        input in order (add → Add(a, b)); a form computes what `forward` computes."""
        return scope.one(self.onnx_op, [x] if isinstance(x, str) else list(x))

    #: An elementwise activation: engines fuse it into the layer before it, so an engine's row
    #: that says only "activation" may be this op (match/names.py, the ONNX Runtime reader).
    is_activation: bool = False
    #: The name of the op's function in the kernels' epilogue (kernels/epilogue.py keeps the
    #: table of them), for an activation a GEMM or conv can apply to its output; None where
    #: none can. It makes the op fusable after a conv or linear (backends/triton_fusion.py)
    #: and a value of their `activation:` parameter. `epilogue_name(params)` gives a layer's.
    epilogue: str | None = None
    #: A small layer for the tests that run every op; every built-in op has one.
    example: Example | None = None
    #: False for an op that computes nothing (`placeholder`, which stands for an ONNX node
    #: opbench cannot run): no backend runs it, and the tests that run every op skip it.
    runs: bool = True
    #: The op's state is computed from its parameters (rope's cos/sin tables), not drawn at
    #: random: `reference` recomputes it exactly instead of reading the dtype-rounded copy.
    derived_weights: bool = False
    #: How many data inputs the op takes (weights are not inputs): 1, a fixed number, or
    #: VARIADIC (two or more). With arity != 1 the methods below get tuples (module doc).
    arity: int = 1
    #: The ONNX nodes the importer reads as one layer of this op: (domain, op type, the
    #: parameters such a node implies), read by `read_onnx`. Empty for an activation with an
    #: `onnx_op`: that node, no parameters (`onnx_readings`).
    onnx_imports: tuple[tuple[str, str, Mapping[str, Any]], ...] = ()

    def onnx_readings(self) -> tuple[tuple[str, str, Mapping[str, Any]], ...]:
        """`onnx_imports`, or for an activation its export's own node read back."""
        if self.onnx_imports or not (self.is_activation and self.onnx_op):
            return self.onnx_imports
        return (("", self.onnx_op, {}),)

    def from_onnx(self, implied: Mapping[str, Any], attributes: Mapping[str, Any]) -> dict | None:
        """A layer's parameters from an `onnx_imports` node's implied ones and its attributes
        (strings decoded); None when the attributes make it another function (refused)."""
        return dict(implied)

    def read_onnx(self, node: OnnxNode, implied: Mapping[str, Any]) -> OnnxReading | None:
        """An `onnx_imports` node as a layer (ops/onnx_reading.py); None: another op's node.
        By default one elementwise layer of `from_onnx`'s parameters."""
        return elementwise(self, node, implied)

    def epilogue_name(self, params: Mapping[str, Any]) -> str | None:
        """The epilogue function a layer of this op with these parameters applies (`epilogue`
        unless a parameter picks a variant: gelu's tanh approximation)."""
        return self.epilogue

    # ---- inputs: one per edge of the graph ----------------------------------------------
    def input_count(self, params: Mapping[str, Any]) -> int:
        """The number of data inputs a layer with these parameters reads: `arity` by default
        (VARIADIC: two or more). An op whose count depends on its parameters declares
        `arity = VARIADIC` (it then always gets tuples) and returns the count here."""
        return self.arity

    def takes(self, count: int, params: Mapping[str, Any] | None = None) -> bool:
        """Whether a layer (with `params`, when known) may read `count` inputs."""
        expected = self.arity if params is None else self.input_count(params)
        return count >= 2 if expected == VARIADIC else count == expected

    def arity_text(self, params: Mapping[str, Any] | None = None) -> str:
        """How many inputs the op (with `params`) takes, in words: "1 input", "2 inputs",
        "2 or more inputs"."""
        expected = self.arity if params is None else self.input_count(params)
        if expected == VARIADIC:
            return "2 or more inputs"
        return f"{expected} input{'s' if expected != 1 else ''}"

    def integer_inputs(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        """Positions (in `inputs:` order) of the inputs that hold integers (token ids, a
        padding mask): they read int64 model inputs, and only they may."""
        return ()

    def id_high(self, params: Mapping[str, Any]) -> int | None:
        """Integer ids this op reads are drawn in [0, id_high) when the suite gives no
        `high` (an embedding's num_embeddings); None: the suite must say."""
        return None

    def shape_arg(self, in_shapes: Sequence[Shape]) -> Any:
        """What the shape and cost methods take from one shape per input: that shape for an op
        with one input, the tuple of them otherwise."""
        return tuple(in_shapes[0]) if self.arity == 1 else tuple(tuple(s) for s in in_shapes)

    def input_arg(self, xs: Sequence[Any]) -> Any:
        """What `forward` and `reference` take from one tensor per input: that tensor for an
        op with one input, the tuple of them otherwise."""
        return xs[0] if self.arity == 1 else tuple(xs)

    def layer_shape(self, layer: LayerView) -> Any:
        """`shape_arg` of the layer's input shapes."""
        return self.shape_arg(layer.input_shapes)

    def layer_flops(self, layer: LayerView) -> int:
        return self.flops(self.layer_shape(layer), layer.output_shape, layer.params)

    def layer_bytes(self, layer: LayerView) -> int:
        return self.min_bytes(
            self.layer_shape(layer), layer.output_shape, layer.params, layer.dtype
        )

    def input_numel(self, in_shape: Any) -> int:
        """Elements of every input together (`in_shape` as the shape methods get it)."""
        shapes = (in_shape,) if self.arity == 1 else in_shape
        return sum(numel(s) for s in shapes)

    def view_layer(self, in_shape: Any, p: Mapping[str, Any]) -> bool:
        """Whether a layer with this input (`shape_arg`) and these parameters is a view of its
        input: no kernel, no bytes, exempt from verdicts. `is_view` unless the op says more."""
        return self.is_view

    # ---- pure: shapes and costs -------------------------------------------------------
    def infer_shape(self, in_shape: Shape, p: Mapping[str, Any]) -> Shape:
        return in_shape

    def weight_shapes(self, in_shape: Shape, p: Mapping[str, Any]) -> dict[str, Shape]:
        return {}

    def flops(self, in_shape: Shape, out_shape: Shape, p: Mapping[str, Any]) -> int:
        return 0

    def min_bytes(self, in_shape: Shape, out_shape: Shape, p: Mapping[str, Any], dtype: str) -> int:
        """Each input read once (every input of a join), each output written once, each
        weight read once.

        With `quant: int8` the main `weight` tensor is stored as int8 (1 byte); bias and the
        other small tensors stay in floating point.
        """
        size = ITEMSIZE[dtype]
        int8 = p.get("quant") == "int8"
        weights = sum(
            numel(shape) * (1 if int8 and key == "weight" else size)
            for key, shape in self.weight_shapes(in_shape, p).items()
        )
        return (self.input_numel(in_shape) + numel(out_shape)) * size + weights

    # ---- torch: data and the computation ------------------------------------------------
    def make_weights(self, layer: LayerView, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Seeded random-normal weights in float32 (never zeros), scaled to keep outputs O(1)."""
        import torch

        weights = {}
        for key, shape in self.weight_shapes(self.layer_shape(layer), layer.params).items():
            weights[key] = torch.randn(shape, generator=generator, dtype=torch.float32)
        return weights

    def forward(
        self, x: torch.Tensor, weights: Mapping[str, torch.Tensor], layer: LayerView
    ) -> torch.Tensor:
        """The torch baseline: the call a PyTorch user writes, in the layer's dtype. `x` is a
        tuple of tensors for an op with several inputs (`input_arg`)."""
        raise NotImplementedError

    def reference(
        self, x: torch.Tensor, weights: Mapping[str, torch.Tensor], layer: LayerView
    ) -> torch.Tensor:
        """The high-precision result, from x and weights already in float64 (or float32).

        By default the torch call itself: right for ops whose call is exact data movement
        (permute, flatten) or runs in float64 on the CPU as plain math (conv, pooling, SDPA's
        math path). Ops whose result is a short formula override this with the formula.
        """
        return self.forward(x, weights, layer)
