"""The warp-specialized Gluon GEMM (gemm_ws.py): Gluon has no interpreter, so the CPU run
compiles it for sm_90 with Triton's own ptxas (no GPU needed) and checks what the design rests
on, and checks the pure planning logic; the GPU run (TRITON_INTERPRET=0 on an H100/H200)
checks every tile against float64 through `Linear` (and the int8/fp8 linears).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_plans import (
    SM90_SHARED_BYTES,
    WS_DEEP_K_TILES,
    WS_MAXNREG,
    WS_PINGPONG_TILES,
    WS_TILES,
    ws_candidates,
    ws_deep_k_candidates,
    ws_shared_bytes,
)
from opbench.kernels.tuning import Config
from tests.kernels.sm90 import (
    dump_sass,
    no_spills_where_measured,
    ptxas_report,
    run_uninterpreted,
)

COMPILE_SM90 = """
import sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type
from opbench.kernels.gemm.gemm_ws import _gemm_ws_kernel, _descriptor, MAXNREG
dtype = getattr(torch, sys.argv[1])
wg_m, bn, stages, c_bufs, act, res, bias, pingpong, k_bytes = map(int, sys.argv[2:11])
out_dir = sys.argv[11]
rope = int(sys.argv[12]) if len(sys.argv) > 12 else 0  # a RoPE epilogue (BLOCK_N = D)
bk = k_bytes // dtype.itemsize
M, N, K = 1000, 776, 1040
a = torch.empty(M, K, dtype=dtype)
w = torch.empty(N, K, dtype=dtype)
out = torch.empty(M, N, dtype=torch.float16)
vec = torch.empty(N, dtype=torch.float32)
c = _descriptor(out, [wg_m, bn // 2])
args = [_descriptor(a, [wg_m, bk]), _descriptor(w, [bn, bk]), c, c, vec, vec, vec, M, N, K, 132]
fn = _gemm_ws_kernel
signature = {name: mangle_type(arg) for name, arg in zip(fn.arg_names, args)}
const = dict(WG_M=wg_m, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, STAGES=stages, C_BUFS=c_bufs,
             PINGPONG=bool(pingpong), IS_INT8=dtype == torch.int8, SCALED=dtype.itemsize == 1, HAS_BIAS=bool(bias),
             ACTIVATION=act, HAS_RESIDUAL=bool(res), ROPE=bool(rope), ROPE_D=128)
signature.update(dict.fromkeys(const, "constexpr"))
signature.update(rope_seq="i32", rope_offset="i32", rope_rotated="i32", rope_freq="fp32")
signature = {name: signature[name] for name in fn.arg_names}
compiled = triton.compile(GluonASTSource(fn, signature, const), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=4, num_stages=1, maxnreg=MAXNREG))
open(out_dir + "/k.ptx", "w").write(compiled.asm["ptx"])
open(out_dir + "/k.cubin", "wb").write(compiled.asm["cubin"])
print(compiled.metadata.num_warps, compiled.metadata.shared)
"""


def sass_events(cubin: Path) -> list[str]:
    """The SASS as a sequence of G (wgmma: HGMMA, QGMMA, IGMMA), W0/W1 (wait for all / all but
    one wgmma group), L (TMA load), T (TMA store) and S (setmaxnreg), repeats merged."""
    events: list[str] = []
    for line in dump_sass(cubin).splitlines():
        token = ("G" if re.search(r"[HQI]GMMA", line)
                 else "W" + line.split("gsb0, 0x")[1][0] if "WARPGROUP.DEPBAR" in line
                 else "L" if "UTMALDG" in line else "T" if "UTMASTG" in line
                 else "S" if "SETMAXREG" in line else None)  # fmt: skip
        if token and (not events or events[-1] != token):
            events.append(token)
    return events


COMPILE_CASES = [  # (dtype, tile, activation, residual, bias): the cooperative schedule
    ("float16", (64, 256, 3, 2), 3, True, True), ("bfloat16", (64, 256, 4, 1), 0, False, False),
    ("float16", (128, 128, 3, 2), 4, True, True), ("float16", (64, 128, 6, 1), 2, False, True),
    ("float8_e4m3fn", (64, 256, 3, 2), 6, True, True), ("int8", (128, 128, 4, 1), 3, False, True),
    ("int8", (64, 128, 5, 2), 0, True, True),
]  # fmt: skip
# Every ping-pong tile with each operand dtype that takes it (int8: BLOCK_N <= 128), a
# residual where it has two output buffers, and a bias and activation throughout.
PINGPONG_CASES = [
    (dtype, tile, 3, tile[3] == 2, True)
    for tile in WS_PINGPONG_TILES
    for dtype in ("float16", "bfloat16", "float8_e4m3fn", "int8")
    if not (dtype == "int8" and tile[1] > 128)
]


@pytest.mark.parametrize(
    "dtype,tile,activation,residual,bias,pingpong",
    [(*case, False) for case in COMPILE_CASES] + [(*case, True) for case in PINGPONG_CASES],
)
def test_compiles_for_sm90_warp_specialized(
    dtype, tile, activation, residual, bias, pingpong, tmp_path
) -> None:
    """12 warps, setmaxnreg, shared memory as ws_shared_bytes counts it (within 227 KB), the
    wgmma of the operand dtype, TMA loads and stores, no serialized wgmma (C7514); the K loop
    keeps one wgmma in flight (a wait for all but one, W1, then the final wait for all, W0);
    and no spills under the Triton release the kernel was measured with. Both schedules."""
    argv = [*tile, activation, int(residual), int(bias), int(pingpong), 128]
    line = run_uninterpreted(COMPILE_SM90, dtype, *argv, tmp_path).strip().splitlines()[-1]
    warps, shared = map(int, line.split())
    item = getattr(torch, dtype).itemsize
    assert warps == 12, warps
    counted = ws_shared_bytes(*tile, 2, pingpong)
    assert counted <= shared <= counted + 1024, shared
    assert shared <= 227 * 1024
    info = ptxas_report(tmp_path / "k.ptx", tmp_path / "p.cubin")
    assert "C7514" not in info, info
    sass = dump_sass(tmp_path / "k.cubin")
    mma = {"int8": "IGMMA", "float8_e4m3fn": "QGMMA"}.get(dtype, "HGMMA")
    assert mma in sass, f"no {mma} (itemsize {item})"
    events = sass_events(tmp_path / "k.cubin")
    assert "S" in events and "L" in events and "T" in events, events
    assert "W1" in events and "W0" in events[events.index("W1") :], events
    no_spills_where_measured(info)


ROPE_CASES = [((128, 128, 5, 2), True), ((64, 128, 5, 2), False), ((64, 256, 3, 2), False)]


@pytest.mark.parametrize("tile,pingpong", ROPE_CASES)
def test_compiles_the_rope_epilogue_for_sm90(tile, pingpong, tmp_path) -> None:
    """RoPE in the epilogue (bf16, a bias, heads of 128: one per 128-wide tile, two per
    256-wide one): the pairs rotated by the approximate sin/cos of the GPU, TMA stores, no
    spills where measured."""
    argv = [*tile, 0, 0, 1, int(pingpong), 128, tmp_path, 1]
    run_uninterpreted(COMPILE_SM90, "bfloat16", *argv)
    info = ptxas_report(tmp_path / "k.ptx", tmp_path / "p.cubin")
    ptx = (tmp_path / "k.ptx").read_text()
    assert re.search(r"sin\.approx\.(ftz\.)?f32", ptx) and re.search(
        r"cos\.approx\.(ftz\.)?f32", ptx
    )
    events = sass_events(tmp_path / "k.cubin")
    assert "T" in events and "W0" in events, events
    no_spills_where_measured(info)


@pytest.mark.parametrize("tile", WS_DEEP_K_TILES)
def test_compiles_the_256_byte_k_tiles_for_sm90(tile, tmp_path) -> None:
    """The int8 tiles with 256 bytes of K per step: the TMA box of each operand is two
    128-byte swizzle spans (two loads each per step, where 128 bytes take one), shared memory
    as ws_shared_bytes counts it within 227 KB, IGMMA with one group kept in flight, and no
    spills where measured."""
    wg_m, bn, stages, c_bufs, pingpong = tile
    argv = [wg_m, bn, stages, c_bufs, 3, int(c_bufs == 2), 1, int(pingpong), 256]
    line = run_uninterpreted(COMPILE_SM90, "int8", *argv, tmp_path).strip().splitlines()[-1]
    warps, shared = map(int, line.split())
    counted = ws_shared_bytes(wg_m, bn, stages, c_bufs, 2, pingpong, 256)
    assert warps == 12 and counted <= shared <= counted + 1024 <= 227 * 1024 + 1024, shared
    info = ptxas_report(tmp_path / "k.ptx", tmp_path / "p.cubin")
    assert "C7514" not in info, info
    sass = dump_sass(tmp_path / "k.cubin")
    assert "IGMMA" in sass
    # Per step: the A tile(s) of the step and the W tile, each box split in two (plus, with a
    # residual, its two column halves in each consumer, 128-byte boxes each).
    a_tiles = 1 if pingpong else 2
    residual_loads = 4 if c_bufs == 2 else 0
    assert sass.count("UTMALDG") == 2 * (a_tiles + 1) + residual_loads, sass.count("UTMALDG")
    events = sass_events(tmp_path / "k.cubin")
    assert "W1" in events and "W0" in events[events.index("W1") :], events
    no_spills_where_measured(info)
    assert len(ws_deep_k_candidates()) == len(WS_DEEP_K_TILES)
    assert all(p["BLOCK_K"] == 256 for p in ws_deep_k_candidates())
    assert all(p["C_BUFS"] == 2 for p in ws_deep_k_candidates(residual=True))


def test_tiles_fit_shared_memory_and_registers() -> None:
    """Every offered tile fits the 227 KB of an sm_90 CTA, the accumulator fits its consumer's
    240 registers with room for the epilogue, and the launch's registers fit the SM; both
    schedules are offered for every operand dtype."""
    assert WS_MAXNREG * 12 * 32 <= 65536
    for elem_bytes, int8 in ((2, False), (1, False), (1, True)):
        plans = ws_candidates(elem_bytes, int8)
        assert plans, (elem_bytes, int8)
        schedules = {p.kwargs.get("SCHEDULE", "coop") for p in plans}
        assert schedules == {"coop", "pingpong"}, (elem_bytes, int8, schedules)
        for plan in plans:
            pingpong = plan.kwargs.get("SCHEDULE") == "pingpong"
            wg_m, bn = plan["BLOCK_M"] // (1 if pingpong else 2), plan["BLOCK_N"]
            assert plan["BLOCK_K"] * elem_bytes == 128
            used = ws_shared_bytes(wg_m, bn, plan["STAGES"], plan["C_BUFS"], 2, pingpong)
            assert used <= SM90_SHARED_BYTES, plan
            assert wg_m * bn // 128 <= 128 and plan["STAGES"] >= 3
            assert plan.maxnreg == WS_MAXNREG and plan.num_warps == 4
            assert not (int8 and bn > 128)
    # A tile too deep for the shared memory is left out, not offered to fail at compile.
    assert ws_shared_bytes(64, 256, 4, 2, 2) > SM90_SHARED_BYTES
    assert ws_shared_bytes(64, 128, 9, 2, 2, pingpong=True) > SM90_SHARED_BYTES
    assert all(ws_shared_bytes(*tile, 2) <= SM90_SHARED_BYTES for tile in WS_TILES)
    assert all(ws_shared_bytes(*tile, 2, True) <= SM90_SHARED_BYTES for tile in WS_PINGPONG_TILES)
    # One A tile per slot instead of two: at 64 x 128 a ping-pong ring holds 8 stages, a
    # cooperative one at most 6 (with both output halves buffered).
    assert ws_shared_bytes(64, 128, 8, 2, 2, pingpong=True) <= SM90_SHARED_BYTES
    assert ws_shared_bytes(64, 128, 7, 2, 2) > SM90_SHARED_BYTES
    # A residual comes into both output halves at once: only two-buffer tiles take one.
    assert all(p["C_BUFS"] == 2 for p in ws_candidates(2, residual=True))
    assert any(p["C_BUFS"] == 1 for p in ws_candidates(2))
    # Cooperative plans carry no SCHEDULE: those stored before the ping-pong one read back
    # as the same plans (this one is in the shipped H100 tables).
    plans = ws_candidates(2)
    coop = plans[: len(WS_TILES)]
    assert all("SCHEDULE" not in p.kwargs for p in coop)
    assert all(p["SCHEDULE"] == "pingpong" for p in plans[len(WS_TILES) :])
    stored = Config.of(KIND="ws", BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, STAGES=4,
                       C_BUFS=1, SPLIT_K=1, PERSISTENT=True, FUSED_QUANT=False, num_warps=4,
                       num_stages=1, maxnreg=WS_MAXNREG)  # fmt: skip
    assert stored in coop
    # A ping-pong plan's BLOCK_M is its one consumer's rows.
    assert {(p["BLOCK_M"], p["BLOCK_N"]) for p in plans[len(WS_TILES) :]} == {
        (wg_m, bn) for wg_m, bn, _, _ in WS_PINGPONG_TILES
    }


def test_not_offered_off_hopper() -> None:
    """Under the interpreter (or without an sm_90 GPU) the Gluon kernel is never a candidate:
    the plans, the choice's name and key stay those of the portable kernels."""
    w = torch.randn(96, 64, dtype=torch.float16)
    x = torch.randn(80, 64, dtype=torch.float16)
    layer = Linear(w, None)
    out = torch.empty(80, 96, dtype=torch.float16)
    assert not layer.ws_ok(x, out)
    assert all(p["KIND"] != "ws" for p in layer.candidates(x, every_kind=True))
    choice = layer.choose(x, out, None)
    assert choice.kernel == "linear" and choice.config["KIND"] != "ws"
    # Where it applies (ws=True, as `choose` asks on sm_90), both schedules join the tiles.
    offered = [p for p in layer.candidates(x, ws=True) if p["KIND"] == "ws"]
    assert {p.kwargs.get("SCHEDULE", "coop") for p in offered} == {"coop", "pingpong"}


ACTIVATIONS = {"none": lambda t: t, "silu": F.silu, "gelu": F.gelu, "relu": torch.relu}


def _inputs(m, n, k, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    r = torch.randn(m, n, generator=gen).to(dtype)
    return x, w, b, r


@pytest.mark.hopper
@pytest.mark.parametrize(
    "dtype,m,n,k,activation,residual",
    [(torch.float16, 1000, 1000, 1032, "silu", True), (torch.bfloat16, 4095, 776, 4096, "gelu", False),
     (torch.float16, 4095, 2056, 520, "none", True), (torch.bfloat16, 65 + 128, 4104, 768, "relu", True)],
)  # fmt: skip
def test_gpu_every_tile_matches_float64(dtype, m, n, k, activation, residual) -> None:
    """Odd M (partial row tiles, the second consumer's rows past M), N not a multiple of any
    tile, bias, activation and residual; every ws tile through Linear; NaN-poisoned outputs."""
    x, w, b, r = _inputs(m, n, k, dtype, seed=m + n)
    ref = ACTIVATIONS[activation](x.double() @ w.double().T + b.double())
    ref = ref + r.double() if residual else ref
    layer = Linear(w.cuda(), b.cuda(), activation)
    xc, rc = x.cuda(), (r.cuda() if residual else None)
    plans = [p for p in layer.candidates(xc, every_kind=True, residual=residual, ws=True)
             if p["KIND"] == "ws"]  # fmt: skip
    assert plans
    for plan in plans:
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        layer.launch(plan, xc, out, rc)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), plan
        err = ((out.double().cpu() - ref).norm() / ref.norm()).item()
        assert err <= {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype], (plan, err)


@pytest.mark.hopper
@pytest.mark.parametrize("quant", ["int8", "fp8"])
def test_gpu_quantized_matches_the_portable_kernel(quant) -> None:
    """int8 (int32 sums) and fp8 (fp32 sums) ws tiles: against the same layer's portable
    tiled plan (same quantized x and W, so only summation order differs) and, within the
    quantization's tolerance, against the float64 of the unquantized layer."""
    from opbench.kernels.gemm.linear_fp8 import Fp8Linear
    from opbench.kernels.gemm.linear_int8 import Int8Linear

    m, n, k = 1000, 1000, 1040
    x, w, b, r = _inputs(m, n, k, torch.float16, seed=7)
    exact = F.silu(x.double() @ w.double().T + b.double()) + r.double()
    layer = (Int8Linear if quant == "int8" else Fp8Linear)(w.cuda(), b.cuda(), "silu")
    xc, rc = x.cuda(), r.cuda()
    plans = layer.candidates(xc, every_kind=True, residual=True, ws=True)
    tiled = next(p for p in plans if p["KIND"] == "tiled")
    base = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    layer.launch(tiled, xc, base, rc)
    ws_plans = [p for p in plans if p["KIND"] == "ws"]
    assert ws_plans
    for plan in ws_plans:
        out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        layer.launch(plan, xc, out, rc)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), plan
        same = ((out.double() - base.double()).norm() / base.double().norm()).item()
        assert same <= 2e-3, (plan, same)
        err = ((out.double().cpu() - exact).norm() / exact.norm()).item()
        assert err <= 3e-2, (plan, err)


