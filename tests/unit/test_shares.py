"""How a plan is dealt out to shards and torchrun ranks (`pipeline.shares`)."""

from __future__ import annotations

from opbench.pipeline import shares


def test_every_backend_of_a_layer_lands_in_the_same_share() -> None:
    # plan order: per model, per backend, per layer (what plan_work produces)
    keys = [("m", layer) for _backend in ("torch", "triton") for layer in "abcde"]
    dealt = shares(keys, 2)
    by_key: dict[tuple[str, str], set[int]] = {}
    for key, share in zip(keys, dealt, strict=True):
        by_key.setdefault(key, set()).add(share)
    assert all(len(s) == 1 for s in by_key.values())
    assert sorted(dealt) == [0] * 6 + [1] * 4  # layers a, c, e and b, d


def test_alternating_backends_are_not_split_by_backend() -> None:
    """One layer per model and two backends (suites/gemm.yaml): dealing results one by one
    would give share 0 every torch result and share 1 every triton result."""
    keys = [(f"m{i}", "proj") for i in range(6) for _backend in ("torch", "triton")]
    dealt = shares(keys, 2)
    torch_shares = {dealt[i] for i in range(0, 12, 2)}
    assert torch_shares == {0, 1}
    assert dealt.count(0) == dealt.count(1) == 6


def test_more_shares_than_layers_leaves_some_empty() -> None:
    assert shares([("m", "a"), ("m", "b")], 4) == [0, 1]


UNEVEN = """
name: uneven
defaults: {backends: [torch, triton]}
models:
  - name: m
    batch: 8192
    input: [8192]
    layers:
      - {name: big1, op: linear, out_features: 8192}
      - {name: t1, op: relu}
      - {name: big2, op: linear, out_features: 8192}
      - {name: t2, op: relu}
      - {name: t3, op: relu}
      - {name: t4, op: relu}
  - name: small
    input: [16]
    layers:
      - {name: s1, op: relu}
      - {name: s2, op: relu}
"""


def test_shards_are_balanced_by_expected_cost_not_by_count() -> None:
    """Two 8192^3 GEMMs among tiny layers: dealt by count (every other layer) both GEMMs would
    land on shard 1; dealt by cost each shard gets one, and the shards' costs are close."""
    from opbench.backends.registry import BACKEND_NAMES, get_backend
    from opbench.pipeline import RunOptions, plan_work
    from opbench.pipeline.measure import base_result
    from opbench.pipeline.plan import expected_cost
    from opbench.spec.load import load_suite_text

    suite = load_suite_text(UNEVEN)
    backends = {name: get_backend(name) for name in BACKEND_NAMES}
    # Layer results only: the whole-model units are dealt too (test below), but this test is
    # about how layers of uneven cost spread.
    whole = plan_work(suite, RunOptions(end_to_end=False), backends)
    cost = {
        (i.model.name, i.indices, i.backend): expected_cost(base_result(i, "cpu")) for i in whole
    }
    loads, layers_per_shard = [], []
    for k in (1, 2):
        part = plan_work(suite, RunOptions(shard=(k, 2), end_to_end=False), backends)
        loads.append(sum(cost[(i.model.name, i.indices, i.backend)] for i in part))
        layers_per_shard.append({(i.model.name, i.layers[0].name) for i in part})
        for item in part:  # every backend of a layer on this shard
            assert {
                j.backend for j in part if j.indices == item.indices and j.model == item.model
            } == {"torch", "triton"}
    assert layers_per_shard[0].isdisjoint(layers_per_shard[1])
    assert sum(len(s) for s in layers_per_shard) == 8
    assert {("m", "big1"), ("m", "big2")} & layers_per_shard[0]
    assert {("m", "big1"), ("m", "big2")} & layers_per_shard[1]
    assert max(loads) <= 1.2 * min(loads), loads
    by_count = shares([(i.model.name, i.layers[0].name) for i in whole], 2)
    count_loads = [0.0, 0.0]
    for item, share in zip(whole, by_count, strict=True):
        count_loads[share] += cost[(item.model.name, item.indices, item.backend)]
    assert max(count_loads) > max(loads), "cost-aware dealing beats dealing by count"


def test_every_whole_model_unit_is_planned_once_with_all_its_backends_in_one_share() -> None:
    """Shares split a model's layers, but each model's forward (one unit per backend) goes to
    exactly one share, every backend's together, and it lists every group of the forward."""
    from opbench.backends.registry import BACKEND_NAMES, get_backend
    from opbench.pipeline import RunOptions
    from opbench.pipeline.plan import plan_run
    from opbench.spec.load import load_suite_text

    suite = load_suite_text(UNEVEN)
    backends = {name: get_backend(name) for name in BACKEND_NAMES}
    whole = plan_run(suite, RunOptions(), backends)
    assert {(u.model.name, u.backend) for u in whole.end_to_end} == {
        ("m", "torch"),
        ("m", "triton"),
        ("small", "torch"),
        ("small", "triton"),
    }
    for unit in whole.end_to_end:
        planned = [
            i.indices for i in whole.items if (i.model, i.backend) == (unit.model, unit.backend)
        ]
        assert list(unit.groups) == planned
    seen: dict[tuple[str, str], int] = {}
    for k in (1, 2, 3):
        for unit in plan_run(suite, RunOptions(shard=(k, 3)), backends).end_to_end:
            assert (unit.model.name, unit.backend) not in seen
            seen[(unit.model.name, unit.backend)] = k
    assert set(seen) == {(u.model.name, u.backend) for u in whole.end_to_end}
    assert seen[("m", "torch")] == seen[("m", "triton")]
    assert seen[("small", "torch")] == seen[("small", "triton")]
    # A --layer selection leaves models partial: no forward to time.
    assert not plan_run(suite, RunOptions(layers=["big1"]), backends).end_to_end
