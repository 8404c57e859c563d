"""2-D convolution as an implicit GEMM, NCHW in and NCHW out.

The math. With output size OH = (H + 2*PH - DH*(KH-1) - 1) // SH + 1 (and OW alike),

    out[n, o, oh, ow] = bias[o]
        + sum_{r < KH, s < KW, c < C} x[n, c, oh*SH - PH + r*DH, ow*SW - PW + s*DW] * w[o, c, r, s]

is a GEMM  out[m, o] = sum_k A[m, k] * B[k, o]  with
    m = (n, oh, ow)   M = N*OH*OW output pixels,
    k = (r, s, c)     K = KH*KW*C,
    o                 Cout output channels,
where A[m, k] is the input pixel that tap (r, s) of output pixel m sees (zero in the padding).
"Implicit" means A is never written out: each program gathers its [BLOCK_M, BLOCK_K] tile of A
straight from x inside the K loop, so HBM sees x about once, not KH*KW times.

Cost. FLOPs = 2*M*Cout*K. The byte floor is x + w + out read/written once:
2*(N*C*H*W + Cout*K + N*Cout*OH*OW) bytes in fp16. The ResNet 3x3 layers sit at ~100-500
FLOP/byte (tensor-core bound on an H200); 1x1 layers and the 7x7 C=3 stem (output-heavy) sit
at 50-120 FLOP/byte, near the ~206 FLOP/byte ridge, so their stores matter as much as the MMAs.

Ways to read A (the `path`), one kernel:
  * "direct"    K steps are (tap, BLOCK_K channels); A is gathered from NCHW through its strides
                (pixels contiguous, so warps coalesce, but loads are scalar).
  * "nhwc"      x is first transposed to NHWC by `_nchw_to_nhwc_kernel` (one extra read and write
                of x); then every A row is a contiguous, 16-byte aligned run of channels that the
                software pipeline streams with cp.async. No transpose when x is channels_last.
  * "gather"    K flattened over (r, s, c): for few input channels (the C=3 stem) where channel
                blocks would be mostly padding.
  * "pointwise" 1x1, stride 1, no padding on NCHW: A[m, c] = x[n, c, p] is a plain matrix with
                pixels contiguous, read with vector loads.
The epilogue adds bias, applies the activation, and stores NCHW: for a fixed channel o the pixels
of one image are contiguous, so stores run along m.

Shapes and strides are compile-time constants: index math divides by constants, the compiler
knows which runs are contiguous and aligned, and a launch passes only six pointers. On its first
call for an input signature, the callable times its candidate (path, tile) plans on the GPU and
keeps the fastest (`select_plan`, like cudnn.benchmark); later calls launch that plan's kernels
with fixed meta-parameters (`CompiledLaunch`).

int8 (quant="int8", `conv_int8.py`): weights quantized per output channel at build time; x
quantized per image at run time into NHWC int8; int8 dot with int32 accumulation; the epilogue
multiplies by x_scale[n] * w_scale[o] before bias and activation.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl
import triton.testing

from opbench.kernels import Unsupported
from opbench.kernels.epilogue import activation_code, apply_activation

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# Relaunch compiled kernels directly (see CompiledLaunch) when OPBENCH_CONV_FAST_LAUNCH=1. Off by
# default: it has not yet run on a GPU in its fixed form, and docs/perf/conv.md was measured without it.
FAST_LAUNCH = os.environ.get("OPBENCH_CONV_FAST_LAUNCH", "0") == "1"

# How the kernel walks K (see the module docstring).
K_CHANNEL_BLOCKS, K_GATHER, K_POINTWISE = 0, 1, 2
# Packed weight rows are zero-padded to this many elements, so the "gather" path reads B unmasked
# and rows start 16-byte aligned.
K_ALIGN = 128
# Below this many input channels, channel blocks would be mostly padding: use the gather path.
MIN_CHANNELS_FOR_BLOCKS = 16
# A tile: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages).
Tile = tuple[int, int, int, int, int]


@triton.jit
def _accumulate(
    a, b, acc, IS_INT8: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr
):
    """acc += a @ b on tensor cores: int8 -> int32, or 16/32-bit floats -> float32."""
    if IS_INT8:
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    elif UPCAST:  # CPU interpreter only: it multiplies bf16 bit patterns as integers
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def _conv2d_kernel(
    # pointers
    x_ptr,  # input, element (n, c, h, w) at n*STRIDE_XN + c*STRIDE_XC + h*STRIDE_XH + w*STRIDE_XW
    w_ptr,  # packed weights [COUT, STRIDE_WO]: row o holds w[o] in (r, s, c) order, then zeros
    bias_ptr,  # float32 [COUT]; unused unless HAS_BIAS
    x_scale_ptr,  # float32 [N] per-image activation scales; unused unless IS_INT8
    w_scale_ptr,  # float32 [COUT] per-channel weight scales; unused unless IS_INT8
    out_ptr,  # output, element (n, o, p) at n*STRIDE_ON + o*STRIDE_OC + p, p = oh*OW + ow
    # shapes
    M: tl.constexpr,  # N*OH*OW, rows of the implicit GEMM
    C: tl.constexpr,  # input channels
    H: tl.constexpr,  # input height
    W: tl.constexpr,  # input width
    COUT: tl.constexpr,  # output channels, columns of the GEMM
    OH: tl.constexpr,  # output height
    OW: tl.constexpr,  # output width
    # strides, in elements
    STRIDE_XN: tl.constexpr,
    STRIDE_XC: tl.constexpr,
    STRIDE_XH: tl.constexpr,
    STRIDE_XW: tl.constexpr,
    STRIDE_WO: tl.constexpr,  # K_pad: distance between packed weight rows
    STRIDE_ON: tl.constexpr,
    STRIDE_OC: tl.constexpr,
    # meta-parameters
    KH: tl.constexpr,  # kernel height
    KW: tl.constexpr,  # kernel width
    SH: tl.constexpr,  # stride
    SW: tl.constexpr,
    PH: tl.constexpr,  # padding
    PW: tl.constexpr,
    DH: tl.constexpr,  # dilation
    DW: tl.constexpr,
    K_MODE: tl.constexpr,  # 0 K_CHANNEL_BLOCKS, 1 K_GATHER, 2 K_POINTWISE
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # code from epilogue.activation_code
    IS_INT8: tl.constexpr,  # int8 x and w, int32 accumulation, dequantized in the epilogue
    INPUT_PRECISION: tl.constexpr,  # "ieee" for true fp32 products; ignored by 16-bit and int8 dots
    UPCAST_OPERANDS: tl.constexpr,  # True only under the CPU interpreter with bfloat16
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # row tiles per group, so neighbouring programs share B tiles in L2
):
    # Grouped launch order: programs next to each other walk GROUP_M row tiles of one column tile.
    pid = tl.program_id(0)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (COUT + BLOCK_N - 1) // BLOCK_N
    group_size = GROUP_M * num_pid_n
    first_pid_m = (pid // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_valid = offs_m < M
    n_valid = offs_n < COUT
    image = offs_m // (OH * OW)
    pixel = offs_m % (OH * OW)  # kept whole (not oh*OW + ow) so the compiler sees runs of pixels
    ih0 = (pixel // OW) * SH - PH  # input row seen by tap r = 0
    iw0 = (pixel % OW) * SW - PW
    if K_MODE == 2:  # K_POINTWISE: pixels of x and out coincide
        x_row = image * STRIDE_XN + pixel * STRIDE_XW
    else:
        x_row = image * STRIDE_XN + ih0 * STRIDE_XH + iw0 * STRIDE_XW
    w_col = w_ptr + offs_n * STRIDE_WO

    if IS_INT8:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)

    if K_MODE == 1:  # K_GATHER
        K = KH * KW * C
        for k0 in range(0, K, BLOCK_K):
            k = k0 + offs_k
            tap = k // C
            c = k % C
            r = tap // KW
            s = tap % KW
            ih = ih0[:, None] + (r * DH)[None, :]
            iw = iw0[:, None] + (s * DW)[None, :]
            a_mask = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            a_mask = a_mask & m_valid[:, None] & (k < K)[None, :]
            k_off = r * DH * STRIDE_XH + s * DW * STRIDE_XW + c * STRIDE_XC
            a = tl.load(x_ptr + x_row[:, None] + k_off[None, :], mask=a_mask, other=0.0)
            # Rows are zero-padded to a multiple of K_ALIGN >= BLOCK_K: no K mask needed.
            b = tl.load(w_col[None, :] + k[:, None], mask=n_valid[None, :], other=0.0)
            acc = _accumulate(a, b, acc, IS_INT8, INPUT_PRECISION, UPCAST_OPERANDS)
    else:
        C_BLOCKS = (C + BLOCK_K - 1) // BLOCK_K
        for step in range(0, KH * KW * C_BLOCKS):
            tap = step // C_BLOCKS
            c = (step % C_BLOCKS) * BLOCK_K + offs_k
            r = tap // KW
            s = tap % KW
            if K_MODE == 2:
                row_ok = m_valid
                a_rows = x_row
            else:
                ih = ih0 + r * DH
                iw = iw0 + s * DW
                row_ok = m_valid & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                a_rows = x_row + (r * DH * STRIDE_XH + s * DW * STRIDE_XW)
            c_ok = c < C
            a_ptrs = x_ptr + a_rows[:, None] + c[None, :] * STRIDE_XC
            a = tl.load(a_ptrs, mask=row_ok[:, None] & c_ok[None, :], other=0.0)
            b_ptrs = w_col[None, :] + (tap * C + c)[:, None]
            b = tl.load(b_ptrs, mask=c_ok[:, None] & n_valid[None, :], other=0.0)
            acc = _accumulate(a, b, acc, IS_INT8, INPUT_PRECISION, UPCAST_OPERANDS)

    if IS_INT8:
        x_scale = tl.load(x_scale_ptr + image, mask=m_valid, other=0.0)
        w_scale = tl.load(w_scale_ptr + offs_n, mask=n_valid, other=0.0)
        result = acc.to(tl.float32) * x_scale[:, None] * w_scale[None, :]
    else:
        result = acc
    if HAS_BIAS:
        result += tl.load(bias_ptr + offs_n, mask=n_valid, other=0.0)[None, :]
    result = apply_activation(result, ACTIVATION)
    out_ptrs = out_ptr + (image * STRIDE_ON + pixel)[:, None] + (offs_n * STRIDE_OC)[None, :]
    out_mask = m_valid[:, None] & n_valid[None, :]
    tl.store(out_ptrs, result.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _nchw_to_nhwc_kernel(
    # pointers
    x_ptr,  # input [N, C, H*W], pixels contiguous
    y_ptr,  # output [N, H*W, C], channels contiguous
    # shapes
    C: tl.constexpr,
    HW: tl.constexpr,  # H*W
    # strides, in elements
    STRIDE_XN: tl.constexpr,
    STRIDE_XC: tl.constexpr,
    # meta-parameters
    BLOCK_C: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """Tiled transpose of each image: loads run along pixels, stores along channels.

    Bytes: one read and one write of x; the shared-memory transpose is the compiler's."""
    pid_p = tl.program_id(0)
    pid_c = tl.program_id(1)
    image = tl.program_id(2)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    mask = (offs_c < C)[:, None] & (offs_p < HW)[None, :]
    x_ptrs = x_ptr + image * STRIDE_XN + offs_c[:, None] * STRIDE_XC + offs_p[None, :]
    tile = tl.load(x_ptrs, mask=mask)
    y_ptrs = y_ptr + image * (HW * C) + offs_p[None, :] * C + offs_c[:, None]
    tl.store(y_ptrs, tile, mask=mask)


