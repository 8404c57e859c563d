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
2*(N*C*H*W + Cout*K + N*Cout*OH*OW) bytes in fp16. 3x3 layers of ResNet width are tensor-core
bound on an H200; 1x1 layers and the 7x7 C=3 stem (output-heavy) sit near the ridge, so their
stores matter as much as the MMAs.

Ways to read A (the plan's PATH, conv_plans.py), one kernel:
  * "direct"    K steps are (tap, BLOCK_K channels); A is gathered from NCHW through its strides
                (pixels contiguous, so warps coalesce, but loads are scalar).
  * "nhwc"      x is first copied to NHWC by the permute kernel (transpose.py; one extra read
                and write of x); then every A row is a contiguous, 16-byte aligned run of
                channels that the software pipeline streams with cp.async. No copy when x is
                channels_last.
  * "gather"    K flattened over (r, s, c): for few input channels (the C=3 stem) where channel
                blocks would be mostly padding.
  * "pointwise" 1x1, no padding, on NCHW: not this kernel but conv_pointwise.py's per-image
                GEMM out[n] = W @ X[n] (pixels contiguous in both), any stride.
The epilogue adds bias (with a folded batchnorm: its shift), then optionally a residual tile of
the output's shape (a residual block's skip connection), applies the activation, and stores
NCHW: for a fixed channel o the pixels of one image are contiguous, so stores run along m.

