"""PyTorch's own int8 path for `quant: int8` linear layers: the peer of our Triton W8A8 linear.

The scheme is the Triton kernel's (kernels/memory/quantize.py, kernels/gemm/linear_int8.py), written as a
PyTorch user writes dynamic-activation int8 (the way torchao's W8A8 does it):

- build: W [N, K] in the layer's dtype → Wq int8 and sw[n] = max_k |W[n, k]| / 127;
- every call: x [M, K] → xq int8 and sx[m] = max_k |x[m, k]| / 127 (per token), both rounded
  half away from zero after clamping to [-127, 127];
- `torch._int_mm(xq, Wqᵀ)` → int32 [M, N] (cuBLASLt's int8 GEMM on a GPU);
- y = act(acc · sx[m] · sw[n] + b[n]) in float32, written in the layer's dtype.

That is three or more kernels in eager mode (quantize, GEMM, epilogue). `torch.compile` fuses
the quantization and the epilogue around the GEMM; on a GPU the build times both variants on
the layer's input and keeps the faster (the note says which, with both times). On the CPU the
compiled variant is not tried: there is no device time to choose by.

`torch._int_mm` on CUDA refuses M <= 16 and K or N not a multiple of 8 (ATen's
`_int_mm_out_cuda` checks, the same under torch.compile, which calls it as an extern kernel):
such layers are `unsupported`, with that rule as the reason. Layers other than `quant: int8`
linears are `unsupported` too: this backend is only the int8 peer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from opbench.backends.base import Built, Unsupported, Weights, singles, torch_dtype
from opbench.ops.base import numel
from opbench.ops.functional import activate
from opbench.spec.model import LayerSpec, ModelSpec, TimingSpec

if TYPE_CHECKING:
    import torch

# Timing used at build to choose between eager and compiled: short, L2 flushed like the run.
CHOICE_TIMING = TimingSpec(warmup_ms=10.0, rep_ms=20.0, rounds=3, flush_l2=True)
VARIANTS = ("auto", "eager", "compile")


def int_mm_refusal(m: int, k: int, n: int, device: str) -> str | None:
    """Why `torch._int_mm` on `device` refuses an [m, k] x [k, n] product, or None.

    The CUDA rules are ATen's (`_int_mm_out_cuda`); the CPU kernel takes any shape."""
    if not device.startswith("cuda"):
        return None
    if m <= 16:
        return f"torch._int_mm on CUDA needs more than 16 rows (tokens); this layer has M = {m}"
    for name, size in (("K (in_features)", k), ("N (out_features)", n)):
        if size % 8:
            return f"torch._int_mm on CUDA needs {name} to be a multiple of 8; got {size}"
    return None