@pytest.mark.hopper
@pytest.mark.parametrize("kind", ["fp16", "bf16", "fp8", "int8"])
def test_gpu_pingpong_schedule_matches_float64(kind) -> None:
    """The ping-pong schedule (each consumer its own tile, the two taking turns on the tensor
    cores) through the layers, with bias, silu and a residual, NaN-poisoned outputs: odd M
    (a partial last tile-row), N off every tile width, K of 9-17 steps (the ring wraps
    within and across tiles and consumers), and 4.4 tiles per program at 64 x 256 (so some
    programs' second consumer has one tile fewer than the first, and with 128 x 128 some
    programs have a single tile). 16-bit: against float64 of the same operands; fp8 and
    int8: against the same layer's portable tiled plan (same quantized x and W) and, within
    the quantization's error, float64 of the unquantized layer."""
    from opbench.kernels.gemm.linear_fp8 import Fp8Linear
    from opbench.kernels.gemm.linear_int8 import Int8Linear

    m, n, k = 4095, 2056, 1040
    dtype = torch.bfloat16 if kind == "bf16" else torch.float16
    x, w, b, r = (t.cuda() for t in _inputs(m, n, k, dtype, seed=31))
    exact = F.silu(x.double() @ w.double().T + b.double()) + r.double()
    cls = {"fp8": Fp8Linear, "int8": Int8Linear}.get(kind, Linear)
    layer = cls(w, b, "silu")
    plans = layer.candidates(x, every_kind=True, residual=True, ws=True)
    pingpong = [p for p in plans if p.kwargs.get("SCHEDULE") == "pingpong"]
    assert pingpong, "no ping-pong plan offered"
    base = None
    if kind in ("fp8", "int8"):
        base = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        layer.launch(next(p for p in plans if p["KIND"] == "tiled"), x, base, r)
    for plan in pingpong:
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        layer.launch(plan, x, out, r)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), plan
        err = ((out.double() - exact).norm() / exact.norm()).item()
        limit = {"fp16": 2e-3, "bf16": 1e-2}.get(kind, 3e-2)
        assert err <= limit, (plan, err)
        if base is not None:
            same = ((out.double() - base.double()).norm() / base.double().norm()).item()
            assert same <= 2e-3, (plan, same)
