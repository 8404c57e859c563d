"""A whole model's forward over its graph, from the groups one backend built.

The forward walks the groups in an order of the graph (`Graph.order_groups`: each after the
groups that make its inputs) and returns every model output (the layers nothing reads, in walk
order), so that nothing a model computes can be left out of its time.

Each group reads its inputs from the model inputs (the seeded data, in the dtype of the group's
reader, prepared once where the backend asks, e.g. channels_last) or from the outputs of
earlier groups:
- when every input is the same tensor on every call (a model input, or an output a binding
  writes into a buffer it allocated: `Bound.out`), the group is bound once to them and its step
  only launches (`Built.bind_input(*xs).launch`): the layer runs at the launch floor;
- otherwise its step calls `Built.fn(*xs)` with the tensors of this call, as a model passes
  them along. A layer is never bound to a stale copy of an input: it would read cold memory
  where the model reads the output just written.
Where the suite changes dtype between a producer and its reader, the reader casts (a bound
buffer is cast into a buffer of its own, so the reader stays bound).

Each value is dropped after its last reader, so what the forward allocates per call is freed
as soon as it can be: its peak is its live values, not the sum of every layer's output. A group
whose Built `takes_out` is bound to write into a buffer planned by liveness (pipeline/arena.py,
spec/buffer_plan.py): groups whose values are never alive together share bytes of one arena,
and every bound launch's scratch shares one block. A group that allocates its own output keeps
it as long as its binding, like a CUDA graph's static buffers. The output of a group that is a
view of fixed inputs (reshape, flatten, a contiguous slice) is fixed too, so its readers bind.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opbench.backends.base import Built, torch_dtype
from opbench.pipeline.arena import ForwardMemory
from opbench.pipeline.data import ModelData
from opbench.spec.model import ModelSpec

Env = dict[str, Any]
Step = Callable[[Env], None]


@dataclass(frozen=True)
class Forward:
    """A whole model's forward, ready to call.

    call: one forward; returns every model output, in `Graph.outputs` order.
    buffers: the tensors bindings allocated that every call writes (poisoned before a checked
        call, so an element the forward never writes shows): the planned arena, the shared
        scratch and the buffers groups allocated themselves.
    check: what a checked call runs instead of `call`, when that is not `call` itself (a
        replay of a captured graph of it); None: `call`.
    memory: the planned buffers (pipeline/arena.py); None for a compiled forward.
    note: what the result's message should say about how the forward runs (its layout).
    """

    call: Callable[[], tuple[Any, ...]]
    buffers: tuple[Any, ...] = ()
    check: Callable[[], tuple[Any, ...]] | None = None
    memory: ForwardMemory | None = None
    note: str | None = None


def eager_forward(
    model: ModelSpec,
    built: Mapping[tuple[int, ...], Built],
    data: ModelData,
    plan_memory: bool = True,
):
    """The forward from the groups' bound launches (see the module doc). Runs each group once
    while it is set up (`Graph.run_groups`, the one walker), to learn which outputs are fixed
    buffers. ValueError when the groups cannot run in any order, or a group has more than one
    output. plan_memory=False: each group allocates its own buffers (the forward before the
    plan, for comparison)."""
    graph = model.graph
    order = graph.order_groups(built)
    memory = ForwardMemory.of(model, order, built, data.device, plan_memory)
    setup = _Setup(model, built, data, memory, dict(zip(order, graph.frees(order), strict=True)))
    # The step draws model inputs itself (in its reader's dtype, prepared by its backend).
    graph.run_groups(setup.group, dict.fromkeys(graph.inputs), order)
    setup.bind_into_scratch()
    steps = setup.steps
    outputs = tuple(graph.names[i] for i in graph.outputs)

    def forward() -> tuple[Any, ...]:
        env: Env = {}
        for step in steps:
            step(env)
        return tuple(env[o] for o in outputs)

    return Forward(forward, (*memory.buffers, *setup.buffers), memory=memory)


class _Setup:
    """The forward's steps, made group by group as the walker runs the groups once.

    fixed: the values that are the same tensor on every call; steps: the forward's steps;
    buffers: tensors groups allocated themselves; rebind: groups bound before the scratch block
    knew its size, to bind again into it: (step index, bind, group, name, others, frees)."""

    def __init__(self, model, built, data, memory: ForwardMemory, last_reads) -> None:
        self.model, self.built, self.data, self.memory = model, built, data, memory
        self.graph = model.graph
        self.last_reads = last_reads  # group -> the values it reads for the last time
        self.dtype_of = {i: torch_dtype(layer.dtype) for i, layer in enumerate(model.layers)}
        self.fixed: dict[str, Any] = {}
        self.steps: list[Step] = []
        self.buffers: list[Any] = []
        self.rebind: list[
            tuple[int, Callable[[], Any], Any, str, tuple[str, ...], tuple[str, ...]]
        ] = []

    def group(self, group: tuple[int, ...], args: tuple[Any, ...]) -> dict[int, Any]:
        """Append the group's step and run it once on `args` (this call's values of its
        external inputs); its outputs by layer index."""
        graph = self.graph
        made = graph.group_outputs(group)
        name = graph.names[made[-1]]
        others = tuple(graph.names[i] for i in made[:-1])  # a fused group's other outputs
        values = graph.external_inputs(group)
        sources = tuple(self._source(group, v) for v in values)
        frees = tuple(v for v in self.last_reads[group] if not graph.is_input(v))
        if all(x is not None for _, x, _ in sources):
            out, extra = self._bound(group, tuple(x for _, x, _ in sources), name, others, frees)
        elif others:
            raise ValueError(
                f"the group {group} has several outputs ({', '.join((*others, name))}) and "
                "inputs made anew on every call: only a bound group can hand on its others"
            )
        else:
            step = _call_step(self.built[group].fn, sources, name, frees)
            self.steps.append(step)
            env = dict(zip(values, args, strict=True))
            step(env)
            out, extra = env[name], {}
        return {made[-1]: out, **{graph.index(v): t for v, t in extra.items()}}

    def _source(self, group: tuple[int, ...], value: str) -> tuple[str, Any, Any]:
        """(value, its fixed tensor or None, the dtype its reader in the group wants)."""
        graph = self.graph
        reader = next(i for i in group if value in graph.reads[i])
        want = self.dtype_of[reader]
        x = None
        if graph.is_input(value):
            x = self.data.value(value, self.model.layers[reader].dtype)
            x = self.built[group].prepared([x])[0]  # once, before timing, as the layers' runs
        elif value in self.fixed:
            x = self.fixed[value]
            if x.dtype != want:
                x = _cast_step(x, want, self.steps, {})
        return value, x, want

    def _bound(self, group, xs, name: str, others, frees) -> tuple[Any, dict[str, Any]]:
        """Bind the group to its fixed inputs `xs`, append its launch step, launch it once:
        its output and its other outputs' buffers."""
        bound, bind, planned = _binder(self.built[group], xs, self.memory, name, others)
        out = bound.launch()
        if bound.out is not None and out.data_ptr() == bound.out.data_ptr():
            self.fixed[name] = out  # only a buffer the backend owns is the same next call
            if not planned:
                self.buffers.append(bound.out)
        elif bound.out is None and _views(out, xs):
            self.fixed[name] = out  # a view of fixed inputs: the same tensor every call
        extra = _extra_outputs(group, others, bound.extra)
        for value, tensor in extra.items():
            self.fixed[value] = tensor
            if not planned:
                self.buffers.append(tensor)
        if planned and self.memory.scratch.used:
            self.rebind.append((len(self.steps), bind, group, name, others, frees))
        self.steps.append(_launch_step(bound.launch, name, frees, extra))
        return out, extra

    def bind_into_scratch(self) -> None:
        """The shared scratch block sized to the groups' need, and those groups bound again
        into it; again once more if their need shrank (a first bind's tuning asks for every
        candidate's scratch, later binds reuse the choice)."""
        scratch = self.memory.scratch
        for _ in range(3):
            if not (self.rebind and scratch.fit()):
                break
            scratch.need = 0
            for at, bind, group, name, others, frees in self.rebind:
                bound = bind()
                extra = _extra_outputs(group, others, bound.extra)
                self.steps[at] = _launch_step(bound.launch, name, frees, extra)
        if self.rebind:
            # The launches the rebinds replaced may sit in reference cycles (closures, bound
            # methods); their private scratch stays allocated until Python's cycle collector
            # happens to run. On an H100 that was 171 MiB of NHWC copies in ResNet-50 b32's
            # peak.
            gc.collect()


