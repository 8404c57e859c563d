"""The quantized formats of kernels/quant.py, on the CPU: each rule stated in plain Python and
checked against the torch code the Triton build step and the torch peers share; int4 packing
round-trips; the dequantized weight is what the reference path multiplies with."""

from __future__ import annotations

import math

import pytest
import torch

from opbench.kernels.quant import (
    dequantize_int4,
    dequantize_rows,
    fp8_rows,
    int4_groups,
    int8_rows,
    quantized_weight,
    unpack_int4,
)


def half_away(v: float) -> int:
    return math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)


def test_int4_codes_follow_the_rule_with_the_stored_scale() -> None:
    """Each group of 4: s = max|g| / 7 (stored in fp16), q = round_half_away(v / s) in -7..7;
    ties (v / s on .5) go away from zero."""
    w = torch.tensor([[7.0, 0.5, -2.5, 3.5, 1.0, -1.0, 0.25, 0.0]], dtype=torch.float16)
    packed, scales = int4_groups(w, 4)
    assert packed.dtype == torch.uint8 and packed.shape == (1, 4)
    assert scales.shape == (2, 1) and scales.dtype == torch.float16
    codes = unpack_int4(packed)[0].tolist()
    expected = []
    for g in range(2):
        group = w[0, 4 * g : 4 * g + 4].float().tolist()
        s = float(scales[g, 0])
        assert s == pytest.approx(max(abs(v) for v in group) / 7, rel=1e-3)
        expected += [max(-7, min(7, half_away(v / s))) for v in group]
    assert codes == expected
    assert codes[:4] == [7, 1, -3, 4]  # 0.5, -2.5, 3.5 are ties: away from zero


def test_int4_packing_low_nibble_first_and_dequantize() -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(5, 64, generator=gen).to(torch.bfloat16)
    packed, scales = int4_groups(w, 16)
    codes = unpack_int4(packed)
    stored = (codes + 8).to(torch.uint8)
    assert torch.equal(packed, stored[:, 0::2] | (stored[:, 1::2] << 4))
    assert int(codes.abs().max()) == 7 and int(stored.min()) >= 1
    deq = dequantize_int4(packed, scales, 16)
    # Every element within half a step of its group's scale.
    steps = scales.double().t().repeat_interleave(16, dim=1)
    assert bool(((deq - w.double()).abs() <= steps / 2 + 1e-6).all())
    assert torch.equal(quantized_weight("int4-weight", w, 16), deq)


def test_int4_refuses_groups_that_do_not_divide_k() -> None:
    with pytest.raises(ValueError, match="multiple of group_size"):
        int4_groups(torch.randn(2, 48), 32)


def test_int8_rows_round_half_away_from_zero() -> None:
    v = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 0.0]])
    q, s = int8_rows(v)
    assert q[0].tolist() == [127, 1, 2, 3, -1, -3, 0] and float(s[0]) == 1.0
    q0, s0 = int8_rows(torch.zeros(1, 3))
    assert q0.tolist() == [[0, 0, 0]] and float(s0[0]) == 0.0


def e4m3_grid() -> list[float]:
    """Every finite e4m3 value >= 0: subnormals k * 2^-9, normals (1 + m/8) * 2^e, e in -6..8
    (the top binade stops at 448: 1.75 * 2^8)."""
    values = {k * 2.0**-9 for k in range(8)}
    for e in range(-6, 9):
        for m in range(8):
            value = (1 + m / 8) * 2.0**e
            if value <= 448:
                values.add(value)
    return sorted(values)


def nearest_even_on_grid(v: float, grid: list[float]) -> float:
    """Round |v| to the grid, ties to the value with an even last mantissa bit."""
    a = min(abs(v), 448.0)
    below = max(g for g in grid if g <= a)
    above = min((g for g in grid if g >= a), default=448.0)
    if a - below < above - a:
        r = below
    elif above - a < a - below:
        r = above
    else:  # a tie: the even code, i.e. the one whose index on the grid is even
        r = below if grid.index(below) % 2 == 0 else above
    return math.copysign(r, v)


def test_fp8_rows_round_to_nearest_even_on_the_e4m3_grid() -> None:
    grid = e4m3_grid()
    assert len(grid) == 127 and grid[-1] == 448.0
    gen = torch.Generator().manual_seed(2)
    row = torch.cat([torch.tensor([448.0]), torch.randn(300, generator=gen) * 30,
                     torch.tensor([1.9375, 1.96875, 0.0009765625 * 2.5, -3.25, 0.0])])  # fmt: skip
    q, s = fp8_rows(row[None, :])
    assert float(s[0]) == 1.0  # max|row| = 448
    expected = [nearest_even_on_grid(v, grid) for v in row.tolist()]
    assert q[0].float().tolist() == expected
    assert torch.equal(dequantize_rows(q, s)[0], torch.tensor(expected, dtype=torch.float64))


def test_quantized_weight_of_each_format_is_close_to_the_weight() -> None:
    """Relative L2 of each format's weight on normal data: int8 ~0.9e-2, fp8 ~2.6e-2 (3
    mantissa bits), int4 groups of 32 ~0.1; exactly the weight when not quantized."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(64, 256, generator=gen)

    def rel(quant: str) -> float:
        q = quantized_weight(quant, w, 32)
        return float((q - w.double()).norm() / w.double().norm())

    assert rel("none") == 0.0
    assert 0.005 < rel("int8") == rel("int8-weight") < 0.012
    assert 0.02 < rel("fp8") < 0.032
    assert 0.07 < rel("int4-weight") < 0.13