Shapes and strides are compile-time constants, except M (the batch's): index math divides by
constants, the compiler knows which runs are contiguous and aligned, and a launch passes seven
pointers and M.
int8 (`conv_int8.py`) runs the same kernel with IS_INT8. Measured figures: docs/perf/conv.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.conv import conv_plans
from opbench.kernels.conv.conv_pointwise import pointwise_call
from opbench.kernels.conv.conv_shapes import (
    ConvLayer,
    nhwc_strides,
    output_for,
    pack_weight,
    residual_strides,
)
from opbench.kernels.device import dot_accumulate
from opbench.kernels.epilogue import activation_code, apply_activation
from opbench.kernels.host import INTERPRET, cdiv, fold_batchnorm, pair
from opbench.kernels.launch import BoundKernels, KernelCall, config_call, sequence
from opbench.kernels.memory.transpose import bind_strided_map
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Choice, Config, choose, device_tag

# How the kernel walks K (see the module docstring); "pointwise" runs conv_pointwise.py.
K_CHANNEL_BLOCKS, K_GATHER = 0, 1
K_MODES = {"direct": K_CHANNEL_BLOCKS, "nhwc": K_CHANNEL_BLOCKS, "gather": K_GATHER}
PATHS = (*K_MODES, "pointwise")


# M (= N*OH*OW) is the only shape that changes with the batch: not a compile-time constant (a
# ResNet-50 would be ~200 one-second compiles per batch size), but specialized, as any int
# argument, on whether it is a multiple of 16: the output pixels run along m, and only a known
# alignment of the mask `m < M` lets the NCHW store (and the residual read) move 16 bytes at a
# time instead of 2. So a shape compiles at most twice across batch sizes (batch 32 always
# gives a multiple of 16). Every other shape stays constant: index math divides by constants.
@triton.jit
def _conv2d_kernel(
    # pointers
    x_ptr,  # input, element (n, c, h, w) at n*STRIDE_XN + c*STRIDE_XC + h*STRIDE_XH + w*STRIDE_XW
    w_ptr,  # packed weights [COUT, STRIDE_WO]: row o holds w[o] in (r, s, c) order, then zeros
    bias_ptr,  # float32 [COUT]; unused unless HAS_BIAS
    x_scale_ptr,  # float32 [N] per-image activation scales; unused unless IS_INT8
    w_scale_ptr,  # float32 [COUT] per-channel weight scales; unused unless IS_INT8
    out_ptr,  # output, element (n, o, p) at n*STRIDE_ON + o*STRIDE_OC + p, p = oh*OW + ow
    res_ptr,  # residual, out's shape, (n, o, p) at n*STRIDE_RN + o*STRIDE_RC + p*STRIDE_RP
    # shapes
    M,  # N*OH*OW, rows of the implicit GEMM (a run-time value: see above)
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
    STRIDE_RN: tl.constexpr,  # residual strides (unused unless HAS_RESIDUAL)
    STRIDE_RC: tl.constexpr,
    STRIDE_RP: tl.constexpr,
    # meta-parameters
    KH: tl.constexpr,  # kernel height
    KW: tl.constexpr,  # kernel width
    SH: tl.constexpr,  # stride
    SW: tl.constexpr,
    PH: tl.constexpr,  # padding
    PW: tl.constexpr,
    DH: tl.constexpr,  # dilation
    DW: tl.constexpr,
    K_MODE: tl.constexpr,  # 0 K_CHANNEL_BLOCKS, 1 K_GATHER
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # code from epilogue.activation_code
    HAS_RESIDUAL: tl.constexpr,  # add res_ptr's tile after bias/batchnorm, before the activation
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
            acc = dot_accumulate(a, b, acc, IS_INT8, INPUT_PRECISION, UPCAST_OPERANDS)
    else:
        C_BLOCKS = (C + BLOCK_K - 1) // BLOCK_K
        for step in range(0, KH * KW * C_BLOCKS):
            tap = step // C_BLOCKS
            c = (step % C_BLOCKS) * BLOCK_K + offs_k
            r = tap // KW
            s = tap % KW
            ih = ih0 + r * DH
            iw = iw0 + s * DW
            row_ok = m_valid & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            a_rows = x_row + (r * DH * STRIDE_XH + s * DW * STRIDE_XW)
            c_ok = c < C
            a_ptrs = x_ptr + a_rows[:, None] + c[None, :] * STRIDE_XC
            a = tl.load(a_ptrs, mask=row_ok[:, None] & c_ok[None, :], other=0.0)
            b_ptrs = w_col[None, :] + (tap * C + c)[:, None]
            b = tl.load(b_ptrs, mask=c_ok[:, None] & n_valid[None, :], other=0.0)
            acc = dot_accumulate(a, b, acc, IS_INT8, INPUT_PRECISION, UPCAST_OPERANDS)

    if IS_INT8:
        x_scale = tl.load(x_scale_ptr + image, mask=m_valid, other=0.0)
        w_scale = tl.load(w_scale_ptr + offs_n, mask=n_valid, other=0.0)
        result = acc.to(tl.float32) * x_scale[:, None] * w_scale[None, :]
    else:
        result = acc
    if HAS_BIAS:
        result += tl.load(bias_ptr + offs_n, mask=n_valid, other=0.0)[None, :]
    out_mask = m_valid[:, None] & n_valid[None, :]
    if HAS_RESIDUAL:
        # A residual block's tail, relu(bn(conv(x)) + skip): the skip tile is read here, once,
        # instead of the conv's output being written, read back and added by a second kernel.
        res_rows = (image * STRIDE_RN + pixel * STRIDE_RP)[:, None]
        skip = tl.load(res_ptr + res_rows + (offs_n * STRIDE_RC)[None, :], mask=out_mask, other=0.0)
        result += skip.to(tl.float32)
    result = apply_activation(result, ACTIVATION)
    out_ptrs = out_ptr + (image * STRIDE_ON + pixel)[:, None] + (offs_n * STRIDE_OC)[None, :]
    tl.store(out_ptrs, result.to(out_ptr.dtype.element_ty), mask=out_mask)


@dataclass(frozen=True)
class BoundPlan:
    """The KernelCalls of one plan on one input, with what they keep alive and any choices
    made on the way (the NHWC copy's tiles)."""

    calls: list[KernelCall]
    keep: list
    choices: list[Choice]


def prepare_conv(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str,
    batchnorm: dict | None,
    pack: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]],
    *,
    stride: int | Sequence[int],
    padding: int | Sequence[int],
    dilation: int | Sequence[int],
    groups: int = 1,
) -> ConvLayer:
    """Build-time work shared by the float and int8 convs: checks, the batchnorm fold (in
    float64), then `pack` turns the folded [Cout, C, KH, KW] weights into the kernel's packed
    rows (and int8 scales)."""
    if groups != 1:
        raise Unsupported(f"groups={groups}: grouped and depthwise convolution are not implemented")
    if weight.dim() != 4:
        raise ValueError(f"weight must be [Cout, Cin, kh, kw], got shape {tuple(weight.shape)}")
    if weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise Unsupported(f"weight dtype {weight.dtype}")
    cout, cin, kh, kw = weight.shape
    if not (1 <= kh <= 7 and 1 <= kw <= 7):
        raise Unsupported(f"kernel {kh}x{kw}: sizes 1..7 only")
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    geometry = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "PH": ph, "PW": pw, "DH": dh, "DW": dw}
    master_w = weight.double()
    master_b = bias.double() if bias is not None else None
    if batchnorm is not None:
        scale, shift = fold_batchnorm(batchnorm["running_mean"], batchnorm["running_var"],
                                      batchnorm.get("weight"), batchnorm.get("bias"),
                                      float(batchnorm.get("eps", 1e-5)))  # fmt: skip
        master_w = master_w * scale[:, None, None, None]
        master_b = (master_b * scale if master_b is not None else 0.0) + shift
    packed, w_scale = pack(master_w)
    return ConvLayer(
        packed=packed, bias32=master_b.float().contiguous() if master_b is not None else None,
        geometry=geometry, activation=activation_code(activation, weight.dtype), cout=cout,
        cin=cin, w_scale=w_scale,
    )  # fmt: skip