def _binder(
    built: Built, xs: tuple[Any, ...], memory: ForwardMemory, name: str, others: tuple[str, ...]
) -> tuple[Any, Callable[[], Any], bool]:
    """The group bound to `xs` (its scratch in the shared block), the bind step that made it
    (to bind again once the block is sized), and whether it writes planned buffers (its
    outputs' bytes in the arena). A group whose kernel refuses the planned buffer (ValueError:
    a layout it cannot write) allocates its own."""
    out = memory.out_for(name) if built.takes_out else None
    extra = tuple(memory.out_for(v) for v in others)

    def bind_planned() -> Any:
        with memory.binding():
            return built.bind_input(*xs, out=out, extra=extra)

    def bind_own() -> Any:
        with memory.binding():
            return built.bind_input(*xs)

    if out is not None and all(e is not None for e in extra):
        try:
            return bind_planned(), bind_planned, True
        except ValueError:
            pass
    return bind_own(), bind_own, False


def _views(out: Any, xs: tuple[Any, ...]) -> bool:
    """Whether `out` shares memory with one of the tensors `xs` (a view of it)."""
    storage = getattr(out, "untyped_storage", None)
    if storage is None:
        return False
    ptr = storage().data_ptr()
    return any(ptr == x.untyped_storage().data_ptr() for x in xs)