class CompiledLaunch:
    """One @triton.jit kernel with its constexprs, grid and launch options fixed.

    Triton's per-call path binds and specializes every argument in Python, tens of microseconds
    that can exceed a small conv's GPU time. With FAST_LAUNCH, after the first launch this calls
    the compiled kernel directly with the runtime arguments (all tensors). That kernel was
    specialized for 16-byte aligned pointers, so a call with an unaligned tensor goes through
    Triton's normal path.
    """

    def __init__(
        self, kernel, grid: tuple[int, ...], constexprs: dict, num_warps: int, num_stages: int
    ):
        self.kernel, self.constexprs = kernel, constexprs
        self.grid = tuple(grid) + (1,) * (3 - len(grid))  # a compiled kernel indexes all three
        self.options = {"num_warps": num_warps, "num_stages": num_stages}
        names = kernel.arg_names
        self.runtime_slots = [i for i, name in enumerate(names) if name not in constexprs]
        self.template = [constexprs.get(name) for name in names]
        self.runner = None

    def __call__(self, *tensors: torch.Tensor) -> None:
        aligned = all(t.data_ptr() % 16 == 0 for t in tensors)
        if self.runner is not None and aligned:
            args = self.template.copy()
            for slot, tensor in zip(self.runtime_slots, tensors, strict=True):
                args[slot] = tensor
            self.runner(*args)
            return
        compiled = self.kernel[self.grid](*tensors, **self.constexprs, **self.options)
        if aligned and FAST_LAUNCH and not INTERPRET and compiled is not None:
            self.runner = compiled[self.grid]


