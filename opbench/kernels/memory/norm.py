"""LayerNorm and RMSNorm over the last dimension (hidden size N), with fp32 statistics.

    layernorm: mu = mean(x);  var = mean((x - mu)^2);  y = (x - mu) / sqrt(var + eps) * w + b
    rmsnorm:   y = x / sqrt(mean(x^2) + eps) * w

Bytes: x read once and y written once, 2 * numel * element_size (+ N weights, negligible)
when a row fits in one block. Rows longer than one block are read twice (statistics, then
normalisation): 3 * numel * element_size, the second read mostly from L2. About 8 FLOPs per
element: memory-bound.

With a residual (`bind_norm(..., residual=r)`: a transformer's pre-norm residual stream,
`s = x + r; y = norm(s)`), the kernel also writes s: x and r are read once, s and y written
once, 4 * numel * element_size where the unfused add and norm move 5.

Rows use the layout of rows.py (shared with softmax): outer axes from the program id,
BLOCK_R rows per program and the hidden axis in BLOCK_N chunks. Long layernorm rows combine
per-chunk means and squared deviations with Chan's parallel formula, which keeps the
variance exact where the textbook E[x^2] - E[x]^2 would cancel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from opbench.kernels import Unsupported
from opbench.kernels.device import (
    fp8_inverse_scale,
    inverse_scale,
    round_to_e4m3,
    round_to_int8,
)
from opbench.kernels.host import check_float, resolve_out
from opbench.kernels.launch import BoundKernels, tuned_call
from opbench.kernels.memory import rows
from opbench.kernels.memory.rows import row_tile
from opbench.kernels.tuning import Config


@triton.jit
def _norm_kernel(
    # pointers
    x_ptr,  # input rows
    y_ptr,  # output rows, same dtype
    weight_ptr,  # [N] scale (ignored unless HAS_WEIGHT)
    bias_ptr,  # [N] shift (ignored unless HAS_BIAS)
    res_ptr,  # residual rows, x's strides (ignored unless HAS_RESIDUAL)
    sum_ptr,  # x + residual rows written back, y's strides (ignored unless HAS_RESIDUAL)
    scale_ptr,  # fp32 per-row scales of the code output, rows in order (FP8_OUT or INT8_OUT)
    # shapes
    size_o1,  # second outer axis (the first one's size is implied by the grid)
    size_r,  # row axis
    length,  # hidden size N
    # strides, in elements
    x_stride_o0,
    x_stride_o1,
    x_stride_r,
    x_stride_n,
    y_stride_o0,
    y_stride_o1,
    y_stride_r,
    y_stride_n,
    weight_stride,
    bias_stride,
    eps,  # added to the variance (or mean square) before the square root
    # meta-parameters
    RMS: tl.constexpr,  # True: rmsnorm (no centring, no bias); False: layernorm
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,  # normalise x + residual and write that sum too
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_L: tl.constexpr,  # hidden elements per step
    ONE_PASS: tl.constexpr,  # BLOCK_L >= length: the whole row stays in registers
    FP8_OUT: tl.constexpr,  # y is e4m3 codes of the fp32 output with a per-row scale (fp8 rule)
    INT8_OUT: tl.constexpr = False,  # y is int8 codes, per-row scale (int8 rule of device.py)
):
    x_rows, y_rows, row_mask, cols = row_tile(
        x_ptr, y_ptr, size_o1, size_r, x_stride_o0, x_stride_o1, x_stride_r, y_stride_o0,
        y_stride_o1, y_stride_r, BLOCK_R, BLOCK_L,
    )  # fmt: skip
    # With a residual: r_rows and s_rows are the same rows of the residual and of the sum.
    r_rows, s_rows, _, _ = row_tile(
        res_ptr, sum_ptr, size_o1, size_r, x_stride_o0, x_stride_o1, x_stride_r, y_stride_o0,
        y_stride_o1, y_stride_r, BLOCK_R, BLOCK_L,
    )  # fmt: skip

    # Statistics: mean (layernorm only) and 1 / sqrt(variance or mean square + eps).
    if ONE_PASS:
        mask = row_mask[:, None] & (cols < length)[None, :]
        x = _load_input(x_rows, r_rows, s_rows, cols, x_stride_n, y_stride_n, mask, HAS_RESIDUAL)
        # Load the affine parameters now rather than after the statistics: their latency (L2
        # hits) then overlaps the row's instead of following the block-wide reductions.
        weight, bias = _load_affine(
            weight_ptr, bias_ptr, cols, length, weight_stride, bias_stride, HAS_WEIGHT, HAS_BIAS
        )
        if RMS:
            mean = tl.zeros([BLOCK_R], tl.float32)
            variance = tl.sum(x * x, axis=1) / length
        else:
            mean = tl.sum(x, axis=1) / length
            centred = tl.where(mask, x - mean[:, None], 0.0)
            variance = tl.sum(centred * centred, axis=1) / length
    else:
        mean = tl.zeros([BLOCK_R], tl.float32)
        squares = tl.zeros([BLOCK_R], tl.float32)  # sum of squared deviations (or squares)
        for start in range(0, length, BLOCK_L):
            mask = row_mask[:, None] & (start + cols < length)[None, :]
            chunk = _load_input(x_rows, r_rows, s_rows, start + cols, x_stride_n, y_stride_n, mask,
                                HAS_RESIDUAL)  # fmt: skip
            if RMS:
                squares += tl.sum(chunk * chunk, axis=1)
            else:
                # Chan et al.: merge (count_a, mean_a, M2_a) with this chunk's (count_b, ...).
                count_a = start * 1.0  # elements merged so far, as a float
                count_b = (tl.minimum(start + BLOCK_L, length) - start).to(tl.float32)
                chunk_mean = tl.sum(chunk, axis=1) / count_b
                deviation = tl.where(mask, chunk - chunk_mean[:, None], 0.0)
                delta = chunk_mean - mean
                total = count_a + count_b
                mean += delta * (count_b / total)
                squares += tl.sum(deviation * deviation, axis=1)
                squares += delta * delta * (count_a * count_b / total)
        variance = squares / length
    rstd = 1.0 / tl.sqrt(variance + eps)
    if HAS_RESIDUAL and not ONE_PASS:
        # The second pass re-reads the sum the first one wrote (this program's own rows): the
        # barrier makes every thread's stores visible to the others' loads.
        tl.debug_barrier()
        src_rows, src_stride = s_rows, y_stride_n
    else:
        src_rows, src_stride = x_rows, x_stride_n

    inv_scale = tl.zeros([BLOCK_R], tl.float32)
    if FP8_OUT or INT8_OUT:
        # The row's scale needs the max of the whole normalised row before its first code:
        # from registers in one pass, else one more pass over the row (from L1/L2).
        if ONE_PASS:
            y = _normalise(x, mean, rstd, weight, bias, HAS_WEIGHT, HAS_BIAS)
            row_max = tl.max(tl.where(mask, tl.abs(y), 0.0), axis=1)
        else:
            row_max = tl.zeros([BLOCK_R], tl.float32)
            for start in range(0, length, BLOCK_L):
                offs = start + cols
                mask = row_mask[:, None] & (offs < length)[None, :]
                chunk = tl.load(src_rows + offs[None, :] * src_stride, mask=mask, other=0.0)
                weight, bias = _load_affine(weight_ptr, bias_ptr, offs, length, weight_stride,
                                            bias_stride, HAS_WEIGHT, HAS_BIAS)  # fmt: skip
                y = _normalise(chunk.to(tl.float32), mean, rstd, weight, bias, HAS_WEIGHT,
                               HAS_BIAS)  # fmt: skip
                row_max = tl.maximum(row_max, tl.max(tl.where(mask, tl.abs(y), 0.0), axis=1))
        # Rows in order: the fp8 path binds only layouts without outer axes (bind_norm).
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        if FP8_OUT:
            tl.store(scale_ptr + rows, row_max / 448.0, mask=row_mask)
            inv_scale = fp8_inverse_scale(row_max)
        else:
            tl.store(scale_ptr + rows, row_max / 127.0, mask=row_mask)
            inv_scale = inverse_scale(row_max)

    # Normalisation: from registers in one pass, or re-reading the row chunk by chunk.
    for start in range(0, length, BLOCK_L):
        offs = start + cols
        mask = row_mask[:, None] & (offs < length)[None, :]
        if not ONE_PASS:
            x = tl.load(src_rows + offs[None, :] * src_stride, mask=mask, other=0.0)
            x = x.to(tl.float32)
            weight, bias = _load_affine(
                weight_ptr, bias_ptr, offs, length, weight_stride, bias_stride, HAS_WEIGHT, HAS_BIAS
            )
        y = _normalise(x, mean, rstd, weight, bias, HAS_WEIGHT, HAS_BIAS)
        if FP8_OUT:
            stored = round_to_e4m3(y * inv_scale[:, None]).to(tl.float8e4nv)
        elif INT8_OUT:
            stored = round_to_int8(y * inv_scale[:, None])
        else:
            stored = y.to(y_ptr.dtype.element_ty)
        tl.store(y_rows + offs[None, :] * y_stride_n, stored, mask=mask)


@triton.jit
def _normalise(x, mean, rstd, weight, bias, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """(x - mean) * rstd, then the affine parameters, in fp32."""
    y = (x - mean[:, None]) * rstd[:, None]
    if HAS_WEIGHT:
        y = y * weight[None, :]
    if HAS_BIAS:
        y = y + bias[None, :]
    return y


@triton.jit
def _load_input(
    x_rows, r_rows, s_rows, offs, x_stride_n, y_stride_n, mask, HAS_RESIDUAL: tl.constexpr
):  # fmt: skip
    """The row chunk at `offs` in fp32: x, or (HAS_RESIDUAL) x + residual rounded to the sum's
    dtype and stored there first, so the normalised output is exactly the norm of the sum
    written (as the unfused add → norm computes it)."""
    x = tl.load(x_rows + offs[None, :] * x_stride_n, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(r_rows + offs[None, :] * x_stride_n, mask=mask, other=0.0)
        total = (x.to(tl.float32) + r.to(tl.float32)).to(s_rows.dtype.element_ty)
        tl.store(s_rows + offs[None, :] * y_stride_n, total, mask=mask)
        x = total
    return x.to(tl.float32)


@triton.jit
def _load_affine(
    weight_ptr, bias_ptr, offs, length, weight_stride, bias_stride, HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):  # fmt: skip
    """Weight and bias at hidden positions `offs`, in fp32 (1 and 0 where absent)."""
    in_row = offs < length
    weight = 1.0
    bias = 0.0
    if HAS_WEIGHT:
        weight = tl.load(weight_ptr + offs * weight_stride, mask=in_row, other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs * bias_stride, mask=in_row, other=0.0).to(tl.float32)
    return weight, bias


def fit_norm_rows(configs: Sequence[Config], size_r: int, block_l: int) -> list[Config]:
    """`rows.fit_rows_to_shape`, then, for rows of 513-1024 elements, only its 2-warp
    configs: two rows of two warps a program won at these widths (docs/perf/memory_bound.md)
    where single-launch tuning after an L2 flush could not tell them apart."""
    kept = rows.fit_rows_to_shape(configs, size_r, block_l)
    if block_l == 1024:
        kept = [c for c in kept if c.num_warps == 2] or kept
    return kept


# A deliberately poor configuration (`deliberately_slow`): one row per program, one warp,
# and the looped two-pass variant over 16-element chunks (each row read twice, 16 elements
# at a time). The same computation (Chan's merge keeps the statistics exact), only slower.
SLOW_CONFIG = Config.of(BLOCK_R=1, BLOCK_L=16, ONE_PASS=False, num_warps=1, num_stages=3)


def bind_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    out: torch.Tensor | None = None,
    *,
    rms: bool,
    deliberately_slow: bool = False,
    config: Config | None = None,
    residual: torch.Tensor | None = None,
    sum_out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
    code_dtype: torch.dtype = torch.float8_e4m3fn,
) -> BoundKernels:
    """LayerNorm (rms=False) or RMSNorm (rms=True, bias None) over the last dimension of x,
    bound to x. weight and bias are [N] or None.

    residual: x's shape, dtype and strides. Then the kernel normalises s = x + residual
    (rounded to x's dtype, as an add layer would write it) and also writes s, the pre-norm
    residual stream, into `sum_out` (out's shape and strides; allocated when None): both
    outputs in one pass, `extra` of the result.

    scale_out: fp32 [rows] (x's rows in order). Then `out` is float8_e4m3fn, x's shape,
    contiguous: the normalised fp32 output quantized by the fp8 rule of `device.py` (per row,
    s = max|y| / 448, codes round to nearest even) with s written to scale_out, for an fp8
    linear to read directly (kernels/gemm/linear_fp8.py `bind_on_codes`). With code_dtype int8,
    `out` is int8 and the rule the int8 one (s = max|y| / 127, round half away from zero),
    for an int8 W8A8 linear (kernels/gemm/linear_int8.py `bind_on_codes`).

    deliberately_slow: run SLOW_CONFIG instead of the tuned one. For demonstrating a
    regression gate on a GPU with unchanged kernel code (docs/ci.md); never otherwise.
    """
    op = "rmsnorm" if rms else "layernorm"
    check_float(x, op)
    if x.dim() == 0:
        raise Unsupported(f"{op} needs at least one dimension")
    hidden = x.shape[-1]
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None:
            check_float(param, op)
            if param.shape != (hidden,) or param.device != x.device:
                raise ValueError(f"{op} {name} must be [{hidden}] on {x.device}")
    codes = scale_out is not None
    if codes and code_dtype not in CODE_TAGS:
        raise ValueError(f"{op}: codes are float8_e4m3fn or int8, not {code_dtype}")
    fp8 = codes and code_dtype == torch.float8_e4m3fn
    if codes:
        out = _codes_buffer(x, out, scale_out, op, code_dtype)
    else:
        out = resolve_out(out, x.shape, x)
    extra = () if residual is None else (_sum_buffer(x, residual, out, sum_out, op),)
    if x.numel() == 0:
        return BoundKernels.of([], out, extra=extra)
    layout = rows.row_layout(x, out, x.dim() - 1, op)
    if codes and layout.sizes[:2] != (1, 1):
        tag = CODE_TAGS[code_dtype]
        raise Unsupported(f"{op} with {tag} output: x's rows must be one evenly strided axis")
    args = (
        x,
        out,
        weight if weight is not None else x,  # never read when absent
        bias if bias is not None else x,
        residual if residual is not None else x,
        extra[0] if extra else out,
        scale_out if codes else x,
        *layout.kernel_args,
        weight.stride(0) if weight is not None else 0,
        bias.stride(0) if bias is not None else 0,
        float(eps),
    )
    block_l, one_pass = rows.row_block(hidden)
    named = dict(RMS=rms, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
                 HAS_RESIDUAL=residual is not None, BLOCK_L=block_l, ONE_PASS=one_pass,
                 FP8_OUT=fp8, INT8_OUT=codes and not fp8)  # fmt: skip
    if deliberately_slow:
        config = SLOW_CONFIG
    candidates = fit_norm_rows(rows.row_configs(), layout.sizes[2], block_l)
    key = (
        f"{x.dtype}|{layout.key()}|w{weight is not None}b{bias is not None}"
        + ("|residual" if residual is not None else "")
        + (f"|{CODE_TAGS[code_dtype]}" if codes else "")
    )
    name = (op if residual is None else f"add_{op}") + (CODE_NAMES[code_dtype] if codes else "")
    call, choice = tuned_call(name, _norm_kernel, key, candidates, layout.grid, args, named,
                              x.device, config)  # fmt: skip
    return BoundKernels.of([call], out, [choice], extra=extra)


# Code outputs: the tag in the tuning key (e4m3's as before int8 existed) and the name suffix.
CODE_TAGS = {torch.float8_e4m3fn: "e4m3", torch.int8: "int8"}
CODE_NAMES = {torch.float8_e4m3fn: "_fp8", torch.int8: "_int8"}


def _codes_buffer(
    x: torch.Tensor, out: torch.Tensor | None, scale_out: torch.Tensor, op: str,
    dtype: torch.dtype,
) -> torch.Tensor:  # fmt: skip
    """The codes buffer (allocated when None) after checking it and the scales."""
    tag = CODE_TAGS[dtype]
    rows_count = x.numel() // max(x.shape[-1], 1)
    if scale_out.shape != (rows_count,) or scale_out.dtype != torch.float32 or \
            not scale_out.is_contiguous() or scale_out.device != x.device:  # fmt: skip
        raise ValueError(f"{op} with {tag} output: scale_out must be [{rows_count}] float32 "
                         f"contiguous on {x.device}")  # fmt: skip
    if out is None:
        return torch.empty(x.shape, dtype=dtype, device=x.device)
    if out.shape != x.shape or out.dtype != dtype or not out.is_contiguous() or \
            out.device != x.device:  # fmt: skip
        raise ValueError(f"{op} with {tag} output: out must be {tuple(x.shape)} {dtype} "
                         f"contiguous on {x.device}")  # fmt: skip
    return out


def _sum_buffer(
    x: torch.Tensor,
    residual: torch.Tensor,
    out: torch.Tensor,
    sum_out: torch.Tensor | None,
    op: str,
) -> torch.Tensor:
    """The buffer the sum x + residual goes to, after checking the residual: it is read with
    x's strides and the sum written with out's."""
    if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(
            f"add → {op}: residual must be {tuple(x.shape)} {x.dtype} on {x.device}, got "
            f"{tuple(residual.shape)} {residual.dtype} on {residual.device}"
        )
    if residual.stride() != x.stride() and residual.numel() > 1:
        raise ValueError(f"add → {op}: residual must be laid out like x (strides {x.stride()})")
    if sum_out is None:
        return torch.empty_like(out, dtype=x.dtype)  # x's dtype even where out holds e4m3
    if sum_out.shape != out.shape or sum_out.dtype != x.dtype or sum_out.stride() != out.stride():
        raise ValueError(f"add → {op}: sum_out must be laid out like out, in x's dtype")
    return sum_out


def layernorm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """LayerNorm over the last dimension; weight and bias are [N] (or None)."""
    return bind_norm(x, weight, bias, eps, out, rms=False).launch()


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm over the last dimension; weight is [N] (or None)."""
    return bind_norm(x, weight, None, eps, out, rms=True).launch()
