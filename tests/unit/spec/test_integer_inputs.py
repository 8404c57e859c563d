"""Model inputs of int64 ids and padding masks: declared, checked against their readers, drawn."""

from __future__ import annotations

import pytest
import torch

from opbench.errors import InputError
from opbench.pipeline import ModelData
from opbench.spec.load import load_suite_text

SUITE = """
name: ids
defaults: {backends: [torch]}
models:
  - name: m
    batch: 3
    inputs:
      ids: {shape: [9], dtype: int64}
      mask: {shape: [9], dtype: int64, padding_mask: true}
    layers:
      - {name: tok, op: embedding, num_embeddings: 13, embedding_dim: 8, inputs: [ids]}
      - {name: attn, op: attention, heads: 2, mask: true, causal: true,
         inputs: [tok, mask]}
"""


def test_ids_are_drawn_in_the_embeddings_range_and_masks_as_prefixes() -> None:
    suite = load_suite_text(SUITE, "s.yaml")
    model = suite.models[0]
    data = ModelData(suite, model, "cpu")
    ids, mask = data.value("ids", "float16"), data.value("mask", "float16")
    assert ids.dtype == mask.dtype == torch.int64 and ids.shape == mask.shape == (3, 9)
    assert 0 <= ids.min() and ids.max() < 13 and ids.unique().numel() > 3
    lengths = mask.sum(-1)
    assert (lengths >= 1).all()  # every query sees key 0
    assert torch.equal(mask, (torch.arange(9)[None, :] < lengths[:, None]).long())
    second = data.value("ids", "float32", check="torch")
    assert second.dtype == torch.int64 and not torch.equal(second, ids)


def test_the_whole_model_reference_keeps_ids_integers() -> None:
    suite = load_suite_text(SUITE, "s.yaml")
    refs, kind = ModelData(suite, suite.models[0], "cpu").model_reference()
    assert kind == "float64-cpu" and torch.isfinite(refs[1]).all()


def test_explicit_high_bounds_the_ids() -> None:
    text = SUITE.replace("{shape: [9], dtype: int64}", "{shape: [9], dtype: int64, high: 4}")
    suite = load_suite_text(text, "s.yaml")
    assert ModelData(suite, suite.models[0], "cpu").value("ids", "float32").max() < 4


@pytest.mark.parametrize(
    "change,message",
    [
        (
            (
                "inputs: [ids]}",
                "inputs: [mask]}\n      - {name: x, op: linear, out_features: 4, inputs: [ids]}",
            ),
            "linear 'x' reads 'ids' (integer ids) where it takes floats",
        ),
        (
            (
                "inputs: [tok, mask]}",
                "inputs: [tok, mask]}\n      - {name: e, op: embedding, "
                "num_embeddings: 3, embedding_dim: 2, inputs: [attn]}",
            ),
            "embedding 'e' reads 'attn' (floats) where it takes integers",
        ),
        (("dtype: int64, padding_mask", "padding_mask"), "padding_mask need dtype: int64"),
        (
            (
                "{name: tok, op: embedding, num_embeddings: 13, embedding_dim: 8, inputs: [ids]}",
                "{name: tok, op: placeholder, stands_for: Gather, shape: [9, 8], inputs: [ids]}",
            ),
            "model input 'ids': int64 ids need `high`",
        ),
    ],
)
def test_integers_where_floats_go_and_back_are_refused(change, message) -> None:
    with pytest.raises(InputError) as info:
        load_suite_text(SUITE.replace(*change), "s.yaml")
    assert message in str(info.value)
