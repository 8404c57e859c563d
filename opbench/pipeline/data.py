"""The seeded data of one model: weights, the data of every value, and high-precision references.

Computed once per model and shared by every backend, so each backend sees the same numbers.

Data follows the graph (spec/graph.py). Every value (a model input, or a layer's output) has
seeded random-normal data of its shape, drawn once: the inputs of a layer are its producers'
data, so two layers reading one value see the same tensor, and a model input is the same
tensor in the per-layer checks and in the whole-model run. A reader whose dtype differs from
another's gets the same numbers rounded to its own dtype.
"""

from __future__ import annotations

from typing import Any

from opbench.backends.base import torch_dtype
from opbench.ops.base import numel
from opbench.ops.inputs import generator, make_ids, make_input, make_padding_mask, seed_for
from opbench.ops.registry import get_op
from opbench.spec.model import ModelSpec, SuiteSpec

# The check draws of each (suite, model, value, check name) this process has made. A check's
# input must be one no other computation has seen, so that no freed memory can hold its answer:
# the same suite run twice in one process (tests do), or a value read by two layers, would
# otherwise draw it again, after a kernel's scratch had left its answer in memory malloc may
# hand back. The first draw keeps the plain seed: a failure on it reproduces in a new process.
_DRAWS: dict[tuple[str, ...], int] = {}


def _check_seed(names: tuple[str, ...], check: str) -> list[str]:
    key = (*names, check)
    n = _DRAWS.get(key, 0)
    _DRAWS[key] = n + 1
    return [check] if n == 0 else [check, f"draw {n}"]


# On a GPU run the reference runs on the GPU, in float64: the host's cores are left to the
# ranks that share them (a float64 GEMM on the CPU also takes minutes where the GPU takes
# milliseconds). Above this many FLOPs (or elements) it runs in float32 there instead: float64
# runs at a fraction of the tensor-core rate, and doubles the memory.
GPU_FLOAT64_FLOPS = 2e13
GPU_FLOAT64_ELEMENTS = 256 * 1024 * 1024
# The references kept per model, so that every backend of a layer is checked against one
# computed once.
REFERENCE_CACHE_BYTES = 1 << 30


