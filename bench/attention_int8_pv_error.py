"""Which P V precision int8 attention can afford (CPU, float64; docs/perf/attention.md,
2026-11-25 late): int8 Q K^T by the kernels' rule (tests/kernels/attention_reference's model:
Q per 64 rows, K smoothed per 128 keys), then the online softmax over 128-key blocks with P
and V rounded as a P V MMA would take them, against unquantized float64 attention:
  fp16  P in fp16, V as given (fp16 input)
  e4m3  P as 448 p and V per channel in e4m3 (the ws kernel's fp8 P V)
  int8  P as 127 p and V per channel in int8
Input: random normal, keys with a per-channel bias (as the GPU benches draw it).

Usage: PYTHONPATH=. python3 bench/attention_int8_pv_error.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))

from opbench.kernels.attention.attention import split_heads  # noqa: E402
from tests.kernels.attention_reference import int8_codes, reference  # noqa: E402

BLOCK_N = 128


def rounded(p: torch.Tensor, v: torch.Tensor, v_max: torch.Tensor, mode: str):
    """P (in [0, 1]) and a V block as the P V MMA would read them, back in float64."""
    if mode == "fp16":
        return p.half().double(), v
    if mode == "e4m3":
        e4m3 = torch.float8_e4m3fn
        return ((p * 448).float().to(e4m3).double() / 448,
                (v / v_max * 448).float().to(e4m3).double() * v_max / 448)  # fmt: skip
    return (p * 127 + 0.5).floor() / 127, (v / v_max * 127).round() * v_max / 127


def errors(seq: int, head_dim: int, causal: bool, heads: int = 4) -> dict[str, float]:
    embed = heads * head_dim
    x = torch.randn(1, seq, 3 * embed)
    x[..., embed : 2 * embed] += 2.0 * torch.randn(embed)
    x = x.half()
    exact = reference(x, heads, causal)
    q, k, v = (t.double().transpose(1, 2) for t in split_heads(x.double(), heads, True))
    q8, q_scale = int8_codes(q * (math.log2(math.e) / math.sqrt(head_dim)), 64)
    k8, k_scale = int8_codes(k - k.mean(2, keepdim=True), 128)
    s = (q8 @ k8.transpose(-1, -2)) * q_scale * k_scale.transpose(-1, -2)
    if causal:
        s = s.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    v_max = v.abs().amax(2, keepdim=True)
    found = {}
    for mode in ("fp16", "e4m3", "int8"):
        m = torch.full((*s.shape[:-1], 1), float("-inf"), dtype=torch.float64)
        total, acc = torch.zeros_like(m), torch.zeros_like(q)
        for n0 in range(0, seq, BLOCK_N):  # P against the running max, as the kernels take it
            block = s[..., n0 : n0 + BLOCK_N]
            m_new = torch.maximum(m, block.amax(-1, keepdim=True))
            p, alpha = torch.exp2(block - m_new), torch.exp2(m - m_new)
            total = total * alpha + p.sum(-1, keepdim=True)
            p_r, v_r = rounded(p, v[..., n0 : n0 + BLOCK_N, :], v_max, mode)
            acc, m = acc * alpha + p_r @ v_r, m_new
        out = (acc / total).transpose(1, 2).flatten(2)
        found[mode] = ((out - exact).norm() / exact.norm()).item()
    return found


def main() -> None:
    torch.manual_seed(0)
    print("S     D   causal  rel L2 vs float64: fp16 P V / e4m3 P V / int8 P V")
    for seq, head_dim, causal in ((1024, 128, False), (1024, 64, True), (2048, 128, True),
                                  (2048, 64, False)):  # fmt: skip
        e = errors(seq, head_dim, causal)
        print(f"{seq:<5} {head_dim:<3} {'yes' if causal else 'no ':<7} "
              f"{e['fp16']:.2e} / {e['e4m3']:.2e} / {e['int8']:.2e}")  # fmt: skip


if __name__ == "__main__":
    main()
