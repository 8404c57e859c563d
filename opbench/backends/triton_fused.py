"""Builders of the triton backend's fused groups (triton_fusion.py finds them): from a group's
layers (walk order) and their weights, the one kernel that computes the group.

A group's kernel takes the group's external inputs in order of first use (the values its layers
read that no layer of the group makes: `Graph.external_inputs`, recomputed here from the
layers' own `inputs`), so `bind(*xs)` maps them back to names and hands each kernel what it
needs: the conv its input and skip, the SwiGLU GEMM its one input, the add → norm kernel the
add's two operands. Build-time work (casting, folding, interleaving weights) happens here,
before timing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opbench.backends.base import Weights, cast_weights
from opbench.backends.triton_fusion import EPILOGUE_QUANTS, group_kind
from opbench.backends.triton_table import LayerKernel, activation_name, check_quant
from opbench.kernels import Unsupported
from opbench.spec.model import LayerSpec


def external_inputs(layers: Sequence[LayerSpec]) -> tuple[str, ...]:
    """The values the group reads that none of its layers makes, in order of first use."""
    made = {layer.name for layer in layers}
    found: dict[str, None] = {}
    for layer in layers:
        for value in layer.inputs:
            if value not in made:
                found.setdefault(value, None)
    return tuple(found)


def _by_name(layers: Sequence[LayerSpec], bind: Callable[..., Any]) -> LayerKernel:
    """A LayerKernel whose bind receives the external inputs by value name, and the buffers
    to write: `bind(values, out, extra)` (None and () for buffers of its own)."""
    names = external_inputs(layers)

    def bind_all(*xs: Any, out: Any = None, extra: tuple[Any, ...] = ()) -> Any:
        if len(xs) != len(names):
            raise TypeError(
                f"the group reads {len(names)} inputs ({', '.join(names)}), got {len(xs)}"
            )
        return bind(dict(zip(names, xs, strict=True)), out, extra)

    return LayerKernel(bind_all, takes_out=True)


def _skip_of(add: LayerSpec, head: Sequence[LayerSpec]) -> str:
    """The add's operand read in the epilogue (the residual): the one no member of the group
    makes. The other must be the output of the member just before the add, the value the
    epilogue holds; any other wiring is not this kernel's."""
    made = {layer.name for layer in head}
    inner = [v for v in add.inputs if v in made]
    skip = [v for v in add.inputs if v not in made]
    if inner != [head[-1].name] or len(skip) != 1:
        raise Unsupported(
            f"add {add.name!r} reads {list(add.inputs)}: a fused epilogue adds one outside "
            f"value to {head[-1].name!r}"
        )
    return skip[0]


