"""The output-buffer plan of a whole-model forward (spec/buffer_plan.py): lifetimes from the
readers, sharing only between values never alive together, views keeping their bases alive,
two-output steps, model outputs kept to the end."""

from __future__ import annotations

import itertools

import pytest

from opbench.spec.buffer_plan import ALIGN, BufferPlan, Step, aligned, forward_steps, plan_buffers
from opbench.spec.load import load_suite_text


def overlapping_in_time(plan: BufferPlan, a: str, b: str) -> bool:
    (a0, a1), (b0, b1) = plan.lifetimes[a], plan.lifetimes[b]
    return a0 <= b1 and b0 <= a1


def assert_sound(plan: BufferPlan) -> None:
    """No two values alive at one step share a byte; every buffer fits the arena."""
    for a, b in itertools.combinations(plan.offsets, 2):
        if overlapping_in_time(plan, a, b):
            assert not plan.shares(a, b), (a, b, plan.offsets, plan.lifetimes)
    for v, at in plan.offsets.items():
        assert at % ALIGN == 0
        assert at + plan.sizes[v] <= plan.size
    assert plan.live_peak <= plan.size <= plan.separate


def chain(n: int, nbytes: int = 1000) -> list[Step]:
    steps = [Step(writes=(("v0", nbytes),), reads=("input",))]
    steps += [Step(writes=((f"v{k}", nbytes),), reads=(f"v{k - 1}",)) for k in range(1, n)]
    return steps


def test_a_chain_needs_two_buffers_not_one_per_layer() -> None:
    plan = plan_buffers(chain(6), keep=["v5"])
    assert_sound(plan)
    assert plan.lifetimes["v0"] == (0, 1)  # written at 0, last read at 1
    assert plan.lifetimes["v5"] == (5, 6)  # the model output: to the end
    assert plan.size == 2 * aligned(1000)
    assert plan.separate == 6 * aligned(1000)
    assert plan.shares("v0", "v2") or plan.shares("v0", "v3")  # bytes are reused


def test_a_step_never_writes_over_what_it_reads() -> None:
    plan = plan_buffers(chain(3), keep=["v2"])
    assert not plan.shares("v0", "v1")  # v1 is written while v0 is read
    assert not plan.shares("v1", "v2")


def test_a_residual_read_far_later_stays_alive() -> None:
    # x -> a -> b -> c -> add(c, x): x is read at the last step.
    steps = [
        Step(writes=(("x", 4096),), reads=("input",)),
        Step(writes=(("a", 4096),), reads=("x",)),
        Step(writes=(("b", 4096),), reads=("a",)),
        Step(writes=(("c", 4096),), reads=("b",)),
        Step(writes=(("add", 4096),), reads=("c", "x")),
    ]
    plan = plan_buffers(steps, keep=["add"])
    assert_sound(plan)
    assert plan.lifetimes["x"] == (0, 4)
    for v in ("a", "b", "c", "add"):
        assert not plan.shares("x", v)
    assert plan.shares("a", "c")  # a is dead before c is written


def test_a_view_keeps_its_base_alive_until_the_view_is_read() -> None:
    # big -> flat (a view of big, no bytes) -> head reads flat two steps later.
    steps = [
        Step(writes=(("big", 8192),), reads=("input",)),
        Step(views=(("flat", ("big",)),), reads=("big",)),
        Step(writes=(("other", 8192),), reads=("input",)),
        Step(writes=(("head", 512),), reads=("flat",)),
    ]
    plan = plan_buffers(steps, keep=["head", "other"])
    assert_sound(plan)
    assert "flat" not in plan.offsets  # a view has no buffer
    assert plan.lifetimes["big"] == (0, 3)  # alive until the view's reader ran
    assert not plan.shares("big", "other")
    assert not plan.shares("big", "head")


def test_a_view_of_a_view_reaches_the_base() -> None:
    steps = [
        Step(writes=(("base", 1024),), reads=("input",)),
        Step(views=(("v1", ("base",)),), reads=("base",)),
        Step(views=(("v2", ("v1",)),), reads=("v1",)),
        Step(writes=(("x", 1024),), reads=("input",)),
        Step(writes=(("y", 1024),), reads=("v2", "x")),
    ]
    plan = plan_buffers(steps, keep=["y"])
    assert plan.lifetimes["base"] == (0, 4)
    assert not plan.shares("base", "x")


