"""The Triton backend's table: for each op, how to build its kernel from a layer and its
weights. This is where the layer's settings (quant, activation, fusion) pick a kernel; the
kernel modules themselves know nothing of suites or of each other's variants.

A builder returns a `LayerKernel`: `bind(*xs)` -> `BoundKernels` (kernels/launch.py), the
once-per-input step, and `kernel(*xs)` -> the output; `xs` are the layer's inputs in its
`inputs:` order (one for most ops: `LayerKernel(lambda x: ...)`; a join's builder is written
`LayerKernel(lambda a, b: bind_add(a, b))`). Build-time work (casting, quantizing and
packing weights, folding batchnorm) happens in the builder, before timing. A builder may also
return a plain function x -> output (a view, or a test's stand-in): it then has no bind step.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from opbench.backends.layer_kernel import LayerKernel
from opbench.kernels import Unsupported
from opbench.ops.kinds import epilogue_ops
from opbench.spec.model import LayerSpec

QUANTS = ("none", "int8")  # conv2d; attention: ATTENTION_QUANTS; linear: ops.quant.LINEAR_QUANTS
ATTENTION_QUANTS = ("none", "int8", "fp8")
# Test-only: demonstrates the CI regression gate on a GPU with unchanged kernel code
# (docs/ci.md). Read once per layer build; the kernel takes it as `deliberately_slow`.
SLOW_LAYERNORM_ENV = "OPBENCH_TEST_SLOW_LAYERNORM"


Builder = Callable[[LayerSpec, dict[str, Any]], "LayerKernel | Callable[[Any], Any]"]


def check_quant(op: str, quant: str, allowed: tuple[str, ...] = QUANTS) -> None:
    if quant not in allowed:
        raise Unsupported(f"{op} quant {quant!r} is not supported ({' | '.join(allowed)})")


def _linear(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    """The linear kernel the layer's quant picks (kernels/linear*.py)."""
    from opbench.kernels.gemm.linear import Linear
    from opbench.kernels.gemm.linear_fp8 import Fp8Linear
    from opbench.kernels.gemm.linear_int8 import Int8Linear
    from opbench.kernels.gemm.linear_weight_only import Int4WeightLinear, Int8WeightLinear
    from opbench.ops.quant import LINEAR_QUANTS

    p = layer.params
    quant = p["quant"]
    check_quant("linear", quant, LINEAR_QUANTS)
    args = (w["weight"], w.get("bias"))
    if quant == "int4-weight":
        layer_kernel = Int4WeightLinear(*args, p["activation"], group_size=p["group_size"])
    else:
        cls = {"int8": Int8Linear, "fp8": Fp8Linear, "int8-weight": Int8WeightLinear}.get(
            quant, Linear
        )
        layer_kernel = cls(*args, activation=p["activation"])
    return LayerKernel(layer_kernel.bind, takes_out=True)


def conv2d(
    layer: LayerSpec,
    w: dict[str, Any],
    batchnorm: dict[str, Any] | None = None,
    activation: str | None = None,
) -> LayerKernel:
    """The conv, alone or with a folded batchnorm and a fused activation; a depthwise conv
    (groups = channels) takes its own kernel (kernels/conv/depthwise.py)."""
    from opbench.kernels.conv.conv import build_conv2d
    from opbench.kernels.conv.conv_int8 import build_conv2d_int8

    p = layer.params
    check_quant("conv2d", p["quant"])
    if p["groups"] != 1 and p["groups"] == layer.input_shape[1] == p["out_channels"]:
        from opbench.kernels.conv.depthwise import build_depthwise_conv2d

        if p["quant"] != "none":
            raise Unsupported(f"depthwise conv2d quant {p['quant']!r}: float only")
        dw = build_depthwise_conv2d(
            w["weight"], w.get("bias"), stride=p["stride"], padding=p["padding"],
            dilation=p["dilation"], activation=activation or p["activation"], batchnorm=batchnorm,
        )  # fmt: skip
        return LayerKernel(dw.bind, takes_out=True)
    build = build_conv2d_int8 if p["quant"] == "int8" else build_conv2d
    conv = build(
        w["weight"], w.get("bias"), stride=p["stride"], padding=p["padding"],
        dilation=p["dilation"], groups=p["groups"], activation=activation or p["activation"],
        batchnorm=batchnorm,
    )  # fmt: skip
    return LayerKernel(conv.bind, takes_out=True)