def _conv(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """conv2d → [batchnorm2d] → [add] → [activation]: the batchnorm folded into the weights,
    the add's other operand read in the epilogue, then the activation."""
    conv = layers[0]
    p = conv.params
    batchnorm = add = None
    activation = "none"
    for k, (layer, w) in enumerate(zip(layers[1:], weights[1:], strict=True), 1):
        if layer.op == "batchnorm2d":
            batchnorm = {**{k: v.float() for k, v in w.items()}, "eps": layer.params["eps"]}
        elif layer.op == "add":
            add = _skip_of(layer, layers[:k])
        else:
            activation = activation_name(layer)
    w = cast_weights(weights[0], conv.dtype)
    geometry = dict(stride=p["stride"], padding=p["padding"], dilation=p["dilation"])
    if p["groups"] != 1:
        from opbench.kernels.conv.depthwise import build_depthwise_conv2d

        if add is not None:
            raise Unsupported("a depthwise conv takes no residual in its epilogue")
        kernel = build_depthwise_conv2d(w["weight"], w.get("bias"), activation=activation,
                                        batchnorm=batchnorm, **geometry)  # fmt: skip
        return _by_name(layers, lambda v, out, _: kernel.bind(v[conv.inputs[0]], out))
    from opbench.kernels.conv.conv import build_conv2d
    from opbench.kernels.conv.conv_int8 import build_conv2d_int8

    check_quant("conv2d", p["quant"])
    build = build_conv2d_int8 if p["quant"] == "int8" else build_conv2d
    kernel = build(w["weight"], w.get("bias"), groups=1, activation=activation,
                   batchnorm=batchnorm, **geometry)  # fmt: skip
    skip = add
    return _by_name(
        layers,
        lambda v, out, _: kernel.bind(v[conv.inputs[0]], out, residual=v[skip] if skip else None),
    )


def _swiglu(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """gate and up linears, [silu], mul: one GEMM over interleaved weights."""
    from opbench.kernels.gemm.swiglu import build_swiglu

    by_name = {layer.name: (layer, w) for layer, w in zip(layers, weights, strict=True)}
    mul = layers[-1] if layers[-1].op == "mul" else next(la for la in layers if la.op == "mul")
    gate = up = None
    for value in mul.inputs:
        layer, _ = by_name[value]
        if layer.op == "silu":
            gate = by_name[layer.inputs[0]]
        elif layer.params.get("activation") == "silu":
            gate = by_name[value]
        else:
            up = by_name[value]
    assert gate is not None and up is not None, "triton_fusion only groups gate, up and mul"
    (g_layer, g_w), (u_layer, u_w) = gate, up
    check_quant("linear", g_layer.params["quant"])
    gw, uw = cast_weights(g_w, g_layer.dtype), cast_weights(u_w, u_layer.dtype)
    kernel = build_swiglu(gw["weight"], uw["weight"], gw.get("bias"), uw.get("bias"),
                          quant=g_layer.params["quant"])  # fmt: skip
    source = g_layer.inputs[0]
    return _by_name(layers, lambda v, out, _: kernel.bind(v[source], out))


def _epilogue_linear(linear: LayerSpec, weights: Weights, activation: str):
    """The linear kernel of the layer's quant (16-bit, int8 or fp8: EPILOGUE_QUANTS) with
    `activation` in its epilogue."""
    from opbench.kernels.gemm.linear import Linear
    from opbench.kernels.gemm.linear_fp8 import Fp8Linear
    from opbench.kernels.gemm.linear_int8 import Int8Linear

    quant = linear.params["quant"]
    check_quant("linear", quant, EPILOGUE_QUANTS)
    w = cast_weights(weights, linear.dtype)
    cls = {"int8": Int8Linear, "fp8": Fp8Linear}.get(quant, Linear)
    return cls(w["weight"], w.get("bias"), activation=activation)


def _linear_add(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """linear → add: the add's other operand read in the GEMM's epilogue."""
    linear, add = layers
    kernel = _epilogue_linear(linear, weights[0], linear.params["activation"])
    source, skip = linear.inputs[0], _skip_of(add, (linear,))
    return _by_name(layers, lambda v, out, _: kernel.bind(v[source], out, residual=v[skip]))


def _linear_act(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """linear → an activation with an epilogue (ops/kinds.py): it runs in the GEMM's epilogue."""
    linear, act = layers
    kernel = _epilogue_linear(linear, weights[0], activation_name(act))
    source = linear.inputs[0]
    return _by_name(layers, lambda v, out, _: kernel.bind(v[source], out))


def _add_norm(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """add → layernorm/rmsnorm: the sum and its normalisation in one pass; the sum is the
    kernel's `extra` output."""
    from opbench.kernels.memory.norm import bind_norm

    add, norm = layers
    w = cast_weights(weights[1], norm.dtype)
    rms = norm.op == "rmsnorm"
    a, b = add.inputs
    eps = norm.params["eps"]
    kernel = _by_name(
        layers,
        lambda v, out, extra: bind_norm(
            v[a],
            w["weight"],
            w.get("bias"),
            eps,
            out,
            rms=rms,
            residual=v[b],
            sum_out=extra[0] if extra else None,
        ),  # fmt: skip
    )
    kernel.extra_names = (add.name,)
    return kernel


def _codes_linear(linear: LayerSpec, weights: Weights):
    """The fp8 or int8 linear of a norm_*/glu_* group: its GEMM reads codes (CodesInput)."""
    from opbench.kernels.gemm.linear_fp8 import Fp8Linear
    from opbench.kernels.gemm.linear_int8 import Int8Linear

    w = cast_weights(weights, linear.dtype)
    cls = {"fp8": Fp8Linear, "int8": Int8Linear}[linear.quant]
    return cls(w["weight"], w.get("bias"), activation=linear.params["activation"])


def _residual_of(layers: Sequence[LayerSpec]) -> tuple[Sequence[LayerSpec], str | None]:
    """(the layers before a trailing residual add, the add's other operand) or (layers, None)."""
    if layers[-1].op != "add":
        return layers, None
    *head, add = layers
    return head, _skip_of(add, head)


def _norm_codes(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """layernorm/rmsnorm → fp8 (or int8) linear(s) [→ add]: the norm writes e4m3 (int8) codes
    and row scales of its fp32 output once, each linear's GEMM reads them (no 16-bit output,
    no quantize pass);
    a trailing add (one linear only) in that GEMM's epilogue. With several linears the last
    is the group's output and the others its `extra` outputs, in walk order."""
    from opbench.kernels.launch import BoundKernels
    from opbench.kernels.memory.norm import bind_norm

    head, skip = _residual_of(layers)
    norm, *linears = head
    w = cast_weights(weights[0], norm.dtype)
    qls = [_codes_linear(la, wl) for la, wl in zip(linears, weights[1 : len(head)], strict=True)]
    rms, eps, source = norm.op == "rmsnorm", norm.params["eps"], norm.inputs[0]

    def bind(v, out, extra):
        x = v[source]
        rows = tuple(x.shape[:-1])
        xq, sx = qls[0].code_buffers(rows, x.device)
        codes = bind_norm(x, w.get("weight"), w.get("bias"), eps, xq.view(x.shape), rms=rms,
                          scale_out=sx, code_dtype=qls[0].code_dtype)  # fmt: skip
        buffers = [*(extra or [None] * (len(qls) - 1)), out]
        gemms = [
            ql.bind_gemm_on(xq, sx, rows, x.dtype, buf, residual=v[skip] if skip else None)
            for ql, buf in zip(qls, buffers, strict=True)
        ]
        outs = [g.out for g in gemms]
        if not any(g.calls for g in gemms):  # no rows: nothing to launch
            return BoundKernels.of([], outs[-1], extra=outs[:-1])
        return BoundKernels.of(
            [*codes.calls, *(c for g in gemms for c in g.calls)], outs[-1],
            [*codes.choices, *(c for g in gemms for c in g.choices)],
            keep=[xq, sx, *codes.keep, *(k for g in gemms for k in g.keep)], extra=outs[:-1],
        )  # fmt: skip

    kernel = _by_name(layers, bind)
    kernel.extra_names = tuple(la.name for la in linears[:-1])
    return kernel


def _glu_codes(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """[silu] → mul → fp8 (or int8) linear [→ add]: the row quantizer computes silu(gate) * up
    (or a * b) in fp32 and writes its codes and row scales, the GEMM reads them (and adds the
    residual in its epilogue: LLaMA's down projection + ffn_res)."""
    from opbench.kernels.launch import BoundKernels
    from opbench.kernels.memory.quantize import quantize_rows_call

    head, skip = _residual_of(layers)
    *front, mul, linear = head
    ql = _codes_linear(linear, weights[len(head) - 1])
    gate, up = mul.inputs
    mode = "mul"
    if front:  # silu(gate) * up, the silu's input read instead of its output
        (silu,) = front
        up = _skip_of(mul, (silu,))
        gate, mode = silu.inputs[0], "silu_mul"

    def bind(v, out, _):
        g, x = v[gate], v[up]
        k = x.shape[-1]

        def produce(q, s):
            call, choice = quantize_rows_call(x.view(-1, k), q, s, gate=g.view(-1, k),
                                              gate_mode=mode)  # fmt: skip
            return BoundKernels.of([call], q, [choice])

        residual = v[skip] if skip else None
        return ql.bind_on_codes(tuple(x.shape[:-1]), x.dtype, x.device, produce, out=out,
                                residual=residual)  # fmt: skip

    return _by_name(layers, bind)


def _linear_rope(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """linear → rope (rows or packed): the rotation in the GEMM's epilogue (linear_rope.py)."""
    from opbench.kernels.gemm.linear_rope import RopeLinear
    from opbench.ops.registry import get_op

    linear, rope = layers
    check_quant("linear", linear.params["quant"], ("none",))
    p = rope.params
    _, d, rotated = get_op("rope").geometry(rope.input_shape, p)
    w = cast_weights(weights[0], linear.dtype)
    kernel = RopeLinear(w["weight"], w.get("bias"), head_dim=d, rotated=rotated,
                        interleaved=p["style"] == "interleaved", theta=p["theta"],
                        offset=p["offset"])  # fmt: skip
    source = linear.inputs[0]
    return _by_name(layers, lambda v, out, _: kernel.bind(v[source], out))


def _rope_append(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> LayerKernel:
    """rope (packed q | k | v) → attention with the KV-cache append: the rope kernel writes
    the rotated q to a buffer of its own and the rotated k and the v straight into the cache's
    last slots (memory/rope.py APPEND), then the split-K kernel attends over the cache: one
    launch fewer, and no packed rope output written and read back."""
    from opbench.kernels.attention.attention_decode import CacheAttention
    from opbench.kernels.launch import BoundKernels
    from opbench.kernels.memory.rope import bind_rope
    from opbench.ops.registry import get_op

    rope, attn = layers
    p, a = rope.params, attn.params
    _, d, rotated = get_op("rope").geometry(rope.input_shape, p)
    caches = cast_weights(weights[1], attn.dtype)
    over = CacheAttention(heads=a["heads"], kv_heads=a["kv_heads"] or a["heads"],
                          causal=a["causal"], k_cache=caches["k_cache"],
                          v_cache=caches["v_cache"])  # fmt: skip
    source = rope.inputs[0]

    def bind(v, out, _):
        q = bind_rope(v[source], layout="packed", head_dim=d, rotated_heads=rotated // d,
                      interleaved=p["style"] == "interleaved", theta=p["theta"],
                      offset=p["offset"], caches=(caches["k_cache"], caches["v_cache"]))  # fmt: skip
        step = over.bind(q.out, out)
        return BoundKernels.of([*q.calls, *step.calls], step.out, [*q.choices, *step.choices],
                               keep=[q.out, *q.keep, *step.keep])  # fmt: skip

    return _by_name(layers, bind)


FUSED_BUILDERS = {"norm_fp8": _norm_codes, "glu_fp8": _glu_codes, "norm_int8": _norm_codes,
                  "glu_int8": _glu_codes, "conv": _conv, "swiglu": _swiglu, "linear_add": _linear_add,
                  "linear_act": _linear_act, "add_norm": _add_norm,
                  "linear_rope": _linear_rope, "rope_append": _rope_append}  # fmt: skip


def build_fused(layers: Sequence[LayerSpec], weights: Sequence[Weights]) -> tuple[LayerKernel, str]:
    """The group's kernel and the note that says what it fused."""
    kind = group_kind(layers)
    kernel = FUSED_BUILDERS[kind](layers, weights)
    return kernel, "fused " + " → ".join(f"{layer.name} ({layer.op})" for layer in layers)
