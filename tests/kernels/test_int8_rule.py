"""The one int8 rounding rule (kernels/device.py), checked against a plain-Python statement of
it on every quantizer: the activation kernel of the linear, the build-time weight quantizer,
the conv's per-image activation kernel and the attention's key quantizer.

    s = max|v| / 127,  q = clamp(round_half_away_from_zero(v / s), -127, 127)

Rows are built so that v / s lands exactly on halves (ties), where the rules people mix up
(half to even, half up) disagree with this one.
"""

from __future__ import annotations

import math

import pytest
import torch

from opbench.kernels.attention.attention import split_heads
from opbench.kernels.attention.attention_int8 import KEY_BLOCK, key_quantize_calls
from opbench.kernels.conv.conv_int8 import quantize_calls
from opbench.kernels.memory.quantize import quantize_per_row, quantize_rows

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def rule(values: list[float]) -> list[int]:
    """The rule, one value at a time, in Python floats."""
    amax = max(abs(v) for v in values)
    if amax == 0:
        return [0] * len(values)
    codes = []
    for v in values:
        scaled = v * (127.0 / amax)
        code = math.floor(abs(scaled) + 0.5) * (1 if scaled >= 0 else -1)
        codes.append(max(-127, min(127, code)))
    return codes


# |v| / s on exact halves: 0.5 -> 1, 1.5 -> 2, 2.5 -> 3, -0.5 -> -1, -2.5 -> -3 (half to even
# would give 0, 2, 2, 0, -2). The 127 sets the scale to 1.
TIES = [127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 10.5, -126.5, 0.0, 3.0]


def test_rule_statement_rounds_ties_away_from_zero() -> None:
    assert rule(TIES) == [127, 1, 2, 3, -1, -3, 11, -127, 0, 3]
    assert rule([0.0, 0.0]) == [0, 0]


def test_activation_kernel_and_weight_quantizer_follow_the_rule() -> None:
    gen = torch.Generator().manual_seed(3)
    rows = torch.cat([torch.tensor([TIES]), torch.randn(4, len(TIES), generator=gen),
                      torch.zeros(1, len(TIES))])  # fmt: skip
    expected = torch.tensor([rule(r.tolist()) for r in rows], dtype=torch.int8)
    q, scale = quantize_rows(rows)
    q_host, scale_host = quantize_per_row(rows)
    assert torch.equal(q, expected) and torch.equal(q_host, expected)
    assert torch.equal(scale, scale_host) and scale[-1] == 0


def test_conv_activation_kernel_follows_the_rule() -> None:
    """One scale per image: the codes of image n follow the rule over all its values."""
    image = torch.tensor(TIES * 2).view(1, 2, 2, 5)  # C=2, H=2, W=5
    x = torch.cat([image, torch.randn(1, 2, 2, 5)])
    xq = torch.empty(2, 2, 5, 2, dtype=torch.int8)
    x_scale = torch.empty(2)
    calls, _ = quantize_calls(x, xq, x_scale)
    for call in calls:
        call.call()
    for n in range(2):
        expected = torch.tensor(rule(x[n].flatten().tolist()), dtype=torch.int8).view(2, 2, 5)
        assert torch.equal(xq[n].permute(2, 0, 1), expected)  # NHWC back to CHW
    assert x_scale[0] == 1.0


def test_attention_key_quantizer_follows_the_rule() -> None:
    """Keys minus their mean over the sequence, one scale per KEY_BLOCK keys."""
    seq, head_dim = 3, 16
    keys = torch.zeros(1, seq, head_dim)
    keys[0, 0, :10] = torch.tensor(TIES)
    keys[0, 1, :10] = -torch.tensor(TIES)  # the mean of the first two rows is 0 ...
    x = keys.to(torch.float16)  # ... and row 2 is zero: the mean is 0 everywhere
    _, k, _ = split_heads(x, heads=1, packed_qkv=False)
    calls, k8, k_scale, _ = key_quantize_calls(k)
    for call in calls:
        call.call()
    block = x[0].float().flatten().tolist()
    expected = torch.tensor(rule(block), dtype=torch.int8).view(seq, head_dim)
    assert torch.equal(k8[0, :seq], expected)
    assert (k8[0, seq:KEY_BLOCK] == 0).all() and k_scale[0, 0] == 1.0
