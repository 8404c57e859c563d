"""The rope Triton kernel vs the rotation written out in float64 (ops/rope.py's reference),
every layout and both pair forms, under the CPU interpreter; outputs poisoned with NaN."""

from __future__ import annotations

import types

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.memory.rope import bind_rope, rope
from opbench.ops.rope import Rope

TOLERANCE = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}
CASES = {  # layout: (input shape with batch, params)
    "bhsd": ((2, 3, 5, 10), {}),
    "rows": ((2, 7, 12), {"head_dim": 6}),
    "packed": ((3, 3, 40), {"heads": 2, "kv_heads": 1}),  # 2 q + 1 k heads turn, 1 v copied
}


def reference(x: torch.Tensor, params: dict) -> torch.Tensor:
    return Rope().reference(x.double(), {}, types.SimpleNamespace(params=params))


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("style", ["half", "interleaved"])
@pytest.mark.parametrize("layout", list(CASES))
def test_layouts_into_poisoned_output(layout: str, style: str, dtype: torch.dtype) -> None:
    shape, extra = CASES[layout]
    params = {"layout": layout, "style": style, "theta": 500.0, "offset": 37, "head_dim": None,
              "heads": None, "kv_heads": None, **extra}  # fmt: skip
    _, d, rotated = Rope.geometry(shape, params)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)
    out = torch.full(shape, float("nan"), dtype=dtype)
    rope(x, out=out, layout=layout, head_dim=d, interleaved=style == "interleaved", theta=500.0,
         offset=37, rotated_heads=None if layout == "bhsd" else rotated // d)  # fmt: skip
    assert not out.isnan().any(), "some outputs were never written"
    ref = reference(x, params)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[dtype], f"relative L2 error {err:.2e}"
    if layout == "packed":  # the v head is copied exactly
        assert torch.equal(out[..., rotated:], x[..., rotated:])


def test_strided_input_bhsd_view_of_a_projection() -> None:
    """q [B, S, H D] viewed as [B, H, S, D] by the exporter's transpose (no copy)."""
    q = torch.randn(2, 5, 3 * 8)
    view = q.unflatten(-1, (3, 8)).transpose(1, 2)
    params = {"layout": "bhsd", "style": "half", "theta": 10000.0, "offset": 0}
    out = rope(view)
    assert out.is_contiguous() and torch.allclose(out.double(), reference(view, params), atol=1e-5)


def test_bound_launch_rewrites_its_output() -> None:
    x = torch.randn(1, 2, 3, 4)
    bound = bind_rope(x, offset=5)
    bound.launch().fill_(float("nan"))
    ref = reference(x, {"layout": "bhsd", "style": "half", "theta": 10000.0, "offset": 5})
    assert torch.allclose(bound.launch().double(), ref, atol=1e-5)


def test_odd_head_size_is_refused() -> None:
    with pytest.raises(Unsupported):
        rope(torch.randn(1, 2, 3, 5))
