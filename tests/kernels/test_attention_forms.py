"""Attention in the exporters' layout ([B, H, S, D] q/k/v, GQA, a key padding mask) and the
decode step's KV-cache append, through the Triton builders, vs the op's float64 reference
(ops/attention.py), under the CPU interpreter; outputs poisoned with NaN."""

from __future__ import annotations

import types

import pytest
import torch

from opbench.backends.triton_table import BUILDERS
from opbench.ops.attention import Attention
from opbench.ops.base import coerce_param

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3}


def layer(shapes, **given):
    op = Attention()
    params = {p.name: coerce_param(p, given[p.name]) if p.name in given else p.default
              for p in op.params}  # fmt: skip
    out = op.infer_shape(tuple(shapes), params)
    return types.SimpleNamespace(op="attention", params=params, input_shape=shapes[0],
                                 input_shapes=tuple(shapes), output_shape=out)  # fmt: skip


def check(out, ref, dtype) -> None:
    assert not out.isnan().any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[dtype], f"relative L2 error {err:.2e}"


def padding_mask(batch: int, n: int, gen) -> torch.Tensor:
    lengths = torch.randint(1, n + 1, (batch, 1), generator=gen)
    return (torch.arange(n)[None, :] < lengths).long()


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("causal,mask,kv_heads", [(True, False, 1), (False, True, 3),
                                                  (True, True, 1), (False, False, 3)])  # fmt: skip
def test_bhsd_with_gqa_and_padding_mask(causal, mask, kv_heads, dtype) -> None:
    gen = torch.Generator().manual_seed(kv_heads + 2 * mask)
    b, h, s, n, d = 2, 3, 5, 7 if mask else 5, 16
    q = torch.randn(b, h, s, d, generator=gen).to(dtype)
    k, v = (torch.randn(b, kv_heads, n, d, generator=gen).to(dtype) for _ in range(2))
    xs = [q, k, v] + ([padding_mask(b, n, gen)] if mask else [])
    lay = layer([tuple(t.shape) for t in xs], heads=h, kv_heads=kv_heads, layout="bhsd",
                causal=causal, mask=mask)  # fmt: skip
    kernel = BUILDERS["attention"](lay, {})
    out = kernel.bind(*xs).launch()
    assert tuple(out.shape) == lay.output_shape
    ref = Attention().reference(tuple(t.double() if t.is_floating_point() else t for t in xs),
                                {}, lay)  # fmt: skip
    check(out, ref, dtype)


@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_decode_step_appends_to_the_cache_then_attends_over_it(dtype) -> None:
    gen = torch.Generator().manual_seed(5)
    b, s, h, hkv, d, n = 3, 1, 4, 2, 16, 11
    x = torch.randn(b, s, (h + 2 * hkv) * d, generator=gen).to(dtype)
    caches = {key: torch.randn(b, n, hkv * d, generator=gen).to(dtype)
              for key in ("k_cache", "v_cache")}  # fmt: skip
    lay = layer([tuple(x.shape)], heads=h, kv_heads=hkv, kv_len=n, packed_qkv=True, append=True,
                causal=True)  # fmt: skip
    ref = Attention().reference(x.double(), {k: c.double() for k, c in caches.items()}, lay)
    state = {k: c.clone() for k, c in caches.items()}
    bound = BUILDERS["attention"](lay, state).bind(x, out=torch.full((b, s, h * d), float("nan"),
                                                                    dtype=dtype))  # fmt: skip
    check(bound.launch(), ref, dtype)
    # the new k and v are in the last slot, the past untouched
    k_new = x[..., h * d : (h + hkv) * d]
    assert torch.equal(state["k_cache"][:, -1:], k_new)
    assert torch.equal(state["v_cache"][:, :-1], caches["v_cache"][:, :-1])
    bound.out.fill_(float("nan"))  # the same step again: same answer
    check(bound.launch(), ref, dtype)


def test_rope_fused_with_the_cache_append_matches_the_two_layers() -> None:
    """rope (packed) → attention(append) as one group: rope writes k and v into the cache."""
    from opbench.backends.triton_fused import build_fused
    from opbench.spec.load import load_suite_text

    suite = load_suite_text(
        "name: t\nmodels:\n  - name: m\n    batch: 2\n    input: [1, 128]\n    fuse: true\n"
        "    layers:\n      - {name: rope, op: rope, layout: packed, heads: 4, kv_heads: 2, "
        "offset: 6, style: interleaved}\n      - {name: attn, op: attention, heads: 4, "
        "kv_heads: 2, kv_len: 7, packed_qkv: true, append: true, causal: true}\n", "t.yaml")  # fmt: skip
    model = suite.models[0]
    from opbench.pipeline.data import ModelData

    data = ModelData(suite, model, "cpu")
    kernel, note = build_fused(model.layers, [data.weights(0), data.weights(1)])
    assert "rope" in note and "attn" in note
    x = data.value("input", "float32")
    out = kernel.bind(x, out=torch.full((2, 1, 64), float("nan"))).launch()
    ref, _ = data.reference((0, 1))
    check(out, ref, torch.float32)
    rotated_k = data.reference((0,))[0][..., 64:96]  # the rope layer's k heads
    assert torch.allclose(data.weights(1)["k_cache"][:, -1:].double(), rotated_k, atol=1e-5)