# Candidate tiles, timed on the first call (see `select_plan`); the first fitting one is the
# untimed choice under the CPU interpreter. Hopper's wgmma wants BLOCK_M a multiple of 64.
FLOAT_TILES: tuple[Tile, ...] = (
    (128, 64, 64, 4, 4),
    (128, 128, 64, 8, 3),
    (64, 128, 64, 4, 4),
    (128, 256, 64, 8, 3),
    (256, 64, 64, 8, 3),
    (64, 64, 64, 4, 4),
)
GATHER_TILES: tuple[Tile, ...] = ((128, 64, 32, 4, 4), (64, 64, 64, 4, 4), (128, 64, 16, 4, 4))
INT8_TILES: tuple[Tile, ...] = (
    (128, 128, 128, 8, 3),
    (128, 64, 128, 4, 4),
    (64, 128, 128, 4, 4),
    (128, 256, 128, 8, 3),
)
FP32_TILES: tuple[Tile, ...] = ((64, 64, 32, 4, 3),)
INTERPRET_TILE: Tile = (32, 32, 32, 4, 1)


def fitting_tiles(tiles: Sequence[Tile], cout: int, channels: int, gather: bool) -> list[Tile]:
    """Drop tiles much wider than Cout or deeper than C (mostly masked work)."""
    if INTERPRET:
        return [INTERPRET_TILE]
    kept = [
        t
        for t in tiles
        if t[1] <= max(64, triton.next_power_of_2(cout))
        and (gather or t[2] <= max(32, triton.next_power_of_2(channels)))
    ]
    return kept or [min(tiles, key=lambda t: t[0] * t[1])]