def _conv2d(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    return conv2d(layer, w)


def _attention(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    """Self-attention (fp16/bf16/fp32, int8 or fp8); grouped heads or a KV cache go to the
    split-K kernel, which has no quantized form; three inputs (separate_qkv) to whichever
    of those fits their shapes."""
    from opbench.kernels.attention.attention_decode import CacheAttention
    from opbench.kernels.attention.attention_fp8_layer import Fp8Attention
    from opbench.kernels.attention.attention_int8_layer import Int8Attention
    from opbench.kernels.attention.attention_layer import Attention

    p = layer.params
    check_quant("attention", p["quant"], ATTENTION_QUANTS)
    heads, kv_heads = p["heads"], p["kv_heads"] or p["heads"]
    if p["append"]:
        from opbench.kernels.attention.attention_qkv import CacheAppendAttention

        step = CacheAppendAttention(heads=heads, kv_heads=kv_heads, causal=p["causal"],
                                    k_cache=w["k_cache"], v_cache=w["v_cache"])  # fmt: skip
        return LayerKernel(step.bind, takes_out=True)
    if p["separate_qkv"] or p["layout"] == "bhsd":
        from opbench.kernels.attention.attention_qkv import SeparateAttention

        qkv = SeparateAttention(heads=heads, kv_heads=kv_heads, causal=p["causal"],
                                quant=p["quant"], bhsd=p["layout"] == "bhsd")  # fmt: skip
        return LayerKernel(qkv.bind)
    if p["mask"]:
        raise Unsupported("a key mask goes with three inputs (separate_qkv or layout bhsd)")
    if p["kv_len"] is not None or kv_heads != heads:
        if p["quant"] != "none":
            raise Unsupported(f"attention quant {p['quant']!r} covers self-attention with "
                              "kv_heads = heads and no kv_len")  # fmt: skip
        cache = CacheAttention(heads=heads, kv_heads=kv_heads, causal=p["causal"],
                               k_cache=w.get("k_cache"), v_cache=w.get("v_cache"))  # fmt: skip
        return LayerKernel(cache.bind, takes_out=True)
    cls = {"int8": Int8Attention, "fp8": Fp8Attention}.get(p["quant"], Attention)
    layer_kernel = cls(heads=heads, causal=p["causal"], packed_qkv=p["packed_qkv"])
    return LayerKernel(layer_kernel.bind, takes_out=True)


def _permute(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.memory.transpose import bind_permute
    from opbench.ops.registry import get_op

    dims = get_op(layer.op).permutation(len(layer.input_shape), layer.params)
    return LayerKernel(lambda x, out=None: bind_permute(x, dims, out), takes_out=True)


def _softmax(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.memory.softmax import bind_softmax

    return LayerKernel(
        lambda x, out=None: bind_softmax(x, layer.params["dim"], out), takes_out=True
    )


def _layernorm(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.memory.norm import bind_norm

    slow = os.environ.get(SLOW_LAYERNORM_ENV) == "1"
    eps = layer.params["eps"]
    return LayerKernel(
        lambda x, out=None: bind_norm(
            x, w["weight"], w["bias"], eps, out, rms=False, deliberately_slow=slow
        ),
        takes_out=True,
    )


def _rmsnorm(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.memory.norm import bind_norm

    eps = layer.params["eps"]
    return LayerKernel(
        lambda x, out=None: bind_norm(x, w["weight"], None, eps, out, rms=True), takes_out=True
    )


def activation_name(layer: LayerSpec) -> str:
    """The kernels' name of an activation layer's function (kernels/epilogue.py), as its op
    declares it (`Op.epilogue_name`: gelu_tanh for `gelu` with `approximate: tanh`)."""
    from opbench.ops.registry import get_op

    name = get_op(layer.op).epilogue_name(layer.params)
    if name is None:
        raise Unsupported(f"op {layer.op!r} has no epilogue function")
    return name


def _activation(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.memory.activation import bind_activation

    name = activation_name(layer)
    return LayerKernel(lambda x, out=None: bind_activation(x, name, out), takes_out=True)


def unary(load: Callable[[], Callable]) -> Builder:
    """The builder of an op whose kernel takes the input alone: the binder `load()` returns
    (`load` imports it, so that a kernel module loads only when a layer is built; one line of
    the table below is all a new elementwise op needs here)."""

    def build(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
        bind = load()
        return LayerKernel(bind, takes_out="out" in inspect.signature(bind).parameters)

    return build


def binary(load: Callable[[], Callable]) -> Builder:
    """The builder of an op whose kernel takes its two inputs alone: `load()(a, b)`, the
    binder imported when a layer is built."""

    def build(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
        bind = load()
        if "out" in inspect.signature(bind).parameters:
            return LayerKernel(lambda a, b, out=None: bind(a, b, out=out), takes_out=True)
        return LayerKernel(lambda a, b: bind(a, b))

    return build


def _sigmoid_binder() -> Callable:
    from opbench.kernels.memory.sigmoid import bind_sigmoid

    return bind_sigmoid


def _add_binder() -> Callable:
    from opbench.kernels.memory.binary import bind_add

    return bind_add


def _mul_binder() -> Callable:
    from opbench.kernels.memory.binary import bind_mul

    return bind_mul


def _matmul_binder() -> Callable:
    from opbench.kernels.gemm.matmul import bind_matmul

    return bind_matmul


def _concat(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.memory.concat import bind_concat

    axis = layer.params["axis"]
    return LayerKernel(lambda *xs, out=None: bind_concat(xs, axis, out), takes_out=True)


def _piece(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel | Callable[[Any], Any]:
    """slice / split: the view when the piece is contiguous in the input (no kernel runs,
    ops/slicing.py decides from the layer's shapes), else the copy kernel."""
    from opbench.kernels.memory.slicing import bind_slice, slice_view
    from opbench.ops.registry import get_op

    axis, start, length, step = get_op(layer.op).piece(layer.input_shape, layer.params)
    end = start + (length - 1) * step + 1
    if get_op(layer.op).view_layer(layer.input_shape, layer.params):
        return lambda x: slice_view(x, axis, start, end, step)
    return LayerKernel(
        lambda x, out=None: bind_slice(x, axis, start, end, step, out), takes_out=True
    )


def _reshape(layer: LayerSpec, w: dict[str, Any]) -> Callable[[Any], Any]:
    shape = tuple(layer.params["shape"])
    # Contiguous input: the same memory under another shape; no bytes move, no kernel runs.
    return lambda x: x.view(x.shape[0], *shape)


def _pool(is_max: bool) -> Builder:
    def build(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
        from opbench.kernels.memory.pool import bind_pool2d
        from opbench.ops.pool import AvgPool2d, MaxPool2d

        p = layer.params
        stride = (MaxPool2d if is_max else AvgPool2d).stride(p)
        window = (p["kernel_size"], stride, p["padding"])
        ceil_mode = bool(p.get("ceil_mode"))
        return LayerKernel(
            lambda x, out=None: bind_pool2d(x, *window, out, is_max=is_max, ceil_mode=ceil_mode),
            takes_out=True,
        )

    return build


def _batchnorm(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.host import fold_batchnorm
    from opbench.kernels.memory.batchnorm import bind_batchnorm2d

    folded = fold_batchnorm(
        w["running_mean"], w["running_var"], w["weight"], w["bias"], layer.params["eps"]
    )
    scale, shift = (t.float().contiguous() for t in folded)
    return LayerKernel(lambda x, out=None: bind_batchnorm2d(x, scale, shift, out), takes_out=True)


def _embedding(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    from opbench.kernels.memory.embedding import bind_embedding

    p = layer.params
    return LayerKernel(lambda ids, out=None: bind_embedding(
        ids, w["weight"], out, positions=p["positions"], offset=p["offset"]), takes_out=True)  # fmt: skip


def _rope(layer: LayerSpec, w: dict[str, Any]) -> LayerKernel:
    """The rotation in the layer's layout; the angles are computed in the kernel (the
    layer's cos/sin state, the torch baseline's tables, is not read)."""
    from opbench.kernels.memory.rope import bind_rope
    from opbench.ops.registry import get_op

    p = layer.params
    _, d, rotated = get_op("rope").geometry(layer.input_shape, p)
    kw = dict(layout=p["layout"], head_dim=d, interleaved=p["style"] == "interleaved",
              theta=p["theta"], offset=p["offset"],
              rotated_heads=rotated // d if p["layout"] != "bhsd" else None)  # fmt: skip
    return LayerKernel(lambda x, out=None: bind_rope(x, out, **kw), takes_out=True)


def _flatten(layer: LayerSpec, w: dict[str, Any]) -> Callable[[Any], Any]:
    start = layer.params["start_dim"]
    # Contiguous input: flattening re-labels the same memory, no bytes move and no kernel runs.
    return lambda x: x.view(*x.shape[:start], -1)


BUILDERS: dict[str, Builder] = {
    "linear": _linear,
    "conv2d": _conv2d,
    "attention": _attention,
    "transpose": _permute,
    "permute": _permute,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
    # Every op an epilogue can apply runs alone on the epilogue's elementwise kernel.
    **dict.fromkeys(epilogue_ops(), _activation),
    "sigmoid": unary(_sigmoid_binder),
    "maxpool2d": _pool(is_max=True),
    "avgpool2d": _pool(is_max=False),
    "batchnorm2d": _batchnorm,
    "flatten": _flatten,
    "add": binary(_add_binder),
    "mul": binary(_mul_binder),
    "matmul": binary(_matmul_binder),
    "concat": _concat,
    "reshape": _reshape,
    "slice": _piece,
    "split": _piece,
    "embedding": _embedding,
    "rope": _rope,
}

# Ops that run no kernel (a view of their input); slice and split are views only for some
# shapes (`is_view_layer`).
VIEWS = {"flatten", "reshape"}


def is_view_layer(layer: LayerSpec) -> bool:
    """The layer runs no kernel: its output is a view of its input (`Op.view_layer`)."""
    from opbench.ops.registry import get_op

    op = get_op(layer.op)
    return layer.op in VIEWS or op.view_layer(op.layer_shape(layer), layer.params)


# Ops whose builders keep batchnorm statistics in float32 (folded at build time).
FLOAT32_WEIGHTS = {"batchnorm2d"}
