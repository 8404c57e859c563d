"""The loaded suite: frozen, fully resolved (defaults applied, sweeps expanded,
shapes inferred). Everything after the loader reads these and nothing else.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from opbench.spec.graph import Graph, Row

DTYPES = ("float32", "float16", "bfloat16")

# Relative L2 error limits when a layer sets no `tolerance`.
DEFAULT_TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}
# Quantized layers (`quant`), each about twice the relative L2 error its rounding costs on the
# suites' data (docs/suite-format.md works each out; tests/unit/spec/test_tolerance.py computes
# them). W8A8 int8: ~1.0-1.3e-2 (both operands, 127 steps). fp8 (e4m3: 3 mantissa bits,
# relative rms rounding eps = 2.66e-2): a linear rounds x and W, ~3.7e-2 (8e-2 is 2.2x); an
# attention rounds Q, K, P and V, about sqrt(4) eps = 5.3e-2 on random data (1.5x;
# docs/perf/attention.md). int8-weight ~0.7-0.9e-2 (the weight alone); int4-weight with
# groups of 128 ~0.12 (7 steps of each group's max, the weight alone).
INT8_TOLERANCE = 3e-2
FP8_TOLERANCE = 8e-2
QUANT_TOLERANCE = {"int8": INT8_TOLERANCE, "fp8": FP8_TOLERANCE, "int8-weight": 2e-2,
                   "int4-weight": 0.25}  # fmt: skip
# A layer's tolerance above this needs `allow_loose_tolerance: true` on the layer itself.
LOOSE_TOLERANCE_LIMIT = 0.1


@dataclass(frozen=True)
class TimingSpec:
    """How one layer is timed.

    warmup_ms: time spent calling the layer before anything is recorded.
    rep_ms: wall time of one round of recorded calls, flush and launch included.
    rounds: a fixed number of rounds (comparable sample for sample), or None: sample adaptively
        until the 95% confidence interval of the median is within ±target_ci, spending at least
        min_ms and at most max_ms of wall time on the rounds.
    flush_l2: write a buffer larger than L2 before every timed call (outside the events).
    cuda_graph: replay a captured CUDA graph instead of launching from Python.
    target_ci: relative half-width of the 95% interval at which adaptive sampling stops.
    min_ms / max_ms: wall-time budget of adaptive sampling (max_ms wins if they cross).
    """

    warmup_ms: float = 25.0
    rep_ms: float = 20.0
    rounds: int | None = None
    flush_l2: bool = True
    cuda_graph: bool = False
    target_ci: float = 0.01
    min_ms: float = 100.0
    max_ms: float = 1000.0

    @property
    def adaptive(self) -> bool:
        return self.rounds is None

    def quick(self) -> TimingSpec:
        """A much shorter fixed schedule, for smoke runs (`--quick`)."""
        return replace(
            self,
            warmup_ms=min(self.warmup_ms, 2.0),
            rep_ms=min(self.rep_ms, 5.0),
            rounds=min(self.rounds or 2, 2),
        )

    def with_rounds(self, rounds: int) -> TimingSpec:
        return replace(self, rounds=rounds)


@dataclass(frozen=True)
class LayerSpec:
    """One layer of one model instance, resolved.

    name: unique within its model.
    op: registered op name (see `opbench list ops`).
    params: the op's parameters with defaults filled in.
    input_shape / output_shape: full shapes, batch dimension first; input_shape is the first
        input's (input_shapes[0]).
    reference_name: the layer's name in a reference engine's export, if it differs.
    line: line of the layer's mapping in the suite file, for messages.
    allow_loose_tolerance: the layer accepts a tolerance above LOOSE_TOLERANCE_LIMIT.
    """

    name: str
    op: str
    params: Mapping[str, Any]
    dtype: str
    backends: tuple[str, ...]
    tolerance: float | None
    target_speedup: float
    timing: TimingSpec
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    reference_name: str | None = None
    regression_threshold: float | None = None
    line: int | None = None
    allow_loose_tolerance: bool = False
    #: The values the layer reads, in order: names of earlier layers of the model, or of model
    #: inputs (`input`, a declared input's name, or `<layer>/input` for a layer that sets its
    #: own `input`). The suite loader writes them; a LayerSpec made by hand without them reads
    #: nothing in the model's graph.
    inputs: tuple[str, ...] = ()
    #: One full shape per input (batch first); empty on a hand-made LayerSpec: (input_shape,).
    input_shapes: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.input_shapes:
            object.__setattr__(self, "input_shapes", (tuple(self.input_shape),))
        elif tuple(self.input_shapes[0]) != tuple(self.input_shape):
            raise ValueError(
                f"layer {self.name!r}: input_shape {self.input_shape} is not input_shapes[0] "
                f"{self.input_shapes[0]}"
            )

    @property
    def quant(self) -> str:
        return str(self.params.get("quant", "none"))

    @property
    def default_tolerance(self) -> float:
        """The relative L2 limit of the layer's dtype (and quantization) when it sets none."""
        return QUANT_TOLERANCE.get(self.quant, DEFAULT_TOLERANCE[self.dtype])

    @property
    def effective_tolerance(self) -> float:
        return self.tolerance if self.tolerance is not None else self.default_tolerance

    @property
    def loose_tolerance(self) -> bool:
        """The suite set a tolerance above the dtype's default: every report marks it."""
        return self.effective_tolerance > self.default_tolerance