def fold_batchnorm(
    weight: torch.Tensor, bias: torch.Tensor | None, batchnorm: dict
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold inference batchnorm into the conv (build time, float64): w' = w*g, b' = (b - mean)*g + beta."""
    inv_std = torch.rsqrt(batchnorm["running_var"].double() + float(batchnorm.get("eps", 1e-5)))
    gamma = batchnorm.get("weight")
    gain = gamma.double() * inv_std if gamma is not None else inv_std
    beta = batchnorm.get("bias")
    shift = beta.double() if beta is not None else 0.0
    base = bias.double() if bias is not None else torch.zeros_like(gain)
    folded_w = weight.double() * gain[:, None, None, None]
    folded_b = (base - batchnorm["running_mean"].double()) * gain + shift
    return folded_w, folded_b


def pack_weight(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[Cout, C, KH, KW] -> [Cout, K_pad] in (r, s, c) order, zero-padded to a multiple of K_ALIGN."""
    cout, c, kh, kw = weight.shape
    k = kh * kw * c
    k_pad = triton.cdiv(k, K_ALIGN) * K_ALIGN
    packed = torch.zeros((cout, k_pad), dtype=dtype, device=weight.device)
    packed[:, :k] = weight.permute(0, 2, 3, 1).reshape(cout, k).to(dtype)
    return packed


def output_size(
    h: int, w: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, dh: int, dw: int
):
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"input {h}x{w} is smaller than the dilated kernel")
    return oh, ow


def check_output(
    out: torch.Tensor | None, shape: tuple, dtype: torch.dtype, device
) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {dtype} tensor of shape {shape}")
    return out