def quantize_per_row(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row of a 2-D v: (q int8, s float32 [rows, 1]), v ≈ s · q.

    s = max|row| / 127; q = v · (127 / max|row|), clamped to [-127, 127], rounded half away
    from zero: the Triton quantizer's arithmetic, step for step. A zero row gives s = 0, q = 0.
    """
    import torch

    v32 = v.float()
    absmax = v32.abs().amax(dim=1, keepdim=True)
    scaled = (v32 * (127.0 / absmax.clamp_min(1e-30))).clamp(-127.0, 127.0)
    q = torch.where(scaled >= 0, scaled + 0.5, scaled - 0.5).trunc().to(torch.int8)
    return q, absmax / 127.0


def int8_linear(
    weight_t: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """x [..., K] in float16/bfloat16 → y [..., N] in x's dtype, through torch._int_mm.

    weight_t: Wqᵀ [K, N], a transposed view of the contiguous [N, K] int8 weight (the layout
    cuBLASLt's int8 GEMM takes); weight_scale: sw, float32 [N]; bias: float32 [N] or None."""
    import torch

    k, n = weight_t.shape

    def forward(x: torch.Tensor) -> torch.Tensor:
        xq, x_scale = quantize_per_row(x.reshape(-1, k))
        acc = torch._int_mm(xq, weight_t)
        y = acc.float() * x_scale * weight_scale
        if bias is not None:
            y = y + bias
        return activate(y, activation).to(x.dtype).reshape(*x.shape[:-1], n)

    return forward


class TorchInt8:
    name = "torch-int8"
    #: What the notes call this peer's GEMM.
    label = "torch._int_mm W8A8"
    #: "auto": on a GPU time eager and compiled at build and keep the faster; on the CPU eager.
    #: "eager" / "compile": that variant, untimed (tests; forcing one to compare).
    variant = "auto"
    compiler: str | Callable = "inductor"  # tests swap in a cheap Dynamo backend

    def unavailable_reason(self, device: str) -> str | None:
        import torch

        if not hasattr(torch, "_int_mm"):
            return f"torch {torch.__version__} has no torch._int_mm"
        return None

    def plan(self, model: ModelSpec) -> list[tuple[int, ...]]:
        return singles(model)

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        (layer,) = layers
        require_quant_linear(self.name, layer, "int8")
        k, n = layer.input_shape[-1], layer.params["out_features"]
        m = numel(layer.input_shape[:-1])
        refusal = int_mm_refusal(m, k, n, device)
        if refusal:
            raise Unsupported(refusal)
        dtype = torch_dtype(layer.dtype)
        w = weights[0]
        # Rounded to the layer's dtype first, as every backend's weights are.
        weight_q, weight_scale = quantize_per_row(w["weight"].to(dtype))
        bias = w["bias"].to(dtype).float() if "bias" in w else None
        eager = int8_linear(
            weight_q.t(), weight_scale.reshape(-1), bias, layer.params["activation"]
        )

        probe = torch.randn(layer.input_shape, device=device, dtype=dtype)
        return self._built(eager, probe, device)

    def _built(self, eager: Callable, probe: torch.Tensor, device: str) -> Built:
        """The Built of the variant `_pick` chooses, with its note and the time choosing took."""
        import torch

        start = time.perf_counter()
        fn, note = self._pick(eager, probe, device)
        return Built(
            fn=torch.no_grad()(fn),
            note=note,
            tuning_s=time.perf_counter() - start,
            plan={"variant": "compile" if fn is not eager else "eager"},
        )

    def _pick(self, eager: Callable, probe: torch.Tensor, device: str) -> tuple[Callable, str]:
        """The variant to run and the note that says which and why."""
        variant = self.variant
        if variant not in VARIANTS:
            raise ValueError(f"{self.name} variant must be one of {VARIANTS}, got {variant!r}")
        _run_once(eager, probe)  # _int_mm's own refusals surface here, as unsupported
        if variant == "eager" or (variant == "auto" and not device.startswith("cuda")):
            why = (
                "asked for"
                if variant == "eager"
                else "on the CPU the compiled variant is not tried"
            )
            return eager, f"{self.label}, eager ({why})"
        compiled = self._compile(eager)
        _run_once(compiled, probe)
        if variant == "compile":
            return compiled, f"{self.label} under torch.compile (asked for)"
        return choose_faster(eager, compiled, probe, device, self.label)

    def _compile(self, eager: Callable) -> Callable:
        import torch

        from opbench.backends.torch_compile import with_own_code

        return torch.compile(with_own_code(eager), dynamic=False, backend=self.compiler)


def _run_once(fn: Callable, x: torch.Tensor) -> None:
    import torch

    try:
        with torch.no_grad():
            fn(x)
    except RuntimeError as exc:
        # A shape rule of a newer torch that int_mm_refusal (or the fp8 peer's rule) does not
        # know yet.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if any(rule in first for rule in ("_int_mm", "_scaled_mm", "needs to be", "must be")):
            raise Unsupported(f"torch refused this layer: {first}") from None
        raise


def require_quant_linear(backend: str, layer: LayerSpec, quant: str) -> None:
    """Unsupported unless `layer` is a float16/bfloat16 linear with this `quant`."""
    if layer.op != "linear" or layer.quant != quant:
        what = (f"a {layer.op} layer" if layer.op != "linear"
                else "an unquantized linear" if layer.quant == "none"
                else f"a quant={layer.quant} linear")  # fmt: skip
        raise Unsupported(f"{backend} runs only `quant: {quant}` linear layers; this is {what}")
    if layer.dtype not in ("float16", "bfloat16"):
        raise Unsupported(
            f"{quant} linear writes float16/bfloat16; a {layer.dtype} layer has no {quant} path"
        )


def choose_faster(
    eager: Callable, compiled: Callable, x: torch.Tensor, device: str,
    label: str = TorchInt8.label,
) -> tuple[Callable, str]:  # fmt: skip
    """Time both variants on x (median of short flushed rounds); the faster and a note."""
    import torch

    from opbench.measure.timer import time_callable

    def median_ms(fn: Callable) -> float:
        with torch.no_grad():
            measurement = time_callable(lambda: fn(x), CHOICE_TIMING, device)
        samples = sorted(t for r in measurement.rounds for t in r)
        return samples[len(samples) // 2]

    eager_ms, compiled_ms = median_ms(eager), median_ms(compiled)
    times = f"compiled {compiled_ms:.4f} ms, eager {eager_ms:.4f} ms at build"
    if compiled_ms < eager_ms:
        return compiled, f"{label} under torch.compile, the faster ({times})"
    return eager, f"{label}, eager, the faster ({times})"