def loose_tolerance_problem(layer: LayerSpec) -> str | None:
    """Why the layer's tolerance is refused, or None: above LOOSE_TOLERANCE_LIMIT (or above its
    own default, where that is higher: int4-weight) a layer must say
    `allow_loose_tolerance: true`, so that nobody loosens a check by accident."""
    tolerance = layer.effective_tolerance
    limit = max(LOOSE_TOLERANCE_LIMIT, layer.default_tolerance)
    if tolerance <= limit or layer.allow_loose_tolerance:
        return None
    kind = layer.quant if layer.quant in QUANT_TOLERANCE else layer.dtype
    return (
        f"tolerance {tolerance:g} is above {limit:g} (the {kind} default is "
        f"{layer.default_tolerance:g}); set `allow_loose_tolerance: true` on layer "
        f"{layer.name!r} if it really cannot do better"
    )


@dataclass(frozen=True)
class GroupTolerance:
    """The limit one output of a fused group is checked at (pipeline/checks.py).

    value: the relative L2 limit; layer: the member whose tolerance it is; loose: that
    member's tolerance was set above its own default (reports mark it)."""

    value: float
    layer: str
    loose: bool


def group_tolerance(members: Sequence[LayerSpec], output: LayerSpec) -> GroupTolerance:
    """The tolerance of `output`, computed through `members` (the group's layers its value
    comes through, itself included): the loosest member's own effective tolerance. A fused
    kernel commits each member's error (an int8 GEMM's rounding under the residual add that
    ends the group), and the error of a chain is bounded by its members' errors, as the
    whole-model check takes the loosest layer (pipeline/end_to_end.py); never looser than one
    member's own documented or suite-set limit. On a tie the output's own (then the latest
    member's) is named, so a group of one dtype reads as its output layer's."""
    best = output
    for layer in reversed(members):
        if layer.effective_tolerance > best.effective_tolerance:
            best = layer
    return GroupTolerance(best.effective_tolerance, best.name, best.loose_tolerance)


@dataclass(frozen=True)
class InputData:
    """How a model input's data is drawn when it is not random-normal floats.

    dtype: "int64" (the only one so far).
    high: ids are drawn uniformly in [0, high); None: what the reading op takes
        (`Op.id_high`, an embedding's num_embeddings).
    padding_mask: a padding mask instead of ids: 1 on a prefix of each row (its length drawn
        in [1, the row's length]) and 0 after, so a query always sees at least one key.
    """

    dtype: str = "int64"
    high: int | None = None
    padding_mask: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """One model instance: a sweep value expanded into its own name, e.g. `mlp[batch=8]`.

    base_name: the name as written in the suite, before sweep expansion.
    fuse: let backends that can fuse layers (conv → batchnorm → act) do so.
    inputs: the model inputs the suite declares, (name, full shape), in order: `input` for the
        one-input form, each name of `inputs: {name: [dims]}` otherwise. Layers that set their
        own `input` add inputs of their own (see `graph`).
    graph: the model as a graph (spec/graph.py): producers, consumers, outputs, the walk.
    input_data: the declared inputs whose data is not random-normal floats (integer ids, a
        padding mask), by name; the others are absent.
    """

    name: str
    base_name: str
    batch: int
    layers: tuple[LayerSpec, ...]
    fuse: bool = False
    line: int | None = None
    inputs: tuple[tuple[str, tuple[int, ...]], ...] = ()
    input_data: tuple[tuple[str, InputData], ...] = ()

    @cached_property
    def graph(self) -> Graph:
        """Built from one row per layer (each with `inputs` set: the loader writes them) and
        the declared model inputs."""
        rows = [
            Row(layer.name, tuple(layer.inputs), tuple(layer.output_shape),
                tuple(layer.input_shapes))
            for layer in self.layers
        ]  # fmt: skip
        return Graph.from_rows(rows, dict(self.inputs))

    def data_of(self, value: str) -> InputData | None:
        """How model input `value` is drawn when it is not floats (ids, a mask), else None."""
        return dict(self.input_data).get(value)

    def layer(self, name: str) -> LayerSpec:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    models: tuple[ModelSpec, ...]
    description: str | None = None
    source: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    #: spec.problems.SuiteWarning: what is legal but most likely a mistake, one line each.
    warnings: tuple[Any, ...] = ()

    def model(self, name: str) -> ModelSpec:
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(name)