def conv_call(
    layer: ConvLayer,
    source: torch.Tensor,
    shape: Sequence[int],
    strides: Sequence[int],
    out: torch.Tensor,
    plan: Config,
    *,
    x_scale: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
) -> KernelCall:
    """The `_conv2d_kernel` launch reading `source` as an [N, C, H, W] input of `shape` and
    element `strides` (x itself, or its NHWC copy); int8 when x_scale is given; `residual`
    (out's shape, checked by `residual_strides`) is added before the activation."""
    n, c, h, w = shape
    _, cout, oh, ow = out.shape
    if max(n * c * h * w, n * cout * oh * ow) >= 2**31:
        raise Unsupported("tensors of 2**31 elements or more (32-bit indexing)")
    sxn, sxc, sxh, sxw = strides
    is_int8 = x_scale is not None
    named = dict(
        M=n * oh * ow, C=c, H=h, W=w, COUT=cout, OH=oh, OW=ow,
        STRIDE_XN=sxn, STRIDE_XC=sxc, STRIDE_XH=sxh, STRIDE_XW=sxw,
        STRIDE_WO=layer.packed.stride(0), STRIDE_ON=cout * oh * ow, STRIDE_OC=oh * ow,
        **dict(zip(("STRIDE_RN", "STRIDE_RC", "STRIDE_RP"), residual_strides(residual, out),
                   strict=True)),
        **layer.geometry, K_MODE=K_MODES[plan["PATH"]], HAS_BIAS=layer.bias32 is not None,
        ACTIVATION=layer.activation, HAS_RESIDUAL=residual is not None, IS_INT8=is_int8,
        INPUT_PRECISION="ieee" if layer.packed.dtype == torch.float32 else "tf32",
        UPCAST_OPERANDS=INTERPRET and source.dtype == torch.bfloat16, GROUP_M=8,
    )  # fmt: skip
    grid = (cdiv(n * oh * ow, plan["BLOCK_M"]) * cdiv(cout, plan["BLOCK_N"]),)
    unused = out
    bias = layer.bias32 if layer.bias32 is not None else unused
    scales = (x_scale, layer.w_scale) if is_int8 else (unused, unused)
    skip = residual if residual is not None else unused
    return config_call(_conv2d_kernel, grid, (source, layer.packed, bias, *scales, out, skip),
                       named, plan)  # fmt: skip


