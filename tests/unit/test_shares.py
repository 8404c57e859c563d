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
