"""The graph built from plain rows (what the pure stages have), its one walker (`Graph.run`:
each value dropped after its last reader), and the one adapter for a run.json whose layers
do not name their inputs (spec/wiring.py `recorded_graph`, by the loader's own rule)."""

from __future__ import annotations

import weakref

import pytest

from opbench.spec.graph import Graph, OrderError, Row
from opbench.spec.wiring import default_reads, recorded_graph, spells_out

# x → a → b, a → c, add(b, c): a residual; `y` is a second model input only `c` reads.
ROWS = [
    Row("a", ("x",), (2, 3)),
    Row("b", ("a",), (2, 3)),
    Row("c", ("a", "y"), (2, 3)),
    Row("add", ("b", "c"), (2, 3)),
]


def test_rows_make_the_graph_with_model_inputs_found_from_reads() -> None:
    graph = Graph.from_rows(ROWS, {"x": (2, 3)})
    assert graph.names == ("a", "b", "c", "add")
    assert list(graph.inputs) == ["x", "y"]
    assert graph.producers == ((None,), (0,), (0, None), (1, 2))
    assert graph.outputs == (3,)
    assert graph.ancestor_sets == tuple(map(frozenset, [{0}, {0, 1}, {0, 2}, {0, 1, 2, 3}]))
    assert graph.inputs_reached(1) == {"x"} and graph.inputs_reached(3) == {"x", "y"}


def test_a_row_reading_itself_or_a_later_row_is_an_order_error() -> None:
    with pytest.raises(OrderError) as caught:
        Graph.from_rows([Row("a", ("b",)), Row("b", ("x",))])
    assert (caught.value.layer, caught.value.value) == (0, "b")


class Value:
    def __init__(self, number: float) -> None:
        self.number = number


def test_the_walker_passes_inputs_in_order_and_drops_each_value_after_its_last_reader() -> None:
    graph = Graph.from_rows(ROWS)
    made: dict[str, weakref.ref] = {}
    alive_at: dict[str, set[str]] = {}

    def step(i: int, args: tuple[Value, ...]) -> Value:
        alive_at[graph.names[i]] = {name for name, ref in made.items() if ref() is not None}
        out = Value(sum(x.number for x in args) + i)
        made[graph.names[i]] = weakref.ref(out)
        return out

    found = graph.run(step, {"x": Value(1.0), "y": Value(10.0)})
    # a = 1 + 0, b = a + 1, c = a + y + 2, add = b + c + 3
    assert {i: v.number for i, v in found.items()} == {3: 2.0 + 13.0 + 3}
    # `a` is gone once c, its last reader, has run; b and c live until add reads them.
    assert alive_at == {"a": set(), "b": {"a"}, "c": {"a", "b"}, "add": {"b", "c"}}
    assert graph.frees([(i,) for i in graph.walk()]) == (("x",), (), ("a", "y"), ("b", "c"))


def test_a_walk_of_part_of_the_graph_keeps_what_it_is_asked_for() -> None:
    graph = Graph.from_rows(ROWS)
    part = graph.run(lambda i, args: sum(args), {"a": 5.0, "y": 1.0}, layers=[2], keep=[2])
    assert part == {2: 6.0}


def test_group_steps_free_what_the_group_reads_from_outside_last() -> None:
    graph = Graph.from_rows(ROWS)
    assert graph.frees([(0,), (1, 2, 3)]) == (("x",), ("a", "y"))


def test_the_walker_runs_groups_on_their_outside_inputs_and_hands_on_each_output() -> None:
    graph = Graph.from_rows(ROWS)
    seen: dict[tuple[int, ...], tuple[float, ...]] = {}

    def step(group: tuple[int, ...], args: tuple[float, ...]) -> dict[int, float]:
        seen[group] = args
        return {i: sum(args) + i for i in graph.group_outputs(group)}

    found = graph.run_groups(step, {"x": 1.0, "y": 10.0}, [(0, 1), (2,), (3,)], keep=[1, 3])
    # (a, b) reads x and hands on a (c reads it) and b; c reads a and y; add reads b and c.
    assert seen == {(0, 1): (1.0,), (2,): (1.0, 10.0), (3,): (2.0, 13.0)}
    assert found == {1: 2.0, 3: 18.0}


def test_the_ends_of_a_part_are_the_layers_no_member_reads() -> None:
    graph = Graph.from_rows(ROWS)
    assert graph.ends([0, 1, 2]) == (1, 2) and graph.ends([1, 3]) == (3,)


def test_an_old_run_json_without_inputs_reads_by_the_suite_default() -> None:
    model = {
        "layers": [
            {"name": "a", "output_shape": [2, 3]},
            {"name": "b"},
            {"name": "fresh", "starts_chain": True},
            {"name": "add", "inputs": ["b", "fresh"]},
        ]
    }
    graph = recorded_graph(model)
    assert graph.reads == (("input",), ("a",), ("fresh/input",), ("b", "fresh"))
    assert graph.out_shapes[0] == (2, 3)


def test_writers_spell_out_exactly_what_the_default_would_not_read() -> None:
    names, declared = ["a", "b"], ["input"]
    assert default_reads(0, names, declared) == ("input",)
    assert default_reads(0, names, ["x", "y"]) is None
    assert not spells_out(1, names, declared, ("a",))
    assert spells_out(1, names, declared, ("input",))
    assert spells_out(0, names, ["x", "y"], ("x",))


def test_a_recorded_layer_reading_a_later_one_is_one_clear_input_error() -> None:
    from opbench.errors import InputError

    model = {"name": "m", "layers": [{"name": "a", "inputs": ["b"]}, {"name": "b"}]}
    with pytest.raises(InputError, match="model 'm': layer 'a' reads 'b'"):
        recorded_graph(model)
