"""Linear layers: build-time weight preparation and the bind step of the GEMM kernels
(`linear_kernels.py`), plans from `linear_plans.py`.

`Linear(weight, bias, activation)` holds the prepared weight (contiguous), the fp32 bias and
the split-K tile counters. `bind(x)` checks x, allocates the output and the split-K
workspace, picks a plan (the streaming GEMV for fp16/bf16 M <= GEMV_MAX_M, the decode
table for M <= 64, else tuned) and fixes every kernel
argument; the bound launch then only launches. `Linear(x)` is bind-and-launch in one call.
"""

from __future__ import annotations

import warnings

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from opbench.kernels import Unsupported
from opbench.kernels.epilogue import ACTIVATION_CODES, activation_code
from opbench.kernels.gemm.linear_epilogue import NO_ROPE
from opbench.kernels.gemm.linear_kernels import (
    _linear_split_k_kernel,
    _linear_tiled_kernel,
    _linear_tma_kernel,
)
from opbench.kernels.gemm.linear_plans import (
    SMALL_M,
    decode_plan,
    sm_count,
    split_k_candidates,
    tile_candidates,
    tma_ok,
    ws_candidates,
)
from opbench.kernels.gemm.stream_plans import GEMV_MAX_M, stream_plan
from opbench.kernels.host import INTERPRET, SIXTEEN_BIT, cdiv, next_power_of_2
from opbench.kernels.launch import BoundKernels, KernelCall, config_call, sequence
from opbench.kernels.scratch import scratch
from opbench.kernels.tuning import Choice, Config, PlanMismatch, choose, device_tag

# The layers whose GEMM the warp-specialized Gluon kernel can run: 16-bit operands, W8A8
# int8 and fp8 (the weight-only ones stream W through kernels of their own).
WS_QUANTS = ("none", "int8", "fp8")


