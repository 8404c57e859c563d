"""Where each value of a whole-model forward lives: output buffers planned by liveness.

A forward runs its steps (the backend's groups, in `Graph.order_groups`) one after another on
one stream. A step writes its outputs into buffers and reads values earlier steps wrote. A
value's buffer is needed from the step that writes it to the last step that reads it (or
reads a view of it); two values whose lifetimes do not overlap can share bytes. This module
assigns each planned value a byte offset in one arena, once, before anything is bound: the
addresses are fixed for every call, so bound launches and CUDA-graph captures stay valid.

- A step's outputs live from the step to their last reader, inclusive at both ends: a step
  never writes over a value it reads (its inputs and outputs are alive together).
- A view (reshape, flatten, a contiguous slice: no bytes of its own) keeps what it views
  alive while the view is read: reading the view extends the lifetime of its bases. A step
  whose output the plan does not place (a backend's own buffer, or a view) is declared as a
  view of all its inputs: conservative, since it might be one.
- The model's outputs (`keep`) live to the end of the forward: the caller reads them.
- Placement: largest buffer first, each at the lowest aligned offset where it overlaps no
  placed buffer whose lifetime overlaps its own (greedy by size, as TFLite's arena planner).
  The arena's size is at least `live_peak` (the most bytes alive at once) and at most the
  sum of the buffers (`separate`), what one buffer per value takes.

Pure Python over names and byte counts: no torch. The pipeline (pipeline/forward.py) builds
the steps from the graph and the backend's groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opbench.spec.graph import Graph

# Byte alignment of every planned buffer: the CUDA caching allocator's block size, so that a
# buffer carved from the arena is as aligned as one torch.empty gives (kernels vectorise and
# Triton specialises on 16-byte alignment).
ALIGN = 512


def aligned(nbytes: int, align: int = ALIGN) -> int:
    """nbytes rounded up to a multiple of align."""
    return -(-nbytes // align) * align


@dataclass(frozen=True)
class Step:
    """One step of the forward, in run order.

    writes: the values the step writes into planned buffers, with their byte counts (a fused
        group with a second output writes two).
    reads: the values it reads (model inputs and values of no step are ignored).
    views: values the step makes without bytes of their own, each with the values it may be a
        view of: reading it reads them.
    """

    writes: tuple[tuple[str, int], ...] = ()
    reads: tuple[str, ...] = ()
    views: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class BufferPlan:
    """offsets: planned value -> byte offset in the arena. sizes: its bytes (unaligned).
    lifetimes: planned value -> (first step, last step) it is alive, inclusive; the model's
    outputs to len(steps). size: the arena's bytes. separate: the bytes of one aligned
    buffer per value. live_peak: the most aligned bytes alive at any one step."""

    offsets: Mapping[str, int]
    sizes: Mapping[str, int]
    lifetimes: Mapping[str, tuple[int, int]]
    size: int
    separate: int
    live_peak: int

    def shares(self, a: str, b: str) -> bool:
        """Whether the buffers of a and b overlap in the arena."""
        a0, b0 = self.offsets[a], self.offsets[b]
        return a0 < b0 + self.sizes[b] and b0 < a0 + self.sizes[a]


def plan_buffers(steps: Sequence[Step], keep: Iterable[str] = (), align: int = ALIGN) -> BufferPlan:
    """The arena plan of `steps` (see the module doc); `keep`: values alive to the end.
    ValueError when a value is written twice."""
    sizes: dict[str, int] = {}
    start: dict[str, int] = {}
    bases: dict[str, frozenset[str]] = {}  # value -> the planned buffers it may read
    for k, step in enumerate(steps):
        for name, nbytes in step.writes:
            if name in start or name in bases:
                raise ValueError(f"the value {name!r} is written by two steps")
            if nbytes < 0:
                raise ValueError(f"the value {name!r} has a negative size")
            sizes[name], start[name] = nbytes, k
            bases[name] = frozenset((name,))
        for name, of in step.views:
            if name in bases:
                raise ValueError(f"the value {name!r} is written by two steps")
            bases[name] = frozenset().union(*(bases.get(v, frozenset()) for v in of))
    end = dict(start)
    for k, step in enumerate(steps):
        for value in step.reads:
            for base in bases.get(value, ()):
                end[base] = max(end[base], k)
    for value in keep:
        for base in bases.get(value, ()):
            end[base] = len(steps)
    lifetimes = {v: (start[v], end[v]) for v in sizes}
    offsets = _place(sizes, lifetimes, align)
    size = max((offsets[v] + aligned(sizes[v], align) for v in sizes), default=0)
    return BufferPlan(
        offsets=offsets,
        sizes=sizes,
        lifetimes=lifetimes,
        size=size,
        separate=sum(aligned(n, align) for n in sizes.values()),
        live_peak=_live_peak(sizes, lifetimes, len(steps), align),
    )


def _place(
    sizes: Mapping[str, int], lifetimes: Mapping[str, tuple[int, int]], align: int
) -> dict[str, int]:
    """Greedy by size: each buffer at the lowest offset clear of every placed buffer alive
    at the same time."""
    offsets: dict[str, int] = {}
    order = sorted(sizes, key=lambda v: (-sizes[v], lifetimes[v][0], v))
    for value in order:
        first, last = lifetimes[value]
        need = aligned(sizes[value], align)
        busy = sorted(
            (offsets[o], offsets[o] + aligned(sizes[o], align))
            for o in offsets
            if lifetimes[o][0] <= last and first <= lifetimes[o][1]
        )
        at = 0
        for lo, hi in busy:
            if at + need <= lo:
                break
            at = max(at, hi)
        offsets[value] = at
    return offsets


def _live_peak(
    sizes: Mapping[str, int], lifetimes: Mapping[str, tuple[int, int]], steps: int, align: int
) -> int:
    return max(
        (
            sum(aligned(sizes[v], align) for v, (a, b) in lifetimes.items() if a <= k <= b)
            for k in range(steps + 1)
        ),
        default=0,
    )


def forward_steps(
    graph: Graph,
    order: Sequence[Sequence[int]],
    planned: Iterable[Sequence[int]],
    nbytes: Sequence[int],
) -> list[Step]:
    """The steps of a forward that runs the groups in `order` (`Graph.order_groups`): each
    group reads its external inputs; a group in `planned` writes its outputs (the layers of
    it read outside it, or model outputs: `Graph.group_outputs`) into planned buffers of
    `nbytes[layer]` bytes; any other group's outputs are taken as views of its inputs."""
    placed = {tuple(sorted(g)) for g in planned}
    steps = []
    for group in order:
        reads = graph.external_inputs(group)
        made = tuple(graph.names[i] for i in graph.group_outputs(group))
        if tuple(sorted(group)) in placed:
            writes = tuple((graph.names[i], nbytes[i]) for i in graph.group_outputs(group))
            steps.append(Step(writes=writes, reads=reads))
        else:
            steps.append(Step(reads=reads, views=tuple((v, reads) for v in made)))
    return steps
