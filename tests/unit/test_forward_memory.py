"""The whole-model forward's planned memory on the CPU (Triton interpreter): the graph suites'
models (at batch 1) run with their output buffers planned by liveness (pipeline/arena.py)
give, from poisoned buffers, bit for bit the outputs of the forward with one buffer per group,
pass the whole-graph check, and hold fewer bytes; the end-to-end rows carry the planned
bytes."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import opbench.pipeline.end_to_end as end_to_end
from opbench.backends.registry import get_backend
from opbench.kernels.scratch import ScratchArena, scratch
from opbench.measure.timer import Measurement
from opbench.pipeline import ModelData, RunOptions, time_end_to_end
from opbench.pipeline.forward import eager_forward
from opbench.spec.buffer_plan import aligned
from opbench.spec.load import load_suite, load_suite_text

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "tests" / "data" / "suites"
FILES = {
    "joins": SUITES / "joins.yaml",
    "graph_blocks": SUITES / "graph_blocks.yaml",
    "graphs": SUITES / "graphs.yaml",
    "quickstart": ROOT / "suites" / "quickstart.yaml",
}


def built_groups(model, data, backend_name: str):
    backend = get_backend(backend_name)
    return {
        tuple(g): backend.build([model.layers[i] for i in g], [data.weights(i) for i in g], "cpu")
        for g in backend.plan(model)
    }


def held_bytes(forward) -> int:
    """The bytes a forward keeps between calls: its buffers (arena, scratch, own outputs),
    each rounded up to 512 as the CUDA caching allocator rounds every allocation."""
    seen, total = set(), 0
    for b in forward.buffers:
        key = b.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += aligned(b.untyped_storage().nbytes())
    return total


def tiny_networks():
    """The shipped networks' structure at tiny size (tests/unit/test_networks_cpu.py)."""
    from test_networks_cpu import tiny_suite

    return load_suite_text(tiny_suite(), "tiny_networks.yaml")


def at_batch_one(path: Path):
    """The suite with every model at batch 1: the same graphs, so the same liveness and the
    same plan, with half the programs (or fewer) for the interpreter to run."""
    text = re.sub(r"^(\s+batch:) \d+$", r"\1 1", path.read_text(), flags=re.MULTILINE)
    return load_suite_text(text, path.name)


def models():
    for label, path in FILES.items():
        suite = load_suite(path)
        for model in suite.models:
            yield pytest.param(path, model.name, id=f"{label}-{model.name}")
    for model in tiny_networks().models:
        yield pytest.param(None, model.name, id=f"networks-{model.name}")


@pytest.mark.parametrize(("path", "name"), list(models()))
def test_planned_forward_gives_the_same_outputs_in_fewer_bytes(path, name) -> None:
    suite = at_batch_one(path) if path is not None else tiny_networks()
    model = next(m for m in suite.models if m.name == name)
    data = ModelData(suite, model, "cpu")
    built = built_groups(model, data, "triton")
    before = eager_forward(model, built, data, plan_memory=False)
    expected = [o.clone() for o in before.call()]
    planned = eager_forward(model, built, data)
    # One call, from poisoned buffers (the arena and the scratch block too): its outputs bit
    # for bit those of the unplanned forward, and right against the whole-graph reference.
    seen = []

    def call():
        outs = planned.call()
        seen.append([o.clone() for o in outs])
        return outs

    correctness = end_to_end._check(replace(planned, call=call), data)
    (outs,) = seen
    assert len(outs) == len(expected)
    for out, want in zip(outs, expected, strict=True):
        assert torch.equal(out, want), f"{name}: the plan changed an output"
    assert correctness.passed, correctness.reasons
    memory = planned.memory
    assert memory is not None and memory.plan is not None
    plan = memory.plan
    assert memory.separate_bytes == plan.separate
    assert plan.live_peak <= plan.size <= plan.separate
    assert held_bytes(planned) <= held_bytes(before)
    if len(plan.offsets) >= 3:  # a chain of three planned values reuses bytes
        assert plan.size < plan.separate, (name, plan.size, plan.separate)
        assert held_bytes(planned) < held_bytes(before)


def test_the_rows_say_what_the_plan_holds(monkeypatch) -> None:
    suite = load_suite(FILES["joins"])
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")

    def fake_timer(fn, timing, device, **options):
        fn()
        return Measurement(((0.5, 0.7),) * timing.rounds, "fake")

    monkeypatch.setattr(end_to_end, "time_callable", fake_timer)
    rows = {}
    for backend in ("torch", "triton"):
        built = built_groups(model, data, backend)
        eager, _ = time_end_to_end(model, backend, built, data, RunOptions(), get_backend(backend))
        assert eager.correct, eager.correctness
        rows[backend] = eager
    assert rows["torch"].planned_bytes is None and rows["torch"].separate_bytes is None
    triton = rows["triton"]
    assert triton.planned_bytes is not None and triton.separate_bytes is not None
    assert 0 < triton.planned_bytes <= triton.separate_bytes
    assert triton.peak_bytes is None, "no device memory is measured on the CPU"


