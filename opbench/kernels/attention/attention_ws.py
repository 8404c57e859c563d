"""The warp-specialized Hopper attention (its kernel and schedule: attention_ws_kernel.py) on
[B, S, H, D] views, for the three operand formats of its QUANT constexpr: "fp16" (fp16/bf16
throughout), "fp8" (e4m3 on both MMAs, K and V quantized by attention_fp8.py's passes) and
"int8" (int8 Q K^T, K quantized by attention_int8.py's passes).

`ws_calls` binds the kernel alone (its tile tuned, or forced: benchmarks, GPU tests);
`tuned_sm90_calls` makes the one tuned choice a layer makes on Hopper, between this kernel's
tiles and the other kernels of the same format (fp16: attention_hopper.py's single-program
Gluon kernel and the portable one; fp8, int8: the portable quantized kernel, after the same
quantization passes). Both return (calls, choice, keep): the calls in launch order, the
choice, and the quantized tensors the calls read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from opbench.kernels import Unsupported
from opbench.kernels.attention.attention import LOG2E, as_config, views_key
from opbench.kernels.attention.attention_fp8 import fp8_launch
from opbench.kernels.attention.attention_hopper import _descriptor, hopper_usable, sm90_launch
from opbench.kernels.attention.attention_int8 import KEY_BLOCK, int8_launch
from opbench.kernels.attention.attention_ws_kernel import _attention_ws_kernel
from opbench.kernels.attention.attention_ws_step import (
    FP8_QUANT,
    INT8_QK,
    NO_QUANT,
    WG_M,
    ws_candidates,
    ws_kernel_call,
)
from opbench.kernels.launch import KernelCall, by_kernel, chosen_call, quantized_choice
from opbench.kernels.tuning import Choice, Config

Tile = tuple[int, int, bool, bool]  # (BLOCK_N, STAGES, PINGPONG, P_REGS)
# The kernel's QUANT constexpr per format.
QUANTS = {"fp16": NO_QUANT.value, "fp8": FP8_QUANT.value, "int8": INT8_QK.value}
# The name of the kernel's candidates (their KERNEL meta) and of its tuned choices, per format:
# the plan tables and caches keep these names.
KERNEL_NAME = {"fp16": "ws", "fp8": "ws_fp8", "int8": "ws_int8"}
ALONE_KEY = {"fp16": "attention_ws", "fp8": "attention_ws_fp8", "int8": "attention_ws_int8"}
SM90_KEY = {"fp16": "attention_sm90_ws", "fp8": "attention_fp8_sm90", "int8": "attention_int8_sm90"}

# Tiles per format and head dim. Shared memory at D 128, BLOCK_N 128: fp16 2 Q tiles + STAGES
# K and V tiles + 4 P tiles unless P_REGS (32 + 2 x 2 x 32 + 4 x 16 = 224 KB of 227 staged;
# 32 + 3 x 2 x 32 = 224 KB with P in registers and 3 stages); int8 adds 2 int8 Q tiles and
# halves K (208 KB staged with 2 stages, 192 KB in registers with 3). Measured on an H100
# (docs/perf/attention.md, 2026-11-25): BLOCK_N 64 lost to 128 on every shape by 10-25%;
# ping-pong on or off each won some shapes; fp16 P in registers with 3 stages won at D 128
# (598 / 545 TFLOP/s S 8192 against 569 / 485); fp8 P in registers lost (600-619 against
# 690-713), so fp8 is offered P in shared memory only. BLOCK_N 128 = KEY_BLOCK for the
# quantized formats: one K scale per key block.
WS_TILES: dict[str, dict[int, list[Tile]]] = {
    "fp16": {
        64: [(128, 3, True, False), (128, 3, False, False), (128, 3, True, True),
             (128, 3, False, True), (128, 5, True, True), (128, 5, False, True)],
        128: [(128, 2, True, False), (128, 2, False, False), (128, 3, True, True),
              (128, 3, False, True)],
    },
    "fp8": {
        64: [(128, 4, True, False), (128, 4, False, False)],
        128: [(128, 3, True, False), (128, 3, False, False)],
    },
    "int8": {
        64: [(128, 3, True, False), (128, 3, False, False), (128, 4, True, True),
             (128, 4, False, True)],
        128: [(128, 2, True, False), (128, 2, False, False), (128, 3, True, True),
              (128, 3, False, True)],
    },
}  # fmt: skip

# The quantization passes and the portable kernel of each quantized format:
# (q, k, v, out, causal) -> (quantize calls' maker, kept tensors, make, candidates).
PORTABLE = {"fp8": fp8_launch, "int8": int8_launch}
PORTABLE_KERNEL = {"fp8": "fp8", "int8": "int8"}


class WsArgs(NamedTuple):
    """The kernel's runtime arguments, by name (its signature's order)."""

    q_desc: TensorDescriptor
    k_desc: TensorDescriptor
    v_desc: TensorDescriptor
    k_scale: torch.Tensor | None  # fp8, int8: one scale per 128 keys of each head
    v_scale: torch.Tensor | None  # fp8: one scale per channel of each head
    out: torch.Tensor
    seq_len: int
    padded_len: int | None  # fp8, int8: k8's rows per head
    heads: int
    stride_ob: int
    stride_os: int
    stride_oh: int
    qk_scale: float


def ws_usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> bool:
    """Where the Gluon Hopper kernels apply (attention_hopper.hopper_usable), D 64 or 128."""
    return hopper_usable(q, k, v, out) and q.shape[-1] in WS_TILES["fp16"]


def code_descriptor(codes: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """3-D codes [G, R, C] (e4m3 or int8) as a TMA descriptor over the [G R, C] matrix."""
    matrix = codes.flatten(0, 1)
    dtype = gl.float8e4nv if codes.dtype == torch.float8_e4m3fn else gl.int8
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return TensorDescriptor(matrix, list(matrix.shape), [matrix.stride(0), 1], block, layout)


def ws_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, quant: str,
            quantized: list, block_n: int) -> WsArgs:  # fmt: skip
    """The kernel's arguments for one tile width: fp16 reads q, k, v; fp8 reads q and
    [k8, k_scale, vt8, v_scale] (attention_fp8's passes); int8 q, v and [k8, k_scale]."""
    batch, seq, heads, head_dim = q.shape
    common = dict(out=out, seq_len=seq, heads=heads, stride_ob=out.stride(0),
                  stride_os=out.stride(1), stride_oh=out.stride(2),
                  qk_scale=LOG2E / math.sqrt(head_dim))  # fmt: skip
    q_desc = _descriptor(q, WG_M.value)
    if quant == "fp16":
        return WsArgs(q_desc, _descriptor(k, block_n), _descriptor(v, block_n), None, None,
                      padded_len=None, **common)  # fmt: skip
    k8, k_scale = quantized[:2]
    k_desc = code_descriptor(k8, [block_n, head_dim])
    if quant == "int8":
        return WsArgs(q_desc, k_desc, _descriptor(v, block_n), k_scale, None,
                      padded_len=k8.shape[1], **common)  # fmt: skip
    vt8, v_scale = quantized[2:4]
    return WsArgs(q_desc, k_desc, code_descriptor(vt8, [head_dim, block_n]), k_scale, v_scale,
                  padded_len=k8.shape[1], **common)  # fmt: skip


def ws_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool,
    quant: str, quantized: list,
) -> tuple[Callable[[Config], KernelCall], list[Config]]:  # fmt: skip
    """The kernel's KernelCall for a config, reading `quantized` (what the format's passes
    write; [] for fp16), and its candidates."""
    assert KEY_BLOCK == 128

    def make(cfg: Config) -> KernelCall:
        args = ws_args(q, k, v, out, quant, quantized, cfg["BLOCK_N"])
        return ws_kernel_call(_attention_ws_kernel, q, tuple(args), causal, cfg, QUANTS[quant])

    return make, ws_candidates(KERNEL_NAME[quant], WS_TILES[quant][q.shape[-1]])


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, quant: str):
    if quant not in QUANTS:
        raise Unsupported(f"the warp-specialized attention kernel has no {quant!r} format")
    if not ws_usable(q, k, v, out):
        raise Unsupported(f"the warp-specialized {quant} attention kernel needs an sm_90 GPU, "
                          "fp16/bf16, D 64/128 and TMA-able views")  # fmt: skip