def conv_launch(
    x_shape: Sequence[int],
    x_strides: Sequence[int],
    out_shape: Sequence[int],
    packed: torch.Tensor,
    geometry: dict,
    *,
    k_mode: int,
    activation: int,
    has_bias: bool,
    is_int8: bool,
    upcast: bool,
    tile: Tile,
) -> CompiledLaunch:
    """The `_conv2d_kernel` launch for one input signature, x viewed as [N, C, H, W]."""
    n, c, h, w = x_shape
    _, cout, oh, ow = out_shape
    if max(n * c * h * w, n * cout * oh * ow) >= 2**31:
        raise Unsupported("tensors of 2**31 elements or more (32-bit indexing)")
    block_m, block_n, block_k, warps, stages = tile
    sxn, sxc, sxh, sxw = x_strides
    constexprs = dict(
        M=n * oh * ow, C=c, H=h, W=w, COUT=cout, OH=oh, OW=ow,
        STRIDE_XN=sxn, STRIDE_XC=sxc, STRIDE_XH=sxh, STRIDE_XW=sxw, STRIDE_WO=packed.stride(0),
        STRIDE_ON=cout * oh * ow, STRIDE_OC=oh * ow, **geometry,
        K_MODE=k_mode, HAS_BIAS=has_bias, ACTIVATION=activation, IS_INT8=is_int8,
        INPUT_PRECISION="ieee" if packed.dtype == torch.float32 else "tf32",
        UPCAST_OPERANDS=upcast, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
    )  # fmt: skip
    grid = (triton.cdiv(n * oh * ow, block_m) * triton.cdiv(cout, block_n),)
    return CompiledLaunch(_conv2d_kernel, grid, constexprs, warps, stages)


class FloatPlan:
    """fp16/bf16/fp32 conv for one input signature: an optional NCHW->NHWC transpose, then the conv."""

    def __init__(self, layer: FloatConv, x: torch.Tensor, out_shape: tuple, path: str, tile: Tile):
        n, c, h, w = x.shape
        self.name = f"{path} {tile}"
        self.nhwc_shape = None
        strides = x.stride()
        if path == "nhwc" and x.stride(1) != 1:
            self.nhwc_shape = (n, h, w, c)
            strides = (h * w * c, 1, w * c, c)
            block_c, block_p = (16, 32) if INTERPRET else (64, 64)
            grid = (triton.cdiv(h * w, block_p), triton.cdiv(c, block_c), n)
            meta = dict(C=c, HW=h * w, STRIDE_XN=x.stride(0), STRIDE_XC=x.stride(1))
            meta.update(BLOCK_C=block_c, BLOCK_P=block_p)
            self.transpose = CompiledLaunch(_nchw_to_nhwc_kernel, grid, meta, 4, 1)
        k_mode = {"gather": K_GATHER, "pointwise": K_POINTWISE}.get(path, K_CHANNEL_BLOCKS)
        upcast = INTERPRET and x.dtype == torch.bfloat16
        self.conv = conv_launch(
            x.shape, strides, out_shape, layer.packed, layer.geometry, k_mode=k_mode,
            activation=layer.activation, has_bias=layer.bias32 is not None, is_int8=False,
            upcast=upcast, tile=tile,
        )  # fmt: skip
        self.layer = layer

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        source = x
        if self.nhwc_shape is not None:
            source = torch.empty(self.nhwc_shape, device=x.device, dtype=x.dtype)
            self.transpose(x, source)
        bias = self.layer.bias32 if self.layer.bias32 is not None else out
        self.conv(source, self.layer.packed, bias, out, out, out)


def select_plan(plans: list, x: torch.Tensor, out: torch.Tensor, timings: dict):
    """Time each candidate plan on the GPU (first call for an input signature) and keep the
    fastest; plans that fail to compile (e.g. out of shared memory) are skipped. The median ms of
    each plan is recorded in `timings`."""
    if INTERPRET or len(plans) == 1:
        return plans[0]
    best, best_ms, error = None, float("inf"), None
    for plan in plans:
        try:
            ms = triton.testing.do_bench(lambda plan=plan: plan(x, out), warmup=10, rep=40)
        except Exception as exc:  # a tile that does not fit this GPU: try the others
            error = exc
            continue
        timings[plan.name] = ms
        if ms < best_ms:
            best, best_ms = plan, ms
    if best is None:
        raise RuntimeError(f"no conv plan ran: {error!r}")
    return best