class Linear:
    """y = act(x @ weight^T + bias) for x [..., K] -> y [..., N]; float16/bfloat16/float32.
    Float32 uses true fp32 dots unless allow_tf32."""

    #: The layer's `quant` (the plan key names it); int8 operands sum in int32 (is_int8);
    #: quantized operands are dequantized in the epilogue (scaled).
    quant = "none"
    is_int8 = False
    scaled = False
    #: The split-K kernel can quantize x itself (int8's FUSED_QUANT plans).
    fuses_quant = False
    #: How the streaming kernel (linear_stream.py) reads W: 16-bit floats here.
    w_bits = 16
    group_size = 0
    kernel_name = "linear"
    #: What the plan key adds for an epilogue of another shape (linear_rope.py: RoPE).
    epilogue_key = ""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none",
                 allow_tf32: bool = False) -> None:  # fmt: skip
        if activation not in ACTIVATION_CODES:
            raise Unsupported(
                f"linear activation {activation!r} is not one of {sorted(ACTIVATION_CODES)}"
            )
        if weight.dim() != 2:
            raise ValueError(f"linear weight must be [N, K], got {tuple(weight.shape)}")
        if bias is not None and tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
        self.out_features, self.in_features = weight.shape
        self.activation = activation_code(activation, weight.dtype)  # = the output's dtype
        self.dot_precision = "tf32" if allow_tf32 else "ieee"
        self.weight = self._prepare_weight(weight)
        self.col_scale: torch.Tensor | None = None
        self.bias = None if bias is None else bias.detach().to(torch.float32).contiguous()
        # One counter per output tile of the split-K kernel (its BLOCK_M covers all rows); the
        # last split of a tile resets its counter, so binds of this layer share them.
        self.arrivals = torch.zeros(cdiv(self.out_features, 16), dtype=torch.int32,
                                    device=weight.device)  # fmt: skip

    def _prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        if weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise Unsupported(
                f"linear supports float16/bfloat16/float32 weights, not {weight.dtype}"
            )
        return weight.detach().contiguous()

    def _check_dtype(self, x: torch.Tensor) -> None:
        if x.dtype != self.weight.dtype:
            raise Unsupported(
                f"input dtype {x.dtype} differs from the weight's {self.weight.dtype}"
            )

    @property
    def output_features(self) -> int:
        """Columns of the output (SwiGLU's GEMM has twice as many: swiglu.py)."""
        return self.out_features

    def _views(self, x: torch.Tensor, out: torch.Tensor | None):
        if x.shape[-1] != self.in_features:
            raise ValueError(f"input's last dim {x.shape[-1]} != in_features {self.in_features}")
        self._check_dtype(x)
        out_shape = (*x.shape[:-1], self.output_features)
        if out is None:
            out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        elif tuple(out.shape) != out_shape or out.dtype != x.dtype:
            raise ValueError(
                f"out must be {out_shape} {x.dtype}, got {tuple(out.shape)} {out.dtype}"
            )
        # view() (not reshape) so a strided input is rejected instead of silently copied.
        x2 = x if x.dim() == 2 else x.view(-1, self.in_features)
        out2 = out if out.dim() == 2 else out.view(-1, self.output_features)
        return x2, out2, out

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
        """The layer bound to x (and out): plan chosen, buffers allocated, kernels fixed.
        `residual` (the output's shape, dense rows) is added after the activation."""
        x2, out2, out = self._views(x, out)
        res2 = residual_view(residual, out, out2)
        if x2.shape[0] == 0:
            return BoundKernels.of([], out)
        choice = self.choose(x2, out2, config, res2)
        calls, keep = self.calls(choice.config, x2, out2, res2)
        return BoundKernels.of(calls, out, [choice], keep=[x2, out2, *keep])

    def launch(
        self, plan: Config, x2: torch.Tensor, out2: torch.Tensor, res2: torch.Tensor | None = None
    ) -> None:
        """Bind and run one plan on 2-D views (tests and benchmarks run every candidate)."""
        calls, _ = self.calls(plan, x2, out2, res2)
        sequence(calls, out2)()

    def candidates(
        self, x2: torch.Tensor, every_kind: bool = False, residual: bool = False,
        ws: bool = False,
    ) -> list[Config]:  # fmt: skip
        """Plans for x2's row count: the streaming GEMV for fp16/bf16 M <= GEMV_MAX_M, the
        decode table's split-K plan for M <= SMALL_M on a GPU, else the tuned tile plans
        (every kernel kind when every_kind), with `ws` also the warp-specialized Gluon GEMM's
        (gemm_ws.py; `ws_ok` says where it applies). With a residual to add, no streaming
        GEMV: its epilogue has none."""
        m, k = x2.shape
        elem_bytes = self.weight.element_size()
        tiles = tile_candidates(elem_bytes, self._tma_ok(x2))
        if ws:
            tiles = tiles + ws_candidates(elem_bytes, self.is_int8, residual)
        few_rows = split_k_candidates(m, elem_bytes, fused_quant=self.fuses_quant)
        gemv = []
        if self.streams(x2, residual):
            gemv = [stream_plan(m, self.out_features, k, 16, 0, sm_count(x2.device))]
        if every_kind:
            return gemv + few_rows + tiles
        if m <= GEMV_MAX_M and gemv:
            return gemv
        if m <= SMALL_M:
            if INTERPRET:
                return few_rows
            return [decode_plan(m, self.out_features, self.in_features, elem_bytes,
                                self.scaled, sm_count(x2.device), self.fuses_quant)]  # fmt: skip
        return tiles

    def streams(self, x2: torch.Tensor, residual: bool) -> bool:
        """Whether the streaming GEMV may run this layer: fp16/bf16, unquantized, unit-stride
        rows, and no residual (its epilogue has none)."""
        return (self.quant == "none" and self.weight.dtype in SIXTEEN_BIT
                and x2.stride(1) == 1 and not residual)  # fmt: skip

    def choose(
        self,
        x2: torch.Tensor,
        out2: torch.Tensor,
        config: Config | None,
        res2: torch.Tensor | None = None,
    ) -> Choice:
        tma = self._tma_ok(x2)
        ws = x2.shape[0] > SMALL_M and self.ws_ok(x2, out2)
        key = "|".join([
            f"{x2.dtype}{'-tf32' if self.dot_precision == 'tf32' else ''}",
            self.quant_key, f"M{next_power_of_2(x2.shape[0])}",
            f"N{self.out_features}", f"K{self.in_features}", "tma" if tma else "notma",
            *(["residual"] if res2 is not None else []),
            *([self.epilogue_key] if self.epilogue_key else []),
        ])  # fmt: skip
        # The Gluon GEMM joins the candidates under the same name and key: shipped tables and
        # caches tuned without it still apply (regenerating them lets it compete there).
        name = self.kernel_name
        if config is not None:
            return Choice(name, key, device_tag(x2.device), config, "forced")

        def make(cfg: Config):
            calls, keep = self.calls(cfg, x2, out2, res2)
            return sequence(calls, out2)

        candidates = (self.candidates(x2, residual=res2 is not None, ws=True) if ws
                      else self.candidates(x2, residual=res2 is not None))  # fmt: skip
        choice = choose(name, key, candidates, x2.device, make)
        if choice.config["KIND"] not in {c["KIND"] for c in candidates}:
            # A stored plan of a kind this input cannot run (a table of another version):
            # tuned again, under a key of its own so that the stale entry is not read back.
            warnings.warn(f"{name}: stored plan of kind {choice.config['KIND']!r} does not "
                          f"apply to {key}: tuning again", PlanMismatch, stacklevel=2)  # fmt: skip
            choice = choose(name, key + "|retuned", candidates, x2.device, make)
        return choice

    def ws_ok(self, x2: torch.Tensor, out2: torch.Tensor) -> bool:
        """Whether the warp-specialized Gluon GEMM (gemm_ws.py) may run this layer on x2:
        sm_90, TMA-able operands and output, 16-bit output, an elementwise activation.
        Quantized layers read their own contiguous xq (same dtype as the weight)."""
        if self.quant not in WS_QUANTS or INTERPRET or not x2.is_cuda or not self._tma_ok(x2):
            return False
        from opbench.kernels.gemm.gemm_ws import ws_usable

        # Quantized layers feed it xq, contiguous in the weight's dtype with the weight's K
        # (whose 16-byte alignment _tma_ok checked): the weight stands in for it.
        a = self.weight if self.scaled else x2
        return ws_usable(a, self.weight, out2, self.activation)

    @property
    def quant_key(self) -> str:
        """The quantization as plan keys name it."""
        return f"{self.quant}-g{self.group_size}" if self.w_bits == 4 else self.quant

    def _tma_ok(self, x2: torch.Tensor) -> bool:
        return tma_ok(x2, self.weight)

    def calls(
        self, plan: Config, x2: torch.Tensor, out2: torch.Tensor, res2: torch.Tensor | None = None
    ) -> tuple[list[KernelCall], list]:
        """The KernelCalls of one plan on fixed 2-D views, and the workspace they use."""
        return gemm_calls(plan, x2, self, out2, row_scale=None, residual=res2)

    def rope_named(self) -> dict:
        """The pointer-storing kernels' RoPE arguments (linear_epilogue.py): none here."""
        return dict(NO_ROPE)