def test_scratch_is_shared_between_groups_and_private_outside_an_arena() -> None:
    alone = scratch((4, 3), torch.float16, "cpu")
    assert alone.shape == (4, 3) and alone.dtype == torch.float16
    arena = ScratchArena("cpu")
    with arena.group():  # no block yet: a private buffer, and the need is learnt
        first = scratch((10,), torch.float32, "cpu")
        second = scratch((7,), torch.float16, "cpu")
    assert arena.missed and arena.need == 512 + 14
    assert arena.fit() and arena.nbytes == arena.need
    with arena.group():
        a = scratch((10,), torch.float32, "cpu")
        b = scratch((7,), torch.float16, "cpu")
    with arena.group():
        c = scratch((3,), torch.float32, "cpu")
    block = arena.block.data_ptr()
    assert a.data_ptr() == block == c.data_ptr(), "every group's scratch starts at the block"
    assert b.data_ptr() == block + 512, "within a group, buffers never overlap"
    assert first.data_ptr() != block and second.data_ptr() != block
    assert not arena.fit(), "the need did not change"


CHAIN = (
    "name: t\ndefaults: {dtype: float32, backends: [torch]}\nmodels:\n  - name: m\n"
    "    batch: 3\n    input: [5]\n    layers:\n"
    "      - {name: fc1, op: linear, out_features: 6}\n"
    "      - {name: act, op: relu}\n"
    "      - {name: fc2, op: linear, out_features: 7}\n"
    "      - {name: flat, op: reshape, shape: [7, 1]}\n"
    "      - {name: act2, op: relu}\n"
)


class ScratchUser:
    """A stand-in group that takes its out and copies its input through a scratch buffer
    before computing: what an NHWC copy or a split-K partial does."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.scratches: list = []
        self.outs: list = []

    def bind(self, x, out=None):
        from opbench.backends.base import Bound

        room = scratch(x.shape, x.dtype, x.device)
        self.scratches.append(room)
        self.outs.append(out)
        fn = self.inner.fn

        def launch():
            room.copy_(x)
            return out.copy_(fn(room))

        return Bound(launch, out)


def test_groups_bound_before_the_scratch_was_sized_are_bound_again_into_the_shared_block():
    from opbench.backends.base import Built

    suite = load_suite_text(CHAIN)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    plain = built_groups(model, data, "torch")
    users = {g: ScratchUser(b) for g, b in plain.items() if model.layers[g[0]].op != "reshape"}
    built = {
        g: Built(fn=b.fn, bind=users[g].bind, takes_out=True) if g in users else b
        for g, b in plain.items()
    }
    forward = eager_forward(model, built, data)
    block = forward.memory.scratch.block
    # The largest group's need (each takes one float32 buffer of its input's shape).
    assert block is not None and block.numel() == max(
        u.scratches[0].numel() * 4 for u in users.values()
    )
    for user in users.values():
        assert len(user.scratches) == 2, "bound once privately, once into the block"
        assert user.scratches[-1].data_ptr() == block.data_ptr()
        assert user.outs[0] is user.outs[-1], "the rebind writes the same planned buffer"
    # flat (a view of fc2's planned buffer) is fixed: act2 binds to it.
    act2 = users[(4,)]
    assert act2.outs[-1] is not None
    fc2_out = users[(2,)].outs[-1]
    assert act2.scratches[-1].shape == (3, 7, 1)
    assert forward.memory.plan.lifetimes["fc2"][1] >= 4 - 1, "read through the view by act2"
    outs = forward.call()
    want = data.input(0)
    for i in range(5):
        want = plain[(i,)].fn(want)
    assert torch.equal(outs[0], want)
    assert any(b is block for b in forward.buffers), (
        "the scratch block is poisoned before a checked call"
    )
    correctness = end_to_end._check(forward, data)
    assert correctness.passed, correctness.reasons
    assert fc2_out.data_ptr() != outs[0].data_ptr()


class CyclicScratchUser(ScratchUser):
    """A ScratchUser whose bound launch sits in a reference cycle, as a closure or a bound
    method of a launch object can: only Python's cycle collector frees it."""

    def bind(self, x, out=None):
        bound = super().bind(x, out)
        cycle: list = []
        cycle.append((bound, cycle))
        return bound


def test_the_private_scratch_of_replaced_binds_is_freed_when_the_forward_is_set_up():
    import gc
    import weakref

    from opbench.backends.base import Built

    suite = load_suite_text(CHAIN)
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    plain = built_groups(model, data, "torch")
    users = {
        g: CyclicScratchUser(b) for g, b in plain.items() if model.layers[g[0]].op != "reshape"
    }
    built = {
        g: Built(fn=b.fn, bind=users[g].bind, takes_out=True) if g in users else b
        for g, b in plain.items()
    }
    was_enabled = gc.isenabled()
    gc.disable()  # the collector must not run by chance: the forward's set-up must run it
    try:
        forward = eager_forward(model, built, data)
        first = [weakref.ref(u.scratches[0]) for u in users.values()]
        for u in users.values():
            u.scratches.clear()
        assert all(ref() is None for ref in first), "a replaced bind's private scratch is held"
    finally:
        if was_enabled:
            gc.enable()
    assert forward.call()[0].shape == (3, 7, 1)


def test_a_peak_below_the_start_is_unknown_not_negative():
    """torch.compile's reduce-overhead forward frees the pool of the forward compiled before it
    inside the measured block (measured on an H100: -49 MiB). Such a difference is no peak."""
    from opbench.pipeline.end_to_end import forward_peak

    mib = 2**20
    assert forward_peak(before=100 * mib, peak=145 * mib) == 45 * mib
    assert forward_peak(before=100 * mib, peak=100 * mib) == 0
    assert forward_peak(before=100 * mib, peak=51 * mib) is None