def ws_calls(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    quant: str = "fp16",
    config: Config | dict | None = None,
) -> tuple[list[KernelCall], Choice, list]:
    """The format's quantization passes (fp8, int8), then this kernel alone, bound on
    [B, S, H, D] views that `ws_usable` accepts; its tile tuned unless `config` forces one."""
    _check(q, k, v, out, quant)
    key = views_key(q, out, causal)
    if quant == "fp16":
        make, candidates = ws_launch(q, k, v, out, causal, quant, [])
        call, choice = chosen_call(ALONE_KEY[quant], key, make, candidates, q.device,
                                   as_config(config))  # fmt: skip
        return [call], choice, []
    quantize, keep, _, _ = PORTABLE[quant](q, k, v, out, causal)
    make, candidates = ws_launch(q, k, v, out, causal, quant, keep)
    calls, choice = quantized_choice(ALONE_KEY[quant], key, quantize, make, candidates, q.device,
                                     as_config(config))  # fmt: skip
    return calls, choice, keep


def tuned_sm90_calls(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool,
    quant: str = "fp16",
) -> tuple[list[KernelCall], Choice, list]:  # fmt: skip
    """One tuned choice among this kernel's tiles and the format's other kernels (KERNEL says
    which), for views `ws_usable` accepts; fp8 and int8 run their quantization passes first.
    The int8 choice is not in the shipped plan tables yet: tuned at the first bind."""
    _check(q, k, v, out, quant)
    key = views_key(q, out, causal)
    if quant == "fp16":
        make_ws, ws_tiles = ws_launch(q, k, v, out, causal, quant, [])
        make_other, other_candidates = sm90_launch(q, k, v, out, causal)

        def make(cfg: Config) -> KernelCall:
            return make_ws(cfg) if cfg["KERNEL"] == "ws" else make_other(cfg)

        call, choice = chosen_call(SM90_KEY[quant], key, make, ws_tiles + other_candidates,
                                   q.device)  # fmt: skip
        return [call], choice, []
    quantize, keep, make_portable, portable_candidates = PORTABLE[quant](q, k, v, out, causal)
    make_ws, ws_tiles = ws_launch(q, k, v, out, causal, quant, keep)
    candidates = ws_tiles + [
        c.with_meta(KERNEL=PORTABLE_KERNEL[quant]) for c in portable_candidates
    ]
    make = by_kernel(KERNEL_NAME[quant], make_ws, make_portable)
    calls, choice = quantized_choice(SM90_KEY[quant], key, quantize, make, candidates, q.device)
    return calls, choice, keep
