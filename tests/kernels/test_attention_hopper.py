"""The Gluon (sm_90) attention kernel: Gluon has no interpreter, so the CPU run compiles it for
sm_90 with Triton's own ptxas (no GPU needed) and checks what the design rests on; the GPU
run (TRITON_INTERPRET=0 on an H100/H200) checks its results against float64.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from opbench.kernels.attention.attention import split_heads
from opbench.kernels.attention.attention_hopper import HOPPER_TILES, hopper_call, hopper_usable
from tests.kernels.attention_reference import reference
from tests.kernels.sm90 import dump_sass, ptxas_report, run_uninterpreted

# Run in a fresh interpreter with TRITON_INTERPRET=0: under the interpreter (this test run)
# gluon.jit helpers become interpreted functions that the Gluon compiler cannot call.
COMPILE_SM90 = """
import sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type
from opbench.kernels.attention.attention_hopper import _attention_hopper_kernel as fn, _descriptor
head_dim, causal, block_m, block_n, warps, out_dir = (*map(int, sys.argv[1:6]), sys.argv[6])
x = torch.empty(2, 256, 3, 2, head_dim, dtype=torch.float16)
q, k, v = x[:, :, 0], x[:, :, 1], x[:, :, 2]
out = torch.empty(2, 256, 2, head_dim, dtype=torch.float16)
args = [_descriptor(q, block_m), _descriptor(k, block_n), _descriptor(v, block_n), out,
        256, 2, 1, 1, 1, 0.1]
signature = {name: mangle_type(arg) for name, arg in zip(fn.arg_names, args)}
const = dict(HEAD_DIM=head_dim, CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n)
signature.update(dict.fromkeys(const, "constexpr"))
compiled = triton.compile(GluonASTSource(fn, signature, const), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=1))
open(out_dir + "/k.ptx", "w").write(compiled.asm["ptx"])
open(out_dir + "/k.cubin", "wb").write(compiled.asm["cubin"])
"""


def compile_sm90(head_dim: int, causal: bool, tile: tuple[int, int, int], out: Path) -> None:
    """The kernel compiled for sm_90 on this machine: out/k.ptx and out/k.cubin."""
    run_uninterpreted(COMPILE_SM90, head_dim, int(causal), *tile, out)


@pytest.mark.parametrize(
    "head_dim,causal,tile",
    [(128, False, (64, 64, 4)), (128, True, (128, 64, 8)), (64, False, (64, 128, 4))],
)
def test_compiles_for_sm90_with_its_overlap(head_dim, causal, tile, tmp_path) -> None:
    """No spills; ptxas does not serialize the wgmmas (C7514); and in the key loop the
    softmax's exp2s sit between the wait for S_{j+1} and the wait for P_j V_j, i.e. the
    softmax runs while the PV MMA is in flight."""
    compile_sm90(head_dim, causal, tile, tmp_path)
    info = ptxas_report(tmp_path / "k.ptx", tmp_path / "p.cubin")
    assert "C7514" not in info, info
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", info), info
    sass = dump_sass(tmp_path / "k.cubin")
    events = []
    for line in sass.splitlines():
        token = ("H" if "HGMMA" in line else "W" + line.split("0x")[1][0] if "DEPBAR" in line
                 else "e" if "MUFU.EX2" in line else "m" if "SYNCS.PHASECHK" in line
                 else None)  # fmt: skip
        if token and (not events or events[-1] != token):
            events.append(token)
    # m: an mbarrier wait (TMA data), H: wgmma, W1/W0: wait for all but 1 / all, e: exp2.
    # Prologue (Q, K_0, S_0, softmax 0); loop (K_{j+1}, S_{j+1}, V_j, PV_j, wait 1, softmax,
    # wait 0); the last block's PV. (ptxas puts the mbarrier waits' retry loops at the end.)
    while events[-1] == "m":
        events.pop()
    assert " ".join(events) == "m H W0 e m H m H W1 e W0 m H W0", events


@pytest.mark.hopper
@pytest.mark.parametrize(
    "dtype,head_dim,causal", [(torch.float16, 128, True), (torch.bfloat16, 64, False)]
)
def test_gpu_every_tile_matches_float64(dtype, head_dim, causal) -> None:
    """S = 1000: tiles cross batch ends, the last key block is partial; every tile."""
    limit = {torch.float16: 5e-3, torch.bfloat16: 2e-2}[dtype]
    batch, seq, heads = 2, 1000, 4
    gen = torch.Generator().manual_seed(seq + head_dim)
    x = torch.randn(batch, seq, 3 * heads * head_dim, generator=gen).to(dtype).cuda()
    ref = reference(x, heads, causal, True)
    q, k, v = split_heads(x, heads, True)
    for block_m, block_n, warps in HOPPER_TILES[head_dim]:
        out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=dtype, device="cuda")
        out4 = out.unflatten(-1, (heads, head_dim))
        assert hopper_usable(q, k, v, out4)
        config = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": 1}
        hopper_call(q, k, v, out4, causal=causal, config=config)[0].call()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), (block_m, block_n, warps)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err <= limit, (block_m, block_n, warps, err)