def test_a_model_output_that_is_a_view_keeps_its_base_to_the_end() -> None:
    steps = [
        Step(writes=(("base", 1024),), reads=("input",)),
        Step(views=(("out", ("base",)),), reads=("base",)),
        Step(writes=(("later", 1024),), reads=("input",)),
    ]
    plan = plan_buffers(steps, keep=["out", "later"])
    assert plan.lifetimes["base"] == (0, 3)
    assert not plan.shares("base", "later")


def test_a_two_output_step_keeps_both_and_each_lives_its_own_life() -> None:
    # add -> norm fused: writes the sum (read again two steps later) and the norm.
    steps = [
        Step(writes=(("x", 2048),), reads=("input",)),
        Step(writes=(("sum", 2048), ("norm", 2048)), reads=("x", "input")),
        Step(writes=(("proj", 2048),), reads=("norm",)),
        Step(writes=(("out", 2048),), reads=("proj", "sum")),
    ]
    plan = plan_buffers(steps, keep=["out"])
    assert_sound(plan)
    assert not plan.shares("sum", "norm")
    assert plan.lifetimes["norm"] == (1, 2)
    assert plan.lifetimes["sum"] == (1, 3)
    assert not plan.shares("sum", "proj")
    assert plan.shares("x", "proj") or plan.shares("norm", "out") or plan.size < plan.separate


def test_model_outputs_are_never_reused() -> None:
    # Two outputs made early, then a long chain: nothing may land on them.
    steps = [
        Step(writes=(("early", 4096),), reads=("input",)),
        *[
            Step(writes=((f"c{k}", 4096),), reads=(f"c{k - 1}" if k else "input",))
            for k in range(5)
        ],
    ]
    plan = plan_buffers(steps, keep=["early", "c4"])
    assert_sound(plan)
    assert plan.lifetimes["early"] == (0, len(steps))
    for k in range(5):
        assert not plan.shares("early", f"c{k}")


def test_larger_buffers_first_fill_the_arena_tightly() -> None:
    # Two small values alive together, then one big one: the big one takes their place.
    steps = [
        Step(writes=(("s1", 1000),), reads=("input",)),
        Step(writes=(("s2", 1000),), reads=("s1",)),
        Step(writes=(("big", 4000),), reads=("s2",)),
        Step(writes=(("tail", 1000),), reads=("big",)),
    ]
    plan = plan_buffers(steps, keep=["tail"])
    assert_sound(plan)
    assert plan.size == plan.live_peak


def test_a_value_written_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="written by two steps"):
        plan_buffers([Step(writes=(("a", 8),)), Step(writes=(("a", 8),))])


def test_no_steps_no_arena() -> None:
    plan = plan_buffers([])
    assert (plan.size, plan.separate, plan.live_peak) == (0, 0, 0)


RESIDUAL = """
name: r
defaults: {dtype: float16}
models:
  - name: block
    batch: 3
    input: [5]
    layers:
      - {name: fc1, op: linear, out_features: 7}
      - {name: act, op: relu}
      - {name: flat, op: reshape, shape: [7, 1]}
      - {name: back, op: reshape, shape: [7]}
      - {name: fc2, op: linear, out_features: 5, inputs: [back]}
      - {name: add, op: add, inputs: [fc2, input]}
      - {name: fc3, op: linear, out_features: 7}
      - {name: act2, op: relu, inputs: [fc1]}
      - {name: add2, op: add, inputs: [fc3, act2]}
"""


def test_forward_steps_from_a_graph_mark_unplanned_groups_as_views_of_their_inputs() -> None:
    model = load_suite_text(RESIDUAL).models[0]
    graph = model.graph
    order = graph.order_groups([(i,) for i in graph.walk()])
    views = {graph.index("flat"), graph.index("back")}
    planned = [g for g in order if g[0] not in views]
    nbytes = [100 * (i + 1) for i in graph.walk()]
    steps = forward_steps(graph, order, planned, nbytes)
    by_name = {graph.names[g[0]]: s for g, s in zip(order, steps, strict=True)}
    assert by_name["flat"].views == (("flat", ("act",)),)
    assert by_name["fc1"].writes == (("fc1", 100),)
    plan = plan_buffers(steps, keep=[graph.names[i] for i in graph.outputs])
    assert_sound(plan)
    # act is read through flat → back by fc2: alive until fc2 ran.
    assert plan.lifetimes["act"][1] == [graph.names[g[0]] for g in order].index("fc2")
    # fc1 is read by act2, late in the walk: alive until then.
    assert plan.lifetimes["fc1"][1] == [graph.names[g[0]] for g in order].index("act2")