class FloatConv:
    """A float16/bfloat16/float32 conv built once: `bind(x)` or `conv(x, out=None)`."""

    def __init__(self, layer: ConvLayer, dtype: torch.dtype, path: str):
        self.layer, self.dtype, self.path = layer, dtype, path

    def __call__(
        self, x: torch.Tensor, out: torch.Tensor | None = None, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.bind(x, out, residual=residual).launch()

    def bind(
        self,
        x: torch.Tensor,
        out: torch.Tensor | None = None,
        config: Config | None = None,
        residual: torch.Tensor | None = None,
    ) -> BoundKernels:
        """Bound to x (and `residual`, added before the activation: a residual block's tail)."""
        if x.dtype != self.dtype:
            raise TypeError(f"x is {x.dtype} but the layer was prepared for {self.dtype}")
        n, c, h, w = x.shape if x.dim() == 4 else (0, 0, 0, 0)
        if x.dim() == 4 and h > 1 and w > 1 and x.stride(2) != w * x.stride(3):
            raise ValueError("x rows must be dense: pass a contiguous NCHW or channels_last tensor")
        out = output_for(self.layer, x, out)
        key = f"{x.dtype}|{tuple(x.shape)}|{x.stride()}|{self.path}|Cout{self.layer.cout}|" + \
            ",".join(f"{k}{v}" for k, v in self.layer.geometry.items()) + \
            ("|residual" if residual is not None else "")  # fmt: skip
        candidates = conv_plans.float_candidates(x, self.layer.cout, self.layer.geometry,
                                                 self.dtype, self.path)  # fmt: skip
        if config is not None:
            choice = Choice("conv2d", key, device_tag(x.device), config, "forced")
        else:
            choice = choose("conv2d", key, candidates, x.device,
                            lambda cfg: sequence(self.plan_calls(cfg, x, out, residual).calls,
                                                 out))  # fmt: skip
        bound = self.plan_calls(choice.config, x, out, residual)
        return BoundKernels.of(bound.calls, out, [choice, *bound.choices], keep=bound.keep)

    def plan_calls(
        self, plan: Config, x: torch.Tensor, out: torch.Tensor, residual: torch.Tensor | None = None
    ) -> BoundPlan:
        if plan["PATH"] == "nhwc" and x.stride(1) != 1:
            n, c, h, w = x.shape
            nhwc = scratch((n, h, w, c), x.dtype, x.device)  # rewritten by every launch
            copy, copy_choice = bind_strided_map(x.permute(0, 2, 3, 1), nhwc, activation=0)
            conv = conv_call(self.layer, nhwc, x.shape, nhwc_strides(x.shape), out, plan,
                             residual=residual)  # fmt: skip
            return BoundPlan([copy, conv], [nhwc], [copy_choice])
        if plan["PATH"] == "pointwise":
            return BoundPlan([pointwise_call(self.layer, x, out, plan, residual)], [], [])
        conv = conv_call(self.layer, x, x.shape, x.stride(), out, plan, residual=residual)
        return BoundPlan([conv], [], [])


def build_conv2d(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    activation: str = "none",
    batchnorm: dict | None = None,
    path: str = "auto",
    **geometry: Any,
) -> FloatConv:
    """Build-time work (fold batchnorm, pack weights) for a float conv; geometry: stride,
    padding, dilation, groups as in F.conv2d. `path` forces one read path ("direct", "nhwc",
    "gather", "pointwise") so benchmarks and tests reach each."""
    if path not in ("auto", *PATHS):
        raise ValueError(f"unknown path {path!r}")
    layer = prepare_conv(weight, bias, activation, batchnorm,
                         lambda master: (pack_weight(master, weight.dtype), None), **geometry)  # fmt: skip
    return FloatConv(layer, weight.dtype, path)