class FloatConv:
    """The callable returned by `prepare_conv2d` for quant="none"."""

    def __init__(self, master_w, bias32, geometry: dict, activation: int, dtype, path: str):
        self.cout, self.cin, self.kh, self.kw = master_w.shape
        self.packed = pack_weight(master_w, dtype)
        self.bias32, self.geometry, self.activation = bias32, geometry, activation
        self.dtype, self.path = dtype, path
        self.plans: dict = {}
        self.timings: dict = {}  # plan name -> median ms, from the first-call selection

    def candidates(self, x: torch.Tensor, out_shape: tuple) -> list[FloatPlan]:
        g = self.geometry
        pointwise_ok = (g["KH"], g["KW"], g["SH"], g["SW"], g["PH"], g["PW"]) == (1, 1, 1, 1, 0, 0)
        c, hw = x.shape[1], x.shape[2] * x.shape[3]
        if self.path != "auto":
            paths = [self.path]
        elif c < MIN_CHANNELS_FOR_BLOCKS:
            paths = ["gather"]
        elif pointwise_ok and x.stride(3) == 1:
            paths = ["pointwise"] + (["nhwc"] if hw % 8 else [])
        elif x.stride(1) == 1 or x.stride(3) == 1:
            paths = ["direct", "nhwc"]
        else:
            paths = ["direct"]
        if self.path == "pointwise" and not pointwise_ok:
            raise ValueError("the pointwise path needs a 1x1 kernel, stride 1, no padding")
        plans = []
        for path in paths:
            table = GATHER_TILES if path == "gather" else FLOAT_TILES
            table = FP32_TILES if self.dtype == torch.float32 else table
            for tile in fitting_tiles(table, self.cout, c, path == "gather"):
                plans.append(FloatPlan(self, x, out_shape, path, tile))
        return plans

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.cin:
            raise ValueError(f"x must be [N, {self.cin}, H, W], got {tuple(x.shape)}")
        if x.dtype != self.dtype:
            raise TypeError(f"x is {x.dtype} but the layer was prepared for {self.dtype}")
        n, c, h, w = x.shape
        if h > 1 and w > 1 and x.stride(2) != w * x.stride(3):
            raise ValueError("x rows must be dense: pass a contiguous NCHW or channels_last tensor")
        g = self.geometry
        oh, ow = output_size(
            h, w, g["KH"], g["KW"], g["SH"], g["SW"], g["PH"], g["PW"], g["DH"], g["DW"]
        )
        out = check_output(out, (n, self.cout, oh, ow), x.dtype, x.device)
        key = (x.shape, x.stride(), x.device)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = select_plan(
                self.candidates(x, out.shape), x, out, self.timings
            )
        plan(x, out)
        return out


def prepare_conv2d(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int = 1,
    activation: str = "none",
    quant: str = "none",
    batchnorm: dict | None = None,
) -> Callable[..., torch.Tensor]:
    """Build-time work (fold batchnorm, pack/quantize weights); returns `fn(x, out=None)`."""
    return build_conv2d(
        weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups,
        activation=activation, quant=quant, batchnorm=batchnorm,
    )  # fmt: skip


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def build_conv2d(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int = 1,
    activation: str = "none",
    quant: str = "none",
    batchnorm: dict | None = None,
    path: str = "auto",
) -> Callable[..., torch.Tensor]:
    """`prepare_conv2d`, plus `path` to force one read path ("direct", "nhwc", "gather",
    "pointwise") so benchmarks and tests can reach each of them."""
    if groups != 1:
        raise Unsupported(f"groups={groups}: grouped and depthwise convolution are not implemented")
    if weight.dim() != 4:
        raise ValueError(f"weight must be [Cout, Cin, kh, kw], got shape {tuple(weight.shape)}")
    if quant not in ("none", "int8"):
        raise Unsupported(f"quant={quant!r}: only 'none' and 'int8'")
    if weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise Unsupported(f"weight dtype {weight.dtype}")
    if quant == "int8" and weight.dtype == torch.float32:
        raise Unsupported("int8 quantization of a float32 layer: only float16/bfloat16 inputs")
    if path not in ("auto", "direct", "nhwc", "gather", "pointwise"):
        raise ValueError(f"unknown path {path!r}")
    _, _, kh, kw = weight.shape
    if not (1 <= kh <= 7 and 1 <= kw <= 7):
        raise Unsupported(f"kernel {kh}x{kw}: sizes 1..7 only")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    geometry = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "PH": ph, "PW": pw, "DH": dh, "DW": dw}
    act = activation_code(activation, weight.dtype)  # the output takes the weight's dtype
    if batchnorm is not None:
        master_w, master_b = fold_batchnorm(weight, bias, batchnorm)
    else:
        master_w, master_b = weight.double(), (bias.double() if bias is not None else None)
    bias32 = master_b.float().contiguous() if master_b is not None else None
    if quant == "int8":
        from opbench.kernels.conv_int8 import Int8Conv

        return Int8Conv(master_w, bias32, geometry, act)
    return FloatConv(master_w, bias32, geometry, act, weight.dtype, path)