class ModelData:
    """Seeded weights, value data and references of one model, computed once and shared by
    backends."""

    def __init__(self, suite: SuiteSpec, model: ModelSpec, device: str) -> None:
        self.suite, self.model, self.device = suite, model, device
        self.graph = model.graph
        self._weights: dict[int, dict[str, Any]] = {}
        self._values: dict[tuple[str, str], Any] = {}
        self._refs: dict[tuple[int, ...], tuple[dict[int, Any], str]] = {}
        self._model_ref: tuple[dict[int, Any], str] | None = None

    # ---- weights and data ------------------------------------------------------------------
    def weights(self, index: int) -> dict[str, Any]:
        """float32 weights on the device. Seeded by the model's base name: sweeps share them."""
        if index not in self._weights:
            layer = self.model.layers[index]
            gen = generator(seed_for(self.suite.name, self.model.base_name, layer.name, "weights"))
            cpu = get_op(layer.op).make_weights(layer, gen)
            self._weights[index] = {k: v.to(self.device) for k, v in cpu.items()}
        return self._weights[index]

    def value(self, name: str, dtype: str, check: str | None = None):
        """The data of value `name` (a model input, or what a layer's output is stood in by in
        per-layer checks) in `dtype`, on the device: fresh random normal of its shape.

        check: a name (the backend's) for a second, differently seeded draw of the same shape
            that the correctness check also runs; made afresh, never cached. Each such draw in
            the process is a new one (the first is the same in every process): see _DRAWS.
        """
        key = (name, dtype)
        if check is None and key in self._values:
            return self._values[key]
        graph = self.graph
        shape = graph.inputs[name] if graph.is_input(name) else graph.out_shapes[graph.index(name)]
        names = (self.suite.name, self.model.name, name, "data")
        seed = seed_for(*names, *(_check_seed(names, check) if check else []))
        drawn = self.model.data_of(name)
        if drawn is not None:  # integer ids or a padding mask, whatever the reader's dtype
            x = self._integers(name, shape, seed, drawn).to(self.device)
        else:
            x = make_input(shape, seed).to(device=self.device, dtype=torch_dtype(dtype))
        if check is None:
            self._values[key] = x
        return x

    def _integers(self, name: str, shape, seed: int, drawn):
        """An int64 model input: a padding mask, or ids in [0, high) (high: the suite's, else
        the smallest the reading ops take, so every reader gets ids in its range)."""
        if drawn.padding_mask:
            return make_padding_mask(shape, seed)
        high = drawn.high
        if high is None:
            highs = [
                get_op(layer.op).id_high(layer.params)
                for layer in self.model.layers
                if name in layer.inputs
            ]
            known = [h for h in highs if h is not None]
            if not known:
                raise ValueError(f"model input {name!r}: int64 ids need `high` (no reader says)")
            high = min(known)
        return make_ids(shape, seed, high)

    def inputs(self, index: int, check: str | None = None) -> tuple[Any, ...]:
        """The layer's inputs, one per value it reads, in its dtype: its producers' data."""
        layer = self.model.layers[index]
        return self._draw(layer.inputs, lambda v: layer.dtype, check)

    def input(self, index: int, check: str | None = None):
        """The layer's first input (its only one, for a layer of a one-input op)."""
        return self.inputs(index, check)[0]

    def group_inputs(self, indices: tuple[int, ...], check: str | None = None) -> tuple[Any, ...]:
        """The inputs of a group of layers built as one (`Graph.external_inputs`, in order of
        first use), each in the dtype of the group's first layer that reads it."""
        values = self.graph.external_inputs(indices)
        return self._draw(values, lambda v: self._reader_dtype(v, indices), check)

    def _draw(self, values, dtype_of, check: str | None) -> tuple[Any, ...]:
        """One tensor per value name, the same tensor where a name repeats (`add [x, x]`):
        a check's second draws are fresh on every call, so each name is drawn once here."""
        drawn: dict[str, Any] = {}
        for v in values:
            if v not in drawn:
                drawn[v] = self.value(v, dtype_of(v), check)
        return tuple(drawn[v] for v in values)

    def model_inputs(self) -> dict[str, Any]:
        """Every model input, in the dtype of the first layer that reads it: what the whole
        model runs on. (A reader of another dtype casts it, as a model would.)"""
        return {
            name: self.value(name, self._reader_dtype(name, tuple(self.graph.walk())))
            for name in self.graph.inputs
            if name in self.graph.last_reader
        }

    def _reader_dtype(self, value: str, indices: tuple[int, ...]) -> str:
        for i in sorted(indices):
            if value in self.model.layers[i].inputs:
                return self.model.layers[i].dtype
        raise KeyError(f"no layer of {indices} reads {value!r}")

    # ---- references ------------------------------------------------------------------------
    def reference(self, indices: tuple[int, ...], xs: tuple[Any, ...] | None = None):
        """The group's output computed in high precision from the same (rounded) inputs and
        weights. xs: other inputs than the group's own (the check's second input, one per
        `group_inputs`); not cached."""
        refs, kind = self.references(indices, xs)
        return refs[self.graph.group_outputs(indices)[-1]], kind

    def references(self, indices: tuple[int, ...], xs: tuple[Any, ...] | None = None):
        """Every output of the group (`Graph.group_outputs`: the result, and a fused group's
        other outputs) by layer index, in high precision, and how they were computed."""
        if xs is None and indices in self._refs:
            return self._refs[indices]
        own = xs is None
        given = self.group_inputs(indices) if own else xs
        sources = dict(zip(self.graph.external_inputs(indices), given, strict=True))
        result = self._evaluate(sorted(indices), sources, self.graph.group_outputs(indices))
        if own:
            self._keep_reference(indices, result)
        return result

    def _keep_reference(self, indices: tuple[int, ...], result) -> None:
        """Keep references for the next backend of the same layer (each backend checks against
        the same one), dropping the oldest past REFERENCE_CACHE_BYTES: those of large layers
        are big, on the GPU too."""
        self._refs[indices] = result
        sizes = {
            key: sum(t.numel() * t.element_size() for t in refs.values())
            for key, (refs, _) in self._refs.items()
        }
        while len(self._refs) > 1 and sum(sizes.values()) > REFERENCE_CACHE_BYTES:
            oldest = next(iter(self._refs))
            del self._refs[oldest]
            del sizes[oldest]

    def model_reference(self) -> tuple[dict[int, Any], str]:
        """The whole model in high precision from its seeded inputs: each model output (by
        layer index) and how it was computed. Between layers every value is rounded to the
        dtype of the layer that made it, as the backends' outputs are. Computed once."""
        if self._model_ref is None:
            order = list(self.graph.walk())
            self._model_ref = self._evaluate(order, self.model_inputs(), self.graph.outputs)
        return self._model_ref

    def _evaluate(self, order: list[int], sources: dict[str, Any], keep: tuple[int, ...]):
        """Run `order` (layer indices, walk order) in float64 (on the GPU in a GPU run, in
        float32 there when large; on the CPU otherwise) from `sources` (value name → tensor),
        freeing each value after its last reader in `order`; the outputs of the layers in
        `keep`, and the kind."""
        import torch

        layers = [self.model.layers[i] for i in order]
        flops = sum(get_op(lay.op).layer_flops(lay) for lay in layers)
        big = max(
            sum(numel(s) for s in lay.input_shapes) + numel(lay.output_shape) for lay in layers
        )
        if not self.device.startswith("cuda"):
            return self._walk(order, sources, keep, "cpu", torch.float64), "float64-cpu"
        if flops > GPU_FLOAT64_FLOPS or big > GPU_FLOAT64_ELEMENTS:
            found = self._walk(order, sources, keep, self.device, torch.float32)
            return found, "float32-cuda"
        try:
            found = self._walk(order, sources, keep, self.device, torch.float64)
            return found, "float64-cuda"
        except (RuntimeError, NotImplementedError):
            # An op with no float64 kernel on the GPU: the CPU computes it, as before.
            return self._walk(order, sources, keep, "cpu", torch.float64), "float64-cpu"

    def _walk(self, order, sources, keep, dev, dtype) -> dict[int, Any]:
        import torch

        def step(i: int, args: tuple[Any, ...]) -> tuple[Any, Any]:
            layer = self.model.layers[i]
            op = get_op(layer.op)
            want = torch_dtype(layer.dtype)
            xs = [_as_read(x, arrives, want, dev, dtype) for x, arrives in args]
            rounded = {k: v.to(want).to(dev, dtype) for k, v in self.weights(i).items()}
            return op.reference(op.input_arg(xs), rounded, layer), want

        # Each source as the reader sees it: rounded to the dtype it arrives in.
        env = {v: (x, x.dtype) for v, x in sources.items()}
        with torch.no_grad(), _no_tf32():
            found = self.graph.run(step, env, order, keep)
        return {i: out for i, (out, _) in found.items()}


def _as_read(x, made, want, dev, dtype):
    """A value as a reader sees it: rounded to the dtype it was made in, then to the reader's,
    then computed in `dtype` on `dev`. Integer data (ids, masks) stays integers."""
    if not x.is_floating_point():
        return x.to(dev)
    return x.to(made).to(want).to(dev, dtype)


class _no_tf32:
    def __enter__(self):
        import torch

        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved
