"""The quantized formats of a linear layer's `quant` setting (its names: `ops/quant.py`),
written in torch: how a weight or an activation is stored and what it stands for. The Triton kernels' build step and the torch
peers both quantize with these functions, and the tests' reference path dequantizes with
them (dequantize, then the float math).

| quant        | weight                                   | activation x            |
|--------------|------------------------------------------|-------------------------|
| int8         | int8 per output channel (max / 127)      | int8 per token, per call|
| fp8          | e4m3 per output channel (max / 448)      | e4m3 per token, per call|
| int8-weight  | int8 per output channel (max / 127)      | fp16/bf16 as given      |
| int4-weight  | int4 per group of G along K (max / 7)    | fp16/bf16 as given      |

Rounding: int8 and int4 codes round half away from zero and clamp to +-127 / +-7 (the rule of
kernels/device.py); e4m3 rounds to nearest even. A zero row or group gets scale 0, codes 0.
int4 storage: two codes per byte, k = 2j in the low nibble of byte j and 2j + 1 in the high
one, each as q + 8 (1..15); the group scales as [K / G, N] in the layer's dtype, so a step of
the streaming kernel reads its N scales contiguously.

torch is imported inside the functions, so that importing the formats costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

FP8_MAX = 448.0
INT8_MAX = 127.0
INT4_MAX = 7.0


def _round_half_away(v: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.where(v >= 0, torch.floor(v + 0.5), torch.ceil(v - 0.5))


def fp8_rows(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 per row of a 2-D v: (q float8_e4m3fn [R, C] contiguous, s fp32 [R]), v ~ s * q.
    Computed in fp32 as the Triton quantizer does it (v * (448 / max|row|))."""
    import torch

    v32 = v.detach().to(torch.float32)
    absmax = v32.abs().amax(dim=1)
    scaled = (v32 * (FP8_MAX / absmax.clamp_min(1e-30))[:, None]).clamp(-FP8_MAX, FP8_MAX)
    return scaled.to(torch.float8_e4m3fn).contiguous(), (absmax / FP8_MAX).contiguous()


def int8_rows(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 per row of a 2-D v: (q int8 [R, C] contiguous, s fp32 [R]), v ~ s * q."""
    import torch

    v32 = v.detach().to(torch.float32)
    absmax = v32.abs().amax(dim=1)
    scaled = (v32 * (INT8_MAX / absmax.clamp_min(1e-30))[:, None]).clamp(-INT8_MAX, INT8_MAX)
    return _round_half_away(scaled).to(torch.int8).contiguous(), (absmax / INT8_MAX).contiguous()


def int4_groups(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """int4 per group of `group_size` consecutive k in each row of w [N, K]: (packed uint8
    [N, K / 2], scales [K / group_size, N] in w's dtype). The codes are computed with the
    scale as stored (rounded to w's dtype), so |w - s q| <= s / 2 holds for the stored s."""
    import torch

    n, k = w.shape
    if k % group_size or group_size % 2:
        raise ValueError(f"int4 groups: K = {k} is not a multiple of group_size = {group_size}")
    groups = w.detach().to(torch.float32).reshape(n, k // group_size, group_size)
    scale = (groups.abs().amax(dim=2) / INT4_MAX).to(w.dtype)  # [N, K / G], as stored
    inverse = 1.0 / scale.to(torch.float32).clamp_min(1e-30)
    codes = _round_half_away(groups * inverse[:, :, None]).clamp(-INT4_MAX, INT4_MAX)
    stored = (codes.reshape(n, k) + 8).to(torch.uint8)
    packed = stored[:, 0::2] | (stored[:, 1::2] << 4)
    return packed.contiguous(), scale.t().contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The codes q (int8, -7..7) of packed uint8 [N, K / 2] -> [N, K]."""
    import torch

    low = (packed & 0xF).to(torch.int8) - 8
    high = (packed >> 4).to(torch.int8) - 8
    return torch.stack([low, high], dim=2).reshape(packed.shape[0], -1)


def dequantize_int4(packed: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """What an int4-weight layer's weight stands for, in float64: s[k // G, n] * q[n, k]."""
    import torch

    codes = unpack_int4(packed).to(torch.float64)
    per_k = scales.to(torch.float64).t().repeat_interleave(group_size, dim=1)
    return codes * per_k


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What a per-row quantized tensor (int8 or e4m3 codes, fp32 scales) stands for, in
    float64: s[r] * q[r, c]."""
    import torch

    return q.to(torch.float64) * scale.to(torch.float64)[:, None]


def quantized_weight(quant: str, weight: torch.Tensor, group_size: int) -> torch.Tensor:
    """The weight a `quant` layer computes with, in float64 (the reference path's weight)."""
    if quant in ("int8", "int8-weight"):
        return dequantize_rows(*int8_rows(weight))
    if quant == "fp8":
        return dequantize_rows(*fp8_rows(weight))
    if quant == "int4-weight":
        return dequantize_int4(*int4_groups(weight, group_size), group_size)
    return weight.double()
