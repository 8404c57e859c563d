"""The warp-specialized Gluon (sm_90) attention kernel: Gluon has no interpreter, so the CPU run
compiles it for sm_90 with Triton's own ptxas (no GPU needed) and checks what the design rests
on; the GPU run (TRITON_INTERPRET=0 on an H100/H200) checks its results against float64.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from opbench.kernels.attention.attention import split_heads
from opbench.kernels.attention.attention_ws import WS_TILES, ws_calls, ws_usable
from opbench.kernels.attention.attention_ws_step import MAXNREG, ws_config
from tests.kernels.attention_reference import reference
from tests.kernels.sm90 import (
    dump_sass,
    no_spills_where_measured,
    ptxas_report,
    run_uninterpreted,
)

# A fresh interpreter with TRITON_INTERPRET=0: under the interpreter (this test run) gluon.jit
# helpers become interpreted functions that the Gluon compiler cannot call.
COMPILE_SM90 = """
import sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type
from opbench.kernels.attention.attention_ws import ws_args
from opbench.kernels.attention.attention_ws_kernel import _attention_ws_kernel as fn
from opbench.kernels.attention.attention_ws_step import MAXNREG
head_dim, causal, block_n, stages, pingpong, p_regs, quant = map(int, sys.argv[1:8])
out_dir = sys.argv[8]
x = torch.empty(2, 256, 3, 2, head_dim, dtype=torch.float16)
q, k, v = x[:, :, 0], x[:, :, 1], x[:, :, 2]
out = torch.empty(2, 256, 2, head_dim, dtype=torch.float16)
if quant == 1:
    quantized = [torch.empty(4, 256, head_dim, dtype=torch.float8_e4m3fn), torch.empty(4, 2),
                 torch.empty(4, head_dim, 256, dtype=torch.float8_e4m3fn), torch.empty(4, head_dim)]
elif quant == 2:
    quantized = [torch.empty(4, 256, head_dim, dtype=torch.int8), torch.empty(4, 2)]
else:
    quantized = []
args = ws_args(q, k, v, out, ("fp16", "fp8", "int8")[quant], quantized, block_n)
signature = {name: mangle_type(arg) for name, arg in zip(fn.arg_names, args)}
const = {name: arg for name, arg in zip(fn.arg_names, args) if arg is None}
const.update(HEAD_DIM=head_dim, CAUSAL=bool(causal), BLOCK_N=block_n, STAGES=stages,
             PINGPONG=bool(pingpong), P_REGS=bool(p_regs), QUANT=quant)
signature.update(dict.fromkeys(const, "constexpr"))
compiled = triton.compile(GluonASTSource(fn, signature, const), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=4, num_stages=1, maxnreg=MAXNREG))
open(out_dir + "/k.ptx", "w").write(compiled.asm["ptx"])
open(out_dir + "/k.cubin", "wb").write(compiled.asm["cubin"])
print(compiled.metadata.num_warps, compiled.metadata.shared)
"""
INT8 = 2  # compile_sm90's `fp8` argument for the int8 format (QUANT INT8_QK)


def compile_sm90(
    head_dim: int, causal: bool, tile: tuple[int, int, bool, bool], fp8: bool | int, out: Path
) -> str:
    """The kernel for fp16, fp8 (fp8 True) or int8 (fp8 = INT8) compiled for
    sm_90 on this machine (out/k.ptx, out/k.cubin); returns the compiler's "num_warps
    shared_bytes" line."""
    argv = [int(a) if isinstance(a, bool) else a for a in (head_dim, causal, *tile, fp8)]
    return run_uninterpreted(COMPILE_SM90, *argv, out).strip().splitlines()[-1]


def sass_events(cubin: Path) -> list[str]:
    """The SASS as a sequence of H (wgmma: HGMMA fp16/bf16, QGMMA fp8, IGMMA int8), W0/W1 (wait for all / all but one wgmma group),
    e (exp2) and S (setmaxnreg), repeats merged."""
    events: list[str] = []
    for line in dump_sass(cubin).splitlines():
        token = ("H" if "HGMMA" in line or "QGMMA" in line or "IGMMA" in line else "W" + line.split("0x")[1][0] if "DEPBAR" in line
                 else "e" if "MUFU.EX2" in line else "S" if "SETMAXREG" in line else None)  # fmt: skip
        if token and (not events or events[-1] != token):
            events.append(token)
    return events