def residual_view(
    residual: torch.Tensor | None, out: torch.Tensor, out2: torch.Tensor
) -> torch.Tensor | None:
    """The residual as a 2-D view with out2's strides (what the epilogue reads), or None."""
    if residual is None:
        return None
    if tuple(residual.shape) != tuple(out.shape) or residual.dtype != out.dtype or \
            residual.device != out.device:  # fmt: skip
        raise ValueError(f"residual must be {tuple(out.shape)} {out.dtype} on {out.device}, "
                         f"got {tuple(residual.shape)} {residual.dtype} on {residual.device}")  # fmt: skip
    # view(), never reshape(): a copy made here would bind the kernel to stale data.
    dense = residual.dim() == 2 or residual.is_contiguous()
    res2 = residual if residual.dim() == 2 else residual.view(out2.shape) if dense else None
    if res2 is None or (res2.stride() != out2.stride() and res2.numel() > 1):
        raise ValueError("residual must be laid out like the output (contiguous rows)")
    return res2


def gemm_calls(
    plan: Config,
    a: torch.Tensor,
    layer: Linear,
    out: torch.Tensor,
    row_scale: torch.Tensor | None,
    residual: torch.Tensor | None = None,
) -> tuple[list[KernelCall], list]:
    """out[M, N] = epilogue(a[M, K] @ layer.weight[N, K]^T) (+ residual, out's strides) with
    one plan, as KernelCalls.

    int8 (layer.is_int8): a is the quantized x with row_scale, or (FUSED_QUANT) x itself.
    fp8 (layer.scaled, not is_int8): a is the quantized x with row_scale.
    Only allocates (the split-K workspace); every number is computed by the kernels.
    """
    w, bias = layer.weight, layer.bias
    M, K = a.shape
    N = w.shape[0]
    is_int8, scaled = layer.is_int8, layer.scaled
    unused = out  # any pointer, for arguments the constexpr flags switch off
    named = dict(IS_INT8=is_int8, SCALED=scaled, HAS_BIAS=bias is not None,
                 ACTIVATION=layer.activation, HAS_RESIDUAL=residual is not None,
                 DOT_PRECISION="ieee" if scaled else layer.dot_precision,
                 UPCAST=INTERPRET and a.dtype == torch.bfloat16, **layer.rope_named())  # fmt: skip
    pointers = (out, bias if bias is not None else unused,
                row_scale if row_scale is not None else unused,
                layer.col_scale if scaled else unused,
                residual if residual is not None else unused)  # fmt: skip
    bm, bn, bk = plan["BLOCK_M"], plan["BLOCK_N"], plan["BLOCK_K"]
    kind = plan["KIND"]
    if kind == "tiled":
        grid = (cdiv(M, bm) * cdiv(N, bn),)
        args = (a, w, *pointers, M, N, K, *a.stride(), *w.stride(), *out.stride())
        named.update(EVEN_K=K % bk == 0)
        return [config_call(_linear_tiled_kernel, grid, args, named, plan)], []
    if kind == "tma":
        tiles = cdiv(M, bm) * cdiv(N, bn)
        programs = min(tiles, sm_count(a.device)) if plan["PERSISTENT"] else tiles
        a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [bm, bk])
        w_desc = TensorDescriptor(w, list(w.shape), list(w.stride()), [bn, bk])
        args = (a_desc, w_desc, *pointers, M, N, K, *out.stride(), programs)
        specialize = bool(plan.kwargs.get("WARP_SPECIALIZE", False))
        named.update(WARP_SPECIALIZE=specialize, FLATTEN=not specialize)
        return [config_call(_linear_tma_kernel, (programs,), args, named, plan)], [a_desc, w_desc]
    if kind == "split_k":
        grid = (cdiv(N, bn), plan["SPLIT_K"], cdiv(M, bm))
        if grid[0] * grid[2] > layer.arrivals.numel():
            raise ValueError(f"split-K plan needs {grid[0] * grid[2]} tile counters")
        partial = unused
        if plan["SPLIT_K"] > 1:
            acc_dtype = torch.int32 if is_int8 else torch.float32  # fp8 sums in fp32
            partial = scratch((plan["SPLIT_K"] * M * N,), acc_dtype, a.device)  # per launch
        args = (a, w, *pointers, partial, layer.arrivals, M, N, K, *a.stride(), *w.stride(),
                *out.stride())  # fmt: skip
        named.update(EVEN_K=K % bk == 0, QUANTIZE_A=is_int8 and a.dtype != torch.int8,
                     QUANT_BLOCK_K=max(16, bk * 16 // bm))  # fmt: skip
        return [config_call(_linear_split_k_kernel, grid, args, named, plan)], [partial]
    if kind == "ws":
        from opbench.kernels.gemm.gemm_ws import ws_call, ws_usable

        if residual is not None and plan["C_BUFS"] == 1:
            raise Unsupported("a ws plan with one output buffer (C_BUFS 1) adds no residual")
        if not ws_usable(a, w, out, layer.activation, residual):
            raise Unsupported("the warp-specialized Gluon GEMM needs an sm_90 GPU, TMA-able "
                              "16-bit-out operands and an elementwise activation")  # fmt: skip
        call, descs = ws_call(plan, a, w, out, bias=bias, row_scale=row_scale,
                              col_scale=layer.col_scale if scaled else None, residual=residual,
                              activation=layer.activation, programs=sm_count(a.device),
                              rope=layer.rope_named())  # fmt: skip
        return [call], descs
    if kind == "stream":
        from opbench.kernels.gemm.linear_stream import stream_calls

        if residual is not None:  # a forced plan: candidates() never offers it with a residual
            raise Unsupported("the streaming GEMV adds no residual: take a split-K or tile plan")
        return stream_calls(plan, a, layer, out)
    raise ValueError(f"unknown plan kind {kind!r}")