def _extra_outputs(group, others: tuple[str, ...], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The buffers of a fused group's other outputs (`Bound.extra`), each one required: a
    value its readers would otherwise never get."""
    missing = [v for v in others if v not in extra]
    if missing:
        raise ValueError(f"the group {group} gives no buffer for its outputs {missing}")
    return {v: extra[v] for v in others}


def _launch_step(
    launch: Callable[[], Any], name: str, frees: tuple[str, ...], extra: Mapping[str, Any]
) -> Step:
    if extra:  # fixed buffers the same launch writes: handed on under their names

        def step_with_extra(env: Env) -> None:
            env[name] = launch()
            env.update(extra)
            for v in frees:
                del env[v]

        return step_with_extra
    if not frees:

        def step(env: Env) -> None:
            env[name] = launch()

        return step

    def step_and_free(env: Env) -> None:
        env[name] = launch()
        for v in frees:
            del env[v]

    return step_and_free


def _call_step(
    fn: Callable[..., Any], sources: tuple[tuple[str, Any, Any], ...], name: str, frees
) -> Step:
    def step(env: Env) -> None:
        xs = []
        for value, x, want in sources:
            if x is None:
                x = env[value]
                if x.dtype != want:
                    x = x.to(want)  # the suite changes dtype here; a model casts too
            xs.append(x)
        env[name] = fn(*xs)
        for v in frees:
            env.pop(v, None)

    return step


def _cast_step(source: Any, dtype: Any, steps: list[Step], env: Env) -> Any:
    """Append a step that casts `source` (a fixed buffer) into a fixed buffer of its own; run
    it once now. Returns the new buffer."""
    import torch

    cast = torch.empty_like(source, dtype=dtype)

    def step(env: Env, cast=cast, source=source) -> None:
        cast.copy_(source)

    steps.append(step)
    step(env)
    return cast