@pytest.mark.parametrize(
    "head_dim,causal,tile,fp8",
    [(128, False, (128, 2, True, False), False), (128, True, (128, 2, False, False), False),
     (64, True, (128, 3, True, False), False), (128, True, (128, 3, True, False), True),
     (64, False, (128, 4, False, False), True)],
)  # fmt: skip
def test_compiles_for_sm90_warp_specialized_with_overlap(
    head_dim, causal, tile, fp8, tmp_path
) -> None:
    """12 warps (two consumer warpgroups and the producer's), register reallocation
    (setmaxnreg), shared memory within the 227 KB of an H100, no spills, no serialized wgmma
    (C7514); and in each consumer's key loop the softmax's exp2s sit between the wait for
    S_{j+1} (W1) and the wait for P_j V_j (W0): the softmax runs while the PV MMA is in flight."""
    warps, shared = map(int, compile_sm90(head_dim, causal, tile, fp8, tmp_path).split())
    assert warps == 12 and shared <= 227 * 1024, (warps, shared)
    info = ptxas_report(tmp_path / "k.ptx", tmp_path / "p.cubin")
    assert "C7514" not in info, info
    sass = dump_sass(tmp_path / "k.cubin")
    assert ("QGMMA" if fp8 else "HGMMA") in sass and ("HGMMA" not in sass if fp8 else True)
    events = sass_events(tmp_path / "k.cubin")
    assert "S" in events, events
    loops = [i for i, t in enumerate(events) if t == "W1"]
    assert len(loops) == 2, events  # one key loop per consumer
    for i in loops:
        following = events[i + 1 :]
        assert "W0" in following and "e" in following[: following.index("W0")], events
    no_spills_where_measured(info)


@pytest.mark.parametrize(
    "head_dim,causal,tile,fp8",
    [(128, False, (128, 3, True, True), False), (64, True, (128, 5, False, True), False),
     (128, True, (128, 4, True, True), True), (64, False, (128, 4, False, True), True)],
)  # fmt: skip
def test_compiles_for_sm90_with_p_in_registers(head_dim, causal, tile, fp8, tmp_path) -> None:
    """P_REGS: the PV wgmma takes P from registers (no P tiles in shared memory: the kernel
    needs 4 P tiles less than with P staged, at the same stages), 12 warps, no spills, no
    serialized wgmma. The SASS order is recorded, not required: under Triton 3.6's ptxas the
    wait for P_j V_j lands above block j + 1's exp2s (docs/perf/attention.md, 2026-11-25
    night); whether that costs more than the shared-memory round trip is the GPU run's
    question."""
    line = compile_sm90(head_dim, causal, tile, fp8, tmp_path)
    warps, shared = map(int, line.split())
    (tmp_path / "staged").mkdir()
    staged = compile_sm90(head_dim, causal, (*tile[:3], False), fp8, tmp_path / "staged")
    p_tiles = 4 * 64 * tile[0] * (1 if fp8 else 2)
    assert warps == 12 and shared <= 227 * 1024, (warps, shared)
    assert int(staged.split()[1]) - shared >= p_tiles, (line, staged)
    info = ptxas_report(tmp_path / "k.ptx", tmp_path / "p.cubin")
    assert "C7514" not in info, info
    sass = dump_sass(tmp_path / "k.cubin")
    assert ("QGMMA" if fp8 else "HGMMA") in sass
    no_spills_where_measured(info)


def test_configs_fit_the_launch() -> None:
    """Every tuned tile takes the register split the kernel's partitions are written for."""
    assert MAXNREG * 12 * 32 <= 65536
    for by_dim in WS_TILES.values():
        for tiles in by_dim.values():
            for block_n, stages, _, _ in tiles:
                assert block_n in (64, 128) and stages >= 2


@pytest.mark.parametrize("quant", ["fp16", "fp8", "int8"])
def test_each_format_passes_none_for_what_it_does_not_read(quant) -> None:
    """A None argument is a constexpr, not a kernel parameter: each format's parameter list is
    then the one its own kernel had before the three were merged (same SASS)."""
    from opbench.kernels.attention.attention_ws import ws_args

    q, k, v = torch.randn(3, 1, 256, 2, 64).half()
    codes = {"fp16": [], "int8": [torch.zeros(2, 256, 64, dtype=torch.int8), torch.rand(2, 2)],
             "fp8": [torch.zeros(2, 256, 64, dtype=torch.float8_e4m3fn), torch.rand(2, 2),
                     torch.zeros(2, 64, 256, dtype=torch.float8_e4m3fn), torch.rand(2, 64)]}  # fmt: skip
    args = ws_args(q, k, v, torch.empty_like(q), quant, codes[quant], 128)
    unused = {name for name, value in args._asdict().items() if value is None}
    assert unused == {"fp16": {"k_scale", "v_scale", "padded_len"}, "int8": {"v_scale"},
                      "fp8": set()}[quant]  # fmt: skip
    assert args.seq_len == 256 and args.heads == 2 and args.stride_oh == 64


