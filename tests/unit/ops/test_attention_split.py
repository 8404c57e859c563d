"""The torch attention's packed q | k | v split is what a user writes (one view, one permute,
an unbind; a split along the heads for GQA): the same views, the same strides and the same
output as a split of the last dim then one unflatten + transpose per part, in fewer calls."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from opbench.ops.attention import Attention


def layer(**params) -> SimpleNamespace:
    """What the op's torch forward reads of a layer: its parameters, defaults filled in."""
    defaults = {p.name: p.default for p in Attention.params}
    return SimpleNamespace(params={**defaults, "causal": True, **params})


def by_parts(x: torch.Tensor, h: int, hkv: int, d: int) -> tuple[torch.Tensor, ...]:
    """The old split: split the last dim, then unflatten + transpose each part."""
    parts = x.split([h * d, hkv * d, hkv * d], dim=-1)
    return tuple(
        t.unflatten(-1, (n, d)).transpose(1, 2) for t, n in zip(parts, (h, hkv, hkv), strict=True)
    )


@pytest.mark.parametrize(("h", "hkv"), [(3, 3), (4, 2)])  # MHA, GQA
def test_packed_heads_are_the_same_views_as_split_then_unflatten(h: int, hkv: int) -> None:
    d = 5
    x = torch.randn(2, 7, (h + 2 * hkv) * d)
    p = layer(heads=h, kv_heads=hkv, packed_qkv=True)
    q, k, v, mask = Attention().split(x, {}, p)
    assert mask is None
    for got, want in zip((q, k, v), by_parts(x, h, hkv, d), strict=True):
        assert got.shape == want.shape and got.stride() == want.stride()
        assert got.data_ptr() == want.data_ptr(), "a view of the input, no copy"
    out = Attention().forward(x, {}, p)
    q, k, v = by_parts(x, h, hkv, d)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=h != hkv)
    assert torch.equal(out, ref.transpose(1, 2).reshape(2, 7, h * d))