@pytest.mark.hopper
@pytest.mark.parametrize(
    "dtype,seq,head_dim,causal",
    [(torch.float16, 1000, 128, True), (torch.bfloat16, 1000, 64, False),
     (torch.float16, 37, 128, False), (torch.float16, 1000, 64, True)],
)  # fmt: skip
def test_gpu_every_tile_matches_float64(dtype, seq, head_dim, causal) -> None:
    """Odd S: CTAs cross batch ends, the last key block is partial; every tile."""
    limit = {torch.float16: 5e-3, torch.bfloat16: 2e-2}[dtype]
    batch, heads = 2, 4
    gen = torch.Generator().manual_seed(seq + head_dim)
    x = torch.randn(batch, seq, 3 * heads * head_dim, generator=gen).to(dtype).cuda()
    ref = reference(x, heads, causal)
    q, k, v = split_heads(x, heads, True)
    for tile in WS_TILES["fp16"][head_dim]:
        out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=dtype, device="cuda")
        out4 = out.unflatten(-1, (heads, head_dim))
        assert ws_usable(q, k, v, out4)
        config = ws_config(tile)
        (call,) = ws_calls(q, k, v, out4, causal=causal, config=config)[0]
        call.call()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), config
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err <= limit, (config, err)


@pytest.mark.hopper
@pytest.mark.parametrize("layer", ["Attention", "Int8Attention", "Fp8Attention"])
def test_gpu_layer_tuned_choice_matches_float64(layer) -> None:
    """The layer the triton backend binds (one tuned choice over the ws tiles and the other
    kernels of its format) on Hopper: the path `opbench run` takes, not a forced tile."""
    from opbench.kernels.attention.attention_fp8_layer import Fp8Attention
    from opbench.kernels.attention.attention_int8_layer import Int8Attention
    from opbench.kernels.attention.attention_layer import Attention

    make = {"Attention": Attention, "Int8Attention": Int8Attention, "Fp8Attention": Fp8Attention}
    limit = {"Attention": 5e-3, "Int8Attention": 3e-2, "Fp8Attention": 8e-2}[layer]
    batch, seq, heads, head_dim = 2, 1000, 4, 128
    gen = torch.Generator().manual_seed(seq + 7)
    x = torch.randn(batch, seq, 3 * heads * head_dim, generator=gen).half().cuda()
    ref = reference(x, heads, True)
    out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=x.dtype, device="cuda")
    make[layer](heads=heads, causal=True, packed_qkv=True).bind(x, out).launch()
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    assert ((out.double() - ref).norm() / ref.norm()).item() <= limit


@pytest.mark.hopper
@pytest.mark.parametrize(
    "dtype,seq,head_dim,causal",
    [(torch.float16, 1000, 128, True), (torch.bfloat16, 1000, 64, False),
     (torch.float16, 37, 128, False)],
)  # fmt: skip
def test_gpu_fp8_every_tile_within_its_tolerance(dtype, seq, head_dim, causal) -> None:
    """The fp8 kernel (after attention_fp8's quantization passes) against float64, within
    `quant: fp8`'s default tolerance 8e-2 (its error model: attention_fp8's docstring)."""
    batch, heads = 2, 4
    gen = torch.Generator().manual_seed(seq + head_dim + 8)
    x = torch.randn(batch, seq, 3 * heads * head_dim, generator=gen).to(dtype).cuda()
    ref = reference(x, heads, causal)
    q, k, v = split_heads(x, heads, True)
    for tile in WS_TILES["fp8"][head_dim]:
        out = torch.full((batch, seq, heads * head_dim), float("nan"), dtype=dtype, device="cuda")
        config = ws_config(tile)
        calls = ws_calls(q, k, v, out.unflatten(-1, (heads, head_dim)), causal=causal,
                         quant="fp8", config=config)[0]  # fmt: skip
        for call in calls:
            call.call()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), config
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err <= 8e-2, (config, err)
